"""What the scheduler handed on before it (re)started, read back from Kafka itself.

A scheduler that was killed re-reads every query whose offset it had not committed, and some of them it
had already dispatched, or answered itself. The dispatch and results topics are the record of what went
out: before it serves, the scheduler collects the query ids there, and acknowledges a re-read query among
them instead of serving it twice. (A send still in flight when the process died is the remaining window:
the broker may hold it without the scheduler having seen its ack.)

Only the part of the record that can name a re-read query is read: from when the oldest unacknowledged
query was stamped (less the clock skew allowed between a client and the scheduler), at most
``lookback_s`` back. After a clean stop nothing is unacknowledged and nothing is read.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable

from kafka import TopicPartition

from schemas import wire
from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer
from shared.adapters.recording import read_offsets, read_range
from shared.settings import Settings


def handed_on_query_ids(settings: Settings, partitions: Iterable[int], *, lookback_s: float) -> set[str]:
    """The ids of the queries of ``partitions`` (of the queries topic) that will be read again although
    they were dispatched or answered already."""
    since = oldest_unacknowledged_s(settings, partitions)
    if since is None:
        return set()
    now = time.time()
    start = max(now - lookback_s, min(since, now) - settings.max_clock_skew_s)
    records = read_range(settings, lambda name: name.startswith((topics.DISPATCH_PREFIX, topics.RESULTS)),
                         start, now + 1.0, timeout_s=30.0, whole=False)
    return {query_id for _, value in records for query_id in _query_ids(value)}


def oldest_unacknowledged_s(settings: Settings, partitions: Iterable[int], *, timeout_s: float = 30.0) -> float | None:
    """The earliest stamp among the queries past the scheduler group's committed offsets, which are the
    queries the scheduler reads again (None: there are none). The earliest of all of them, not the first
    one's: a client chooses its messages' stamps."""
    consumer = make_consumer(settings, group_id=topics.SCHEDULER_GROUP, fetch_max_wait_ms=20)
    try:
        wanted = [TopicPartition(topics.QUERIES, p) for p in partitions]
        firsts, ends = consumer.beginning_offsets(wanted), consumer.end_offsets(wanted)
        ranges = {tp: (max(consumer.committed(tp) or 0, firsts[tp]), ends[tp]) for tp in wanted}
        return min((stamp for stamp, _ in read_offsets(consumer, ranges, timeout_s=timeout_s)), default=None)
    finally:
        consumer.close(autocommit=False)


def _query_ids(value: bytes) -> list[str]:
    """The query ids a dispatch batch or a result names (read without validating: they went out valid; a
    batch's binary section is not read)."""
    try:
        message = json.loads(wire.unpack(value)[0])
    except ValueError:  # wire.FrameError too
        return []
    if not isinstance(message, dict):
        return []
    if message.get("command") == "dispatch_batch":
        return [q["query_id"] for q in message.get("queries", ()) if isinstance(q, dict) and "query_id" in q]
    query_id = message.get("query_id")
    return [query_id] if isinstance(query_id, str) and "/" not in query_id else []
