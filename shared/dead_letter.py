"""Build dead-letter copies of inputs that could not be processed."""
from __future__ import annotations

import base64
import json
import time

from schemas import MAX_DEAD_LETTER_BYTES, DeadLetter


def dead_letter(raw: bytes, reason: str, *, service: str, source_topic: str, partition: int | None = None,
                offset: int | None = None) -> DeadLetter:
    kept = raw[:MAX_DEAD_LETTER_BYTES]
    return DeadLetter(source_topic=source_topic, partition=partition, offset=offset,
                      raw_b64=base64.b64encode(kept).decode(), truncated=len(kept) < len(raw),
                      reason=reason[:2000], service=service, at=time.time())


def best_effort_id(raw: bytes, field: str = "query_id") -> str:
    """The id a malformed message claims, if any, so the client can still match the rejection."""
    try:
        value = json.loads(raw).get(field)
    except (ValueError, AttributeError, RecursionError):
        return ""
    return value[:256] if isinstance(value, str) else ""


def describe_validation_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if errors is None:
        return f"malformed message: {exc}"[:2000]
    parts = []
    for error in errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ())) or "message"
        parts.append(f"{where}: {error.get('msg')}")
    return ("malformed message: " + "; ".join(parts))[:2000]
