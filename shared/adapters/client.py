"""A Meridian client: send queries, receive exactly one final result per query.

It reads its applications' results topics and the shared one for messages of no known application.
Results can repeat on the wire (a re-dispatched batch after a worker loss, a redelivered message); the
client keeps the first result per query id and counts the rest as duplicates it suppressed.

**An answer belongs to the message that asked.** Query ids are the clients' to choose, so another sender
may claim one of this client's. For each query sent through `MeridianClient.send`, the producer's delivery
report says where its message landed, and only a result naming that position (``Result.query_position``)
is taken as its answer, whatever arrived first; any other result for the id (the answer to, or refusal
of, someone else's message claiming it, also one taken before this client sent the id) is kept apart in
``refusals``. A refusal of this client's own message under its position (e.g. its id was already taken)
is its answer. A result that arrives before its query's delivery report waits for it (`Answers`).
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from schemas import Query, Result, position, wire
from shared.adapters import topics
from shared.adapters.answers import Answers, ResultAt
from shared.adapters.rdkafka import RdProducer, make_rd_consumer, poll_messages
from shared.settings import Settings


#: a new topic's partition before its leader is known (a broker may not mark these retriable)
_NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


class UnreadableTopic(RuntimeError):
    """A results topic the client was asked to read is not visible to it."""


class QueryTooLarge(ValueError):
    """A query whose inputs no dispatched batch could carry: the scheduler would reject it."""


class MeridianClient:
    """``on_result(result, received_at)`` is called once per query, from the receiving thread.

    ``applications``: whose answers to read (default: every configured application). A results topic
    that stays invisible for ``topic_timeout_s`` (not created, or not readable by this user) is an error.
    ``own_only``: keep no result of a query this client did not send (`Answers`); a long-running client
    calls `forget` for each query it is done with, so it holds only those in flight.
    """

    def __init__(self, settings: Settings, *, applications: Sequence[str] | None = None,
                 on_result: Callable[[Result, float], None] | None = None, topic_timeout_s: float = 10.0,
                 own_only: bool = False) -> None:
        self._on_result = on_result
        self._max_payload_bytes = settings.max_batch_payload_bytes
        self._producer = RdProducer(settings)
        self._consumer = make_rd_consumer(settings, group_id=None)
        names = [topics.results_topic(app) for app in (applications or settings.applications)] + [topics.RESULTS]
        try:
            # from each partition's end as of now, resolved before any query is sent
            partitions = [TopicPartition(name, p) for name in names for p in self._partitions(name, topic_timeout_s)]
            deadline = time.monotonic() + topic_timeout_s
            for tp in partitions:
                tp.offset = self._end_offset(tp, deadline)
            self._consumer.assign(partitions)
        except (KafkaException, UnreadableTopic):
            self._close_transport()
            raise
        self._answers = Answers(own_only=own_only)
        self.malformed = 0
        #: results whose query's delivery report came in since, for the receiving thread to file
        self._released: list[ResultAt] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _partitions(self, topic: str, timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            described = self._consumer.list_topics(topic, timeout=max(1.0, timeout_s)).topics.get(topic)
            if described is not None and described.error is None and described.partitions:
                return sorted(described.partitions)
            if time.monotonic() > deadline:
                raise UnreadableTopic(f"cannot read {topic!r}: it does not exist, or this user may not read it")
            time.sleep(0.2)

    def _end_offset(self, tp: TopicPartition, deadline: float) -> int:
        """A partition's end; a topic created a moment ago may have no leader yet (a retriable error): ask
        again until it has one, or the time is up."""
        while True:
            try:
                return self._consumer.get_watermark_offsets(tp, timeout=10)[1]
            except KafkaException as exc:
                error = exc.args[0]
                if not (error.retriable() or error.code() in _NO_LEADER_YET) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def send(self, query: Query, binary: bytes = b"") -> Query:
        """Send ``query`` stamped with the time of sending (its deadline counts from it), with the binary
        data its inputs declare (`shared.tensors.encode_binary`, `encode_images`); returns what was sent.

        A query that no batch could carry is refused here, before it is sent (`QueryTooLarge`).
        """
        if len(binary) != query.binary_bytes:
            raise ValueError(f"`binary` holds {len(binary):,} bytes but the query's inputs declare {query.binary_bytes:,}")
        if query.payload_bytes > self._max_payload_bytes:
            raise QueryTooLarge(f"query {query.query_id!r}: its inputs take {query.payload_bytes:,} bytes, more than "
                                f"the {self._max_payload_bytes:,} a batch's message may carry")
        query = query.model_copy(update={"sent_at": time.time()})
        with self._lock:
            self._answers.sending(query.query_id)
        self._producer.send(topics.QUERIES, key=query.application.encode(),
                            value=wire.pack(query.model_dump_json().encode(), [binary]),
                            on_delivery=functools.partial(self._delivered, query.query_id))
        return query

    def _delivered(self, query_id: str, error: KafkaError | None, message: Message) -> None:
        at = None if error is not None else position(message.topic(), message.partition(), message.offset())
        with self._lock:
            self._released.extend(self._answers.delivered(query_id, at))

    @property
    def results(self) -> dict[str, ResultAt]:
        """query id -> (its first answer, when it was received)."""
        return self._answers.results

    @property
    def refusals(self) -> dict[str, list[Result]]:
        """query id -> the results for it not taken as its answer (see the module's docstring)."""
        return self._answers.refusals

    @property
    def duplicates(self) -> int:
        return self._answers.duplicates

    def forget(self, query_id: str) -> None:
        """Keep nothing more of ``query_id`` (answered, or given up on): a later result for it is ignored
        by an ``own_only`` client."""
        with self._lock:
            self._answers.forget(query_id)

    def send_raw(self, value: bytes, key: bytes | None = None) -> None:
        self._producer.send(topics.QUERIES, key=key, value=value)

    def flush(self) -> None:
        self._producer.flush()

    def wait_for(self, query_ids: Iterable[str], timeout_s: float) -> bool:
        """True once every id has a final result; False at the timeout."""
        return self._wait(self.results, query_ids, timeout_s)

    def wait_for_refusals(self, claimed_ids: Iterable[str], timeout_s: float) -> bool:
        """True once every claimed id has a refusal; False at the timeout."""
        return self._wait(self.refusals, claimed_ids, timeout_s)

    def _wait(self, found: dict, ids: Iterable[str], timeout_s: float) -> bool:
        wanted = set(ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if wanted.issubset(found):
                    return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._close_transport()

    def _close_transport(self) -> None:
        self._producer.close(timeout=5)
        self._consumer.close()

    def _receive(self) -> None:
        while not self._stop.is_set():
            messages = poll_messages(self._consumer, timeout_s=0.1, max_messages=256)
            received = time.time()
            self._producer.poll()  # delivery reports, so that no result waits for the next send
            with self._lock:
                released, self._released = self._released, []
            for result, at in released:
                self._keep(result, at)
            for message in messages:
                try:
                    result = Result.model_validate_json(message.value())
                except ValueError:
                    self.malformed += 1  # not a result this client can read; never stop listening
                    continue
                self._keep(result, received)

    def _keep(self, result: Result, received: float) -> None:
        with self._lock:
            answer = self._answers.keep(result, received)
        if answer is not None and self._on_result is not None:
            self._on_result(answer, received)

    def __enter__(self) -> "MeridianClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
