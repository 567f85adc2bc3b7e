"""Read what really happened in a time range back from Kafka: the queries sent, their final results and
the fleet's worker events. Kafka keeps every topic for its retention period, so the record of a run is
the topics themselves (replay, the fidelity bench, a restarted scheduler's read-back)."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka import KafkaConsumer, TopicPartition
from pydantic import ValidationError

from schemas import Query, Result, wire, worker_event_adapter
from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer
from shared.serving.wording import duration
from shared.settings import Settings


class RangeError(ValueError):
    """The range cannot be read: nothing in it, or part of it is past the topic's retention."""


@dataclass
class Recording:
    """A time range of the record, each message with the time Kafka stamped it (seconds)."""

    start_s: float
    end_s: float
    queries: list[tuple[float, Query]] = field(default_factory=list)
    #: query id -> its first final result, and when that was produced
    results: dict[str, tuple[Result, float]] = field(default_factory=dict)
    #: worker events (heartbeats, batches, loads, stops), oldest first
    events: list[tuple[float, object]] = field(default_factory=list)
    #: messages in the range that did not parse (counted, not fatal: bad input is dead-lettered live)
    unreadable: int = 0


def read_range(settings: Settings, names: Iterable[str] | Callable[[str], bool], start_s: float, end_s: float, *,
               timeout_s: float = 120.0, whole: bool = True) -> list[tuple[float, bytes]]:
    """Every record of the topics ``names`` (or whose name passes it) stamped within ``[start_s, end_s)``,
    oldest first per partition.

    ``whole``: raise `RangeError` when the range starts before what a topic still keeps (records were
    deleted); otherwise read what is left.
    """
    consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=20)
    try:
        wanted = names if callable(names) else set(names).__contains__
        partitions = [TopicPartition(name, p) for name in sorted(consumer.topics()) if wanted(name)
                      for p in consumer.partitions_for_topic(name) or ()]
        if not partitions:
            return []
        if whole:
            _check_retention(consumer, partitions, start_s)
        starts = consumer.offsets_for_times({tp: int(start_s * 1000) for tp in partitions})
        stops = consumer.offsets_for_times({tp: int(end_s * 1000) for tp in partitions})
        ends = consumer.end_offsets(partitions)
        ranges = {tp: (starts[tp].offset if starts.get(tp) is not None else ends[tp],
                       stops[tp].offset if stops.get(tp) is not None else ends[tp]) for tp in partitions}
        return read_offsets(consumer, ranges, timeout_s=timeout_s)
    finally:
        consumer.close()


def read_offsets(consumer: KafkaConsumer, ranges: dict[TopicPartition, tuple[int, int]], *,
                 timeout_s: float) -> list[tuple[float, bytes]]:
    """Every record of each partition's offsets ``[start, stop)``, with its stamp in seconds, oldest first
    per partition (``consumer`` is assigned exactly these partitions)."""
    consumer.assign(list(ranges))
    pending: dict[TopicPartition, int] = {}
    for tp, (start, stop) in ranges.items():
        if start < stop:
            consumer.seek(tp, start)
            pending[tp] = stop
        else:
            consumer.pause(tp)
    records: list[tuple[float, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {len(pending)} partitions took longer than {timeout_s:g} s")
        for tp, batch in consumer.poll(timeout_ms=200).items():
            stop = pending.get(tp)
            if stop is None:
                continue
            records.extend((r.timestamp / 1000.0, r.value) for r in batch if r.offset < stop)
            if consumer.position(tp) >= stop:
                pending.pop(tp)
                consumer.pause(tp)
    return records


def _check_retention(consumer, partitions: list[TopicPartition], start_s: float) -> None:
    """A partition whose first records were deleted keeps only from its first retained record on."""
    firsts = consumer.beginning_offsets(partitions)
    for tp in partitions:
        if firsts[tp] == 0:
            continue  # nothing deleted: the range may start before the topic's first record
        kept = consumer.offsets_for_times({tp: 0}).get(tp)
        if kept is not None and kept.timestamp / 1000.0 > start_s:
            raise RangeError(f"{tp.topic} keeps records only from {duration(time.time() - kept.timestamp / 1000.0)} "
                             f"ago on (its retention deleted older ones); the range starts "
                             f"{duration(time.time() - start_s)} ago")


def record(settings: Settings, start_s: float, end_s: float, *, answers_within_s: float = 60.0,
           events_before_s: float = 10.0) -> Recording:
    """The queries sent in the range, their results (produced up to ``answers_within_s`` after its end)
    and the worker events from ``events_before_s`` before it (the fleet as it stood at its start)."""
    if not end_s > start_s:
        raise RangeError(f"the range must end after it starts; it is {duration(start_s - end_s)} long")
    recording = Recording(start_s, end_s)
    for at, raw in read_range(settings, [topics.QUERIES], start_s, end_s):
        try:
            recording.queries.append((at, Query.model_validate_json(wire.unpack(raw)[0])))
        except ValueError:  # a ValidationError, or a wire.FrameError
            recording.unreadable += 1
    if not recording.queries:
        raise RangeError(f"no query was sent in the range ({duration(end_s - start_s)} ending "
                         f"{duration(max(0.0, time.time() - end_s))} ago) on {topics.QUERIES}")
    recording.queries.sort(key=lambda pair: pair[1].sent_at)
    applications = sorted({q.application for _, q in recording.queries})
    names = [topics.results_topic(app) for app in applications] + [topics.RESULTS]
    for at, raw in read_range(settings, names, start_s, end_s + answers_within_s):
        try:
            result = Result.model_validate_json(raw)
        except ValidationError:
            recording.unreadable += 1
            continue
        recording.results.setdefault(result.query_id, (result, at))
    for at, raw in read_range(settings, [topics.WORKER_EVENTS], start_s - events_before_s, end_s):
        try:
            recording.events.append((at, worker_event_adapter.validate_json(raw)))
        except ValidationError:
            recording.unreadable += 1
    recording.events.sort(key=lambda pair: pair[0])
    return recording
