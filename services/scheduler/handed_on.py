"""What the scheduler handed on before it (re)started, read back from Kafka itself.

A scheduler that was killed re-reads every query whose offset it had not committed, and some of them it
had already dispatched, or answered itself. The dispatch and results topics are the record of what went
out: before it serves, the scheduler reads their last ``lookback_s`` and collects the query ids there, and
acknowledges a re-read query among them instead of serving it twice. (A send still in flight when the
process died is the remaining window: the broker may hold it without the scheduler having seen its ack.)
"""
from __future__ import annotations

import json
import time

from shared.adapters import topics
from shared.adapters.recording import read_range
from shared.settings import Settings


def handed_on_query_ids(settings: Settings, *, lookback_s: float) -> set[str]:
    now = time.time()
    records = read_range(settings, lambda name: name.startswith((topics.DISPATCH_PREFIX, topics.RESULTS)),
                         now - lookback_s, now + 1.0, timeout_s=30.0, whole=False)
    return {query_id for _, value in records for query_id in _query_ids(value)}


def _query_ids(value: bytes) -> list[str]:
    """The query ids a dispatch batch or a result names (read without validating: they went out valid)."""
    try:
        message = json.loads(value)
    except ValueError:
        return []
    if not isinstance(message, dict):
        return []
    if message.get("command") == "dispatch_batch":
        return [q["query_id"] for q in message.get("queries", ()) if isinstance(q, dict) and "query_id" in q]
    query_id = message.get("query_id")
    return [query_id] if isinstance(query_id, str) and "/" not in query_id else []
