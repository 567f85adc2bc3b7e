"""OIP tensors read back per query from a batch's binary section (`shared.tensors`)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from schemas import InferTensor
from shared.tensors import encode, encode_binary, encode_images, read_batch, to_array, to_elements


def test_each_query_gets_its_own_slice_of_the_batch() -> None:
    first, second = encode_binary(np.ones((2, 3), np.float32)), encode_images([b"jpeg-1", b"png"])
    small = encode(np.zeros((1, 3), np.float32))
    read = read_batch([first.tensors, None, small, second.tensors], first.binary + second.binary)
    assert read[1] is None and len(read[2].binary) == 0
    assert np.array_equal(to_array(read[0]), np.ones((2, 3), np.float32))
    assert np.array_equal(to_array(read[2]), np.zeros((1, 3), np.float32))
    assert to_elements(read[3]) == [b"jpeg-1", b"png"]


def test_a_section_of_another_size_than_declared_is_refused() -> None:
    inputs = encode_binary(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="declare 24 bytes of binary data, but the message carries 23"):
        read_batch([inputs.tensors], inputs.binary[:-1])


def _bytes_tensor(raw: bytes, count: int) -> tuple[InferTensor, bytes]:
    return InferTensor(name="input", shape=[count], datatype="BYTES",
                       parameters={"binary_data_size": len(raw)}), raw


@pytest.mark.parametrize(("raw", "count", "reason"), [
    (struct.pack("<I", 10) + b"short", 1, "element 0 says 10 bytes, but only 5 remain"),
    (struct.pack("<I", 1) + b"ab", 1, "1 bytes follow its 1 elements"),
    (struct.pack("<I", 1) + b"a" + b"\x01\x00", 2, "its data ends inside element 1's length prefix"),
])
def test_bytes_elements_whose_lengths_disagree_with_the_data_are_refused(raw: bytes, count: int, reason: str) -> None:
    tensor, binary = _bytes_tensor(raw + bytes(max(0, 4 * count - len(raw))), count)
    [read] = read_batch([[tensor]], binary)
    with pytest.raises(ValueError, match=reason):
        to_elements(read)


def test_an_array_without_an_oip_datatype_is_refused() -> None:
    with pytest.raises(ValueError, match="no OIP datatype"):
        encode(np.zeros(2, np.complex64))
