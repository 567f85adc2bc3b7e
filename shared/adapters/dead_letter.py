"""Build dead-letter copies of inputs that could not be processed."""
from __future__ import annotations

import base64
import json
import time

from kafka import KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord

from schemas import MAX_DEAD_LETTER_BYTES, DeadLetter
from schemas.messages import IDENTIFIER_PATTERN
from shared import metrics
from shared.adapters import topics
from shared.adapters.rdkafka import RdProducer


def dead_letter(raw: bytes, reason: str, *, service: str, source_topic: str, partition: int | None = None,
                offset: int | None = None) -> DeadLetter:
    kept = raw[:MAX_DEAD_LETTER_BYTES]
    return DeadLetter(source_topic=source_topic, partition=partition, offset=offset,
                      raw_b64=base64.b64encode(kept).decode(), truncated=len(kept) < len(raw),
                      reason=reason[:2000], service=service, at=time.time())


def send_dead_letter(producer: KafkaProducer, record: ConsumerRecord, reason: str, *, service: str) -> None:
    """Copy a consumed record that could not be processed to the dead-letter topic, and count it."""
    publish_dead_letter(producer, record.value, reason, service=service, source_topic=record.topic,
                        partition=record.partition, offset=record.offset)


def publish_dead_letter(producer: KafkaProducer | RdProducer, raw: bytes, reason: str, *, service: str,
                        source_topic: str, partition: int, offset: int) -> None:
    letter = dead_letter(raw, reason, service=service, source_topic=source_topic, partition=partition, offset=offset)
    producer.send(topics.DEAD_LETTER, value=letter.model_dump_json().encode())
    metrics.DEAD_LETTERS.labels(service).inc()


def best_effort_id(raw: bytes, field: str = "query_id") -> str:
    """The id a malformed message claims, if any, so the client can still match the rejection."""
    try:
        value = json.loads(raw).get(field)
    except (ValueError, AttributeError, RecursionError):
        return ""
    return value[:256] if isinstance(value, str) else ""


#: what the regular expressions of the message schemas allow, in words
_PATTERNS = {IDENTIFIER_PATTERN: "only letters, digits and `._:-`, starting with a letter or digit"}


def describe_validation_error(exc: Exception) -> str:
    """Why a message was refused, as a person would write it: the field, what was wrong, the limit.

    Examples
    --------
    >>> from schemas import Query
    >>> try:
    ...     Query.model_validate_json(b'{"query_id": "a b", "application": "x", "slo_ms": -1, "batch_size": 1}')
    ... except ValueError as exc:
    ...     print(describe_validation_error(exc).replace("; ", "\\n"))
    malformed message: `query_id` may hold only letters, digits and `._:-`, starting with a letter or digit (got 'a b')
    `slo_ms` must be greater than 0 (got -1)
    `sent_at` is missing
    """
    errors = getattr(exc, "errors", None)
    if errors is None:
        return f"malformed message: {exc}"[:2000]
    return ("malformed message: " + "; ".join(_describe(error) for error in errors()[:5]))[:2000]


def _describe(error: dict) -> str:
    kind, message, context = error.get("type", ""), str(error.get("msg", "")), error.get("ctx") or {}
    where = ".".join(str(p) for p in error.get("loc", ()))
    field = f"`{where}`" if where else "the message"
    if kind == "json_invalid":
        return f"the message is not valid JSON ({context.get('error', message)})"
    if kind == "missing":
        return f"{field} is missing"
    if kind == "extra_forbidden":
        return f"{field} is not a field of this message"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind == "string_pattern_mismatch":
        allowed = _PATTERNS.get(context.get("pattern"), "the allowed characters")
        return f"{field} may hold {allowed} (got {_shown(error.get('input'))})"
    if message.startswith("Input should be "):
        return f"{field} must be {message.removeprefix('Input should be ')} (got {_shown(error.get('input'))})"
    if message.startswith("String should have "):
        return f"{field} must have {message.removeprefix('String should have ')}"
    return f"{field}: {message}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
