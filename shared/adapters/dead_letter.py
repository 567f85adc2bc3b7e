"""Build dead-letter copies of inputs that could not be processed."""
from __future__ import annotations

import base64
import json
import time

from kafka import KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord

from schemas import MAX_DEAD_LETTER_BYTES, DeadLetter
from shared import metrics
from shared.adapters import topics


def dead_letter(raw: bytes, reason: str, *, service: str, source_topic: str, partition: int | None = None,
                offset: int | None = None) -> DeadLetter:
    kept = raw[:MAX_DEAD_LETTER_BYTES]
    return DeadLetter(source_topic=source_topic, partition=partition, offset=offset,
                      raw_b64=base64.b64encode(kept).decode(), truncated=len(kept) < len(raw),
                      reason=reason[:2000], service=service, at=time.time())


def send_dead_letter(producer: KafkaProducer, record: ConsumerRecord, reason: str, *, service: str) -> None:
    """Copy a consumed record that could not be processed to the dead-letter topic, and count it."""
    letter = dead_letter(record.value, reason, service=service, source_topic=record.topic,
                         partition=record.partition, offset=record.offset)
    producer.send(topics.DEAD_LETTER, value=letter.model_dump_json().encode())
    metrics.DEAD_LETTERS.labels(service).inc()


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
