"""A Meridian client: send queries, receive exactly one final result per query.

Results can repeat on the wire (a re-dispatched batch after a worker loss, a redelivered message); the
client keeps the first result per query id and counts the rest as duplicates it suppressed.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from kafka import TopicPartition

from schemas import Query, Result
from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.settings import Settings


class MeridianClient:
    """``on_result(result, received_at)`` is called once per query, from the receiving thread."""

    def __init__(self, settings: Settings, *, on_result: Callable[[Result, float], None] | None = None) -> None:
        self._on_result = on_result
        self._producer = make_producer(settings)
        self._consumer = make_consumer(settings, group_id=None)
        partitions = self._consumer.partitions_for_topic(topics.RESULTS) or set()
        assigned = [TopicPartition(topics.RESULTS, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        self._consumer.seek_to_end(*assigned)
        for tp in assigned:
            self._consumer.position(tp)  # resolve "end" now, before any query is sent
        self.results: dict[str, tuple[Result, float]] = {}
        self.duplicates = 0
        self.malformed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def send(self, query: Query) -> None:
        self._producer.send(topics.QUERIES, key=query.application.encode(), value=query.model_dump_json().encode())

    def send_raw(self, value: bytes, key: bytes | None = None) -> None:
        self._producer.send(topics.QUERIES, key=key, value=value)

    def flush(self) -> None:
        self._producer.flush()

    def wait_for(self, query_ids: Iterable[str], timeout_s: float) -> bool:
        """True once every id has a final result; False at the timeout."""
        wanted = set(query_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if wanted.issubset(self.results):
                    return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._producer.close(timeout=5)
        self._consumer.close()

    def _receive(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=100).values():
                received = time.time()
                for record in records:
                    try:
                        result = Result.model_validate_json(record.value)
                    except ValueError:
                        self.malformed += 1  # not a result this client can read; never stop listening
                        continue
                    with self._lock:
                        first = result.query_id not in self.results
                        if first:
                            self.results[result.query_id] = (result, received)
                        else:
                            self.duplicates += 1
                    if first and self._on_result is not None:
                        self._on_result(result, received)

    def __enter__(self) -> "MeridianClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
