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

from kafka import TopicPartition

from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer
from shared.settings import Settings


def handed_on_query_ids(settings: Settings, *, lookback_s: float) -> set[str]:
    consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=10)
    try:
        names = [name for name in consumer.topics()
                 if name.startswith(topics.DISPATCH_PREFIX) or name.startswith(topics.RESULTS)]
        partitions = [TopicPartition(name, p) for name in names for p in consumer.partitions_for_topic(name) or ()]
        if not partitions:
            return set()
        consumer.assign(partitions)
        since_ms = int((time.time() - lookback_s) * 1000)
        starts = consumer.offsets_for_times({tp: since_ms for tp in partitions})
        ends = consumer.end_offsets(partitions)
        pending = {}
        for tp in partitions:
            start = starts.get(tp)
            if start is None or start.offset >= ends[tp]:
                consumer.pause(tp)
            else:
                consumer.seek(tp, start.offset)
                pending[tp] = ends[tp]
        ids: set[str] = set()
        deadline = time.monotonic() + 30.0
        while pending and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for record in records:
                    ids.update(_query_ids(record.value))
                if consumer.position(tp) >= pending.get(tp, 0):
                    pending.pop(tp, None)
                    consumer.pause(tp)
        return ids
    finally:
        consumer.close()


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
