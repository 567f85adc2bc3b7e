"""A message's JSON header and binary section in one Kafka value: the Open Inference Protocol's binary
tensor data extension, carried over Kafka.

OIP's HTTP binding sends a request body of a JSON header followed by the tensors' raw bytes, and says
where the JSON ends in the ``Inference-Header-Content-Length`` HTTP header. A Kafka value says it itself:

    value := MAGIC  header_length (4 bytes, big-endian)  header (JSON)  binary section

so every reader of a topic (the scheduler, a worker, a restarted scheduler reading back what it handed on,
a replay) splits a value without Kafka headers. A value with no binary section is plain JSON, as before:
a JSON value starts with ``{``, never with `MAGIC`. A front door turns an OIP HTTP body into a value by
putting `MAGIC` and the header length before it, and forwards the bytes untouched.

The scheduler splits a query, reads its header and forwards its binary section as a slice of the value
it read, never decoding it; a worker splits the batch's section per query (`schemas.InferTensor`).
"""
from __future__ import annotations

import struct
from collections.abc import Iterable

#: the largest Kafka message a producer, the broker and a consumer pass (`infra/kafka` says the same)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: what begins a value that has a binary section (a JSON value begins with ``{``)
MAGIC = b"\x00OIP"
_LENGTH = struct.Struct(">I")
PREFIX_BYTES = len(MAGIC) + _LENGTH.size


class FrameError(ValueError):
    """A value that claims a binary section but is not framed as one."""


def pack(header: bytes, binary: Iterable[bytes | memoryview] = ()) -> bytes:
    """One Kafka value: ``header`` alone when there is no binary data, else framed with it."""
    parts = [part for part in binary if len(part)]
    if not parts:
        return header
    return b"".join([MAGIC, _LENGTH.pack(len(header)), header, *parts])


def unpack(value: bytes) -> tuple[bytes, memoryview]:
    """A value's JSON header (copied: it is small, and a JSON parser takes bytes) and its binary section
    (empty for a plain JSON value), which is not copied."""
    if not value.startswith(MAGIC):
        return value, memoryview(b"")
    if len(value) < PREFIX_BYTES:
        raise FrameError(f"a framed message of {len(value)} bytes is shorter than its {PREFIX_BYTES}-byte prefix")
    (length,) = _LENGTH.unpack_from(value, len(MAGIC))
    if PREFIX_BYTES + length > len(value):
        raise FrameError(f"the framed message says its JSON header is {length} bytes, but only "
                         f"{len(value) - PREFIX_BYTES} follow its prefix")
    view = memoryview(value)
    return bytes(view[PREFIX_BYTES:PREFIX_BYTES + length]), view[PREFIX_BYTES + length:]


def framed_size(header_bytes: int, binary_bytes: int) -> int:
    """The value's size `pack` makes of a header and a binary section of these sizes."""
    return header_bytes + (PREFIX_BYTES + binary_bytes if binary_bytes else 0)
