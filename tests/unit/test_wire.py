"""The framing of a JSON header and its binary section in one Kafka value (`schemas.wire`)."""
from __future__ import annotations

import pytest

from schemas import wire


def test_a_value_without_binary_data_is_plain_json() -> None:
    assert wire.pack(b'{"a":1}') == b'{"a":1}'
    assert wire.pack(b'{"a":1}', [b"", memoryview(b"")]) == b'{"a":1}'
    header, binary = wire.unpack(b'{"a":1}')
    assert header == b'{"a":1}' and len(binary) == 0


def test_header_and_binary_come_back_as_they_went() -> None:
    value = wire.pack(b'{"a":1}', [b"\x00\x01", memoryview(b"{tail}")])
    assert value.startswith(wire.MAGIC) and len(value) == wire.framed_size(7, 8)
    header, binary = wire.unpack(value)
    assert header == b'{"a":1}' and bytes(binary) == b"\x00\x01{tail}"


@pytest.mark.parametrize("value", [wire.MAGIC + b"\x00", wire.MAGIC + b"\x00\x00\x01\x00{}"])
def test_a_frame_cut_short_is_an_error(value: bytes) -> None:
    with pytest.raises(wire.FrameError):
        wire.unpack(value)
