"""What a Redis client answers, as text whichever way it was made (``decode_responses`` or not)."""
from __future__ import annotations


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
