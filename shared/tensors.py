"""OIP tensors (`schemas.InferTensor`) <-> numpy arrays and encoded images.

A client builds a query's inputs here: `encode` writes a small array as a JSON ``data`` list (what a
person writes by hand, or with kcat), `encode_binary` and `encode_images` put an array's raw bytes or
encoded images in the message's binary section (`schemas.wire`), which no forwarder decodes. A worker
reads them back with `read_batch`: one `QueryInputs` per query, each its own tensor and binary slice, so a
query whose data is bad fails alone.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from schemas import BYTES_LENGTH_PREFIX, NUMPY_DATATYPES, InferTensor, TensorParameters

INPUT_NAME = "input"
_DATATYPES = {numpy: oip for oip, numpy in NUMPY_DATATYPES.items()}
_LENGTH = struct.Struct("<I")


class Inputs(NamedTuple):
    """A query's input tensors and the binary section they take, in order."""

    tensors: list[InferTensor]
    binary: bytes


def _datatype(array: np.ndarray) -> str:
    datatype = _DATATYPES.get(array.dtype.name)
    if datatype is None:
        raise ValueError(f"arrays of {array.dtype} have no OIP datatype here; use one of {sorted(_DATATYPES)}")
    return datatype


def encode(array: np.ndarray, *, name: str = INPUT_NAME) -> list[InferTensor]:
    """``array`` (rows first) as one tensor with a JSON ``data`` list: for small inputs."""
    array = np.asarray(array)
    data = array.reshape(-1).tolist()
    return [InferTensor(name=name, shape=list(array.shape), datatype=_datatype(array), data=data)]


def encode_binary(array: np.ndarray, *, name: str = INPUT_NAME) -> Inputs:
    """``array`` (rows first) as one tensor whose raw little-endian bytes are the binary section."""
    array = np.ascontiguousarray(array, dtype=np.asarray(array).dtype.newbyteorder("<"))
    raw = array.tobytes()
    tensor = InferTensor(name=name, shape=list(array.shape), datatype=_datatype(array),
                         parameters=TensorParameters(binary_data_size=len(raw)))
    return Inputs([tensor], raw)


def encode_images(images: Sequence[bytes], *, name: str = INPUT_NAME) -> Inputs:
    """Encoded images (JPEG, PNG files' bytes), one row each, as one ``BYTES`` tensor in the binary section;
    the worker decodes them and prepares them as the variant that serves them was trained."""
    if not images:
        raise ValueError("`images` is empty: a query carries at least one image")
    raw = b"".join(_LENGTH.pack(len(image)) + bytes(image) for image in images)
    tensor = InferTensor(name=name, shape=[len(images)], datatype="BYTES",
                         parameters=TensorParameters(binary_data_size=len(raw)))
    return Inputs([tensor], raw)


class QueryInputs(NamedTuple):
    """One query's input tensor and its bytes of the batch's binary section (empty for JSON data)."""

    tensor: InferTensor
    binary: memoryview


def read_batch(inputs: Sequence[list[InferTensor] | None], binary: bytes | memoryview) -> list[QueryInputs | None]:
    """Each query's input and its slice of ``binary``, query after query (None: the query has none);
    ``ValueError`` when the section's size is not what the tensors declare."""
    view = memoryview(binary)
    declared = sum(t.binary_size or 0 for tensors in inputs for t in tensors or ())
    if declared != len(view):
        raise ValueError(f"the batch's tensors declare {declared} bytes of binary data, but the message carries "
                         f"{len(view)}")
    read, at = [], 0
    for tensors in inputs:
        if not tensors:
            read.append(None)
            continue
        size = tensors[0].binary_size or 0
        read.append(QueryInputs(tensors[0], view[at:at + size]))
        at += sum(t.binary_size or 0 for t in tensors)
    return read


def to_array(query: QueryInputs) -> np.ndarray:
    """A numeric tensor's elements as an array of its shape."""
    tensor = query.tensor
    if tensor.datatype == "BYTES":
        raise ValueError(f"tensor {tensor.name!r} is BYTES, not a numeric tensor")
    dtype = np.dtype(NUMPY_DATATYPES[tensor.datatype]).newbyteorder("<")
    if tensor.data is not None:
        return np.asarray(tensor.data, dtype=dtype).reshape(tensor.shape)
    return np.frombuffer(query.binary, dtype=dtype).reshape(tensor.shape)


def to_elements(query: QueryInputs) -> list[bytes]:
    """A ``BYTES`` tensor's elements (each an encoded image, for an image model); ``ValueError`` when its
    length prefixes do not add up to its data."""
    tensor = query.tensor
    if tensor.datatype != "BYTES":
        raise ValueError(f"tensor {tensor.name!r} is {tensor.datatype}, not BYTES")
    if tensor.data is not None:
        return [text.encode() for text in tensor.data]
    count, view = math.prod(tensor.shape), query.binary
    elements, at = [], 0
    for index in range(count):
        if at + BYTES_LENGTH_PREFIX > len(view):
            raise ValueError(f"tensor {tensor.name!r}: its data ends inside element {index}'s length prefix")
        (length,) = _LENGTH.unpack_from(view, at)
        at += BYTES_LENGTH_PREFIX
        if at + length > len(view):
            raise ValueError(f"tensor {tensor.name!r}: element {index} says {length} bytes, but only "
                             f"{len(view) - at} remain")
        elements.append(bytes(view[at:at + length]))
        at += length
    if at != len(view):
        raise ValueError(f"tensor {tensor.name!r}: {len(view) - at} bytes follow its {count} elements")
    return elements
