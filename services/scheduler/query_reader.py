"""The scheduler's reader of ``meridian.queries``: a librdkafka consumer in the scheduler group, polled on a
thread of its own, which hands the event loop each poll's messages in one call.

`make bench-pipeline`'s stage profile found faust's stream (each event through its conductor, channel and
agent) and aiokafka's fetching about 200 of the scheduler's ~450 µs of CPU per query at 1,000 q/s.
librdkafka fetches and parses in its own threads, and its ``consume`` returns what has arrived as one
list; what is left per query in Python is one small record. faust still runs the scheduler (its tasks,
timers and signals), without a Kafka client of its own.

Partitions move between schedulers cooperatively (``cooperative-sticky``): a rebalance takes from a
scheduler only the partitions it gives to another, and the rest are served throughout. librdkafka calls
the rebalance callbacks inside a poll, on the reader's thread; the reader runs the handlers' ``release``
and ``take_over`` on the event loop and waits for them. So a revoked partition's acknowledged offsets are
committed before it goes, and no message of a new partition is handed over before the take-over has
read back what was handed on.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, TypeVar

from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, KafkaException, TopicPartition

from shared.adapters import topics
from shared.adapters.rdkafka import MAX_MESSAGE_BYTES, client_config, is_fatal, poll_messages
from shared.settings import Settings

logger = logging.getLogger(__name__)

#: the most messages handed over at once (a poll returns what has arrived, up to this)
MAX_BATCH = 1000
#: how long a poll waits for a first message: also how soon the reader notices a stop or a commit due
POLL_TIMEOUT_S = 0.1
#: how often acknowledged offsets are committed: a restart re-reads at most this much more
COMMIT_INTERVAL_S = 0.5

T = TypeVar("T")


class QueryMessage(NamedTuple):
    """One message of ``meridian.queries`` as the handlers need it."""

    value: bytes
    partition: int
    offset: int
    #: the producer's timestamp (None if the broker stamped it)
    created_s: float | None


class QueryReader:
    """``on_batch`` handles a poll's messages, in order, one poll at a time; ``on_revoked`` lets go of the
    partitions another scheduler takes (``lost``: taken while this one was not heard) and returns their
    commit points; ``on_assigned`` takes partitions over; ``commit_points(final=)`` says what may be
    committed now (``final``: once what is being sent is written, as the reader stops). All four run on
    the event loop."""

    def __init__(self, settings: Settings, *, on_batch: Callable[[list[QueryMessage]], Coroutine[Any, Any, None]],
                 on_revoked: Callable[..., Coroutine[Any, Any, dict[int, int]]],
                 on_assigned: Callable[[set[int]], Coroutine[Any, Any, None]],
                 commit_points: Callable[..., Coroutine[Any, Any, dict[int, int]]]) -> None:
        self.settings = settings
        self.on_batch, self.on_revoked, self.on_assigned = on_batch, on_revoked, on_assigned
        self.commit_points = commit_points
        self._stopping, self._stopped = threading.Event(), threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: partition -> the offset last committed for it
        self._committed: dict[int, int] = {}
        self._fatal: KafkaError | None = None
        #: the poll handed over to ``on_batch`` last, until it is handled
        self._handled: concurrent.futures.Future[None] | None = None

    def _consumer(self) -> Consumer:
        instance = self.settings.scheduler_instance
        return Consumer({
            **client_config(self.settings), "group.id": topics.SCHEDULER_GROUP,
            **({"group.instance.id": instance} if instance else {}),
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100, "fetch.min.bytes": 1,
            "max.partition.fetch.bytes": MAX_MESSAGE_BYTES, "fetch.max.bytes": 4 * MAX_MESSAGE_BYTES,
            "receive.message.max.bytes": 5 * MAX_MESSAGE_BYTES, "error_cb": self._on_error})

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka's client-wide errors (called inside a poll): a broker away is retried by librdkafka;
        a fatal one ends this consumer (`_serve` raises it)."""
        if is_fatal(error):
            self._fatal = error

    async def run(self) -> None:
        """Read until `stop`; a failure of the reader or of a handler ends it with that error."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._read)

    async def stop(self, timeout_s: float = 15.0) -> None:
        """Stop reading and commit what was acknowledged, once what was being sent is written."""
        self._stopping.set()
        if self._loop is not None:
            await asyncio.to_thread(self._stopped.wait, timeout_s)

    # -- on the reader's thread ---------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while not self._stopping.is_set():
                consumer = self._consumer()
                consumer.subscribe([topics.QUERIES], on_assign=self._assigned, on_revoke=self._revoked,
                                   on_lost=self._lost)
                try:
                    self._serve(consumer)
                except KafkaException as exc:
                    if not is_fatal(exc.args[0]):
                        raise
                    # e.g. a static member whose session expired while the broker was away is fenced by its
                    # own rejoin (confluentinc/librdkafka#3437): a new consumer joins under the same name
                    logger.warning("the query reader's consumer failed (%s): joining the group again", exc)
                    self._let_go({tp.partition for tp in consumer.assignment()})
                finally:
                    consumer.close()  # a static member stays in the group (see `setup.leave_group`)
        finally:
            self._stopped.set()

    def _serve(self, consumer: Consumer) -> None:
        next_commit = 0.0
        while not self._stopping.is_set():
            batch = consume_ready(consumer, timeout_s=POLL_TIMEOUT_S, max_messages=MAX_BATCH)
            if self._fatal is not None:
                fatal, self._fatal = self._fatal, None
                raise KafkaException(fatal)
            if batch or (self._handled is not None and self._handled.done()):
                self._finish_handling()  # one poll at a time, in order (librdkafka fetches on meanwhile)
            if batch:
                self._handled = asyncio.run_coroutine_threadsafe(self.on_batch(batch), self._running_loop())
            if (now := time.monotonic()) >= next_commit:
                self._commit(consumer, self._on_loop(self.commit_points(final=False)), asynchronous=True)
                next_commit = now + COMMIT_INTERVAL_S
        self._finish_handling()
        self._commit(consumer, self._on_loop(self.commit_points(final=True)), asynchronous=False)

    def _finish_handling(self) -> None:
        """Wait for the poll handed over last (raising what its handler raised): before the next one, and
        before partitions go, so that none of their queries is admitted after they were let go."""
        if self._handled is not None:
            handled, self._handled = self._handled, None
            self._wait(handled)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_loop(self.on_assigned({tp.partition for tp in partitions}))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {tp.partition for tp in partitions}
        self._finish_handling()
        points = self._on_loop(self.on_revoked(revoked))
        self._commit(consumer, points, asynchronous=False)
        self._forget(revoked)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions the group gave away while this process was not heard (its session expired)."""
        lost = {tp.partition for tp in partitions}
        logger.warning("partitions %s of %s were lost (this scheduler was not heard for its session timeout)",
                       sorted(lost), topics.QUERIES)
        self._let_go(lost)

    def _let_go(self, partitions: set[int]) -> None:
        """Partitions this consumer can no longer commit for: their waiting queries are let go."""
        if partitions:
            self._finish_handling()
            self._on_loop(self.on_revoked(partitions, lost=True))
            self._forget(partitions)

    def _forget(self, partitions: set[int]) -> None:
        for partition in partitions:
            self._committed.pop(partition, None)

    def _commit(self, consumer: Consumer, points: dict[int, int], *, asynchronous: bool) -> None:
        moved = {partition: offset for partition, offset in points.items() if self._committed.get(partition) != offset}
        if not moved:
            return
        try:
            consumer.commit(offsets=[TopicPartition(topics.QUERIES, p, o) for p, o in moved.items()],
                            asynchronous=asynchronous)
        except KafkaException as exc:  # the next commit carries the same points, or a restart re-reads more
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                logger.warning("committing %s failed: %s", moved, exc)
            return
        self._committed.update(moved)

    def _on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the event loop and wait for its result (the reader waits; the loop serves on)."""
        return self._wait(asyncio.run_coroutine_threadsafe(work, self._running_loop()))

    def _wait(self, future: concurrent.futures.Future[T]) -> T:
        while True:
            try:
                return future.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                if self._stopping.is_set() and self._running_loop().is_closed():
                    raise RuntimeError("the event loop closed while the reader waited for it") from None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "run() first"
        return self._loop


def consume_ready(consumer: Consumer, *, timeout_s: float, max_messages: int) -> list[QueryMessage]:
    """`poll_messages`, as the handlers take them."""
    return [QueryMessage(m.value(), m.partition(), m.offset(), _created_s(m))
            for m in poll_messages(consumer, timeout_s=timeout_s, max_messages=max_messages)]


def _created_s(message: Any) -> float | None:
    kind, milliseconds = message.timestamp()
    return milliseconds / 1000.0 if kind == TIMESTAMP_CREATE_TIME else None
