"""librdkafka clients (confluent-kafka) for the per-query path: the client library, the workers and the
scheduler's sends.

Measured side by side on one broker (``python -m bench.kafka_clients``), a librdkafka hop costs 6-9x less
CPU per message than kafka-python's and about a third of its median latency; on a 2-core host every
process shares, that CPU is latency. The control-plane services (planner, fleet, registry, autoscaler,
admin) send a few messages a second and stay on kafka-python (`shared.adapters.kafka_io`); the faust
scheduler reads through faust's aiokafka consumer (faust 0.15's librdkafka driver does not work) and sends
through `RdProducer` (`services.scheduler.publisher`).
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from schemas.wire import MAX_MESSAGE_BYTES
from shared.adapters.kafka_io import RECONNECT_OPTIONS
from shared.settings import Settings

def client_config(settings: Settings) -> dict[str, Any]:
    """Connection, security and reconnection, the same for every librdkafka client."""
    security = settings.kafka_security
    config: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap,
        "security.protocol": security.security_protocol,
        # reconnect within a second of a restarted broker's return (the default backs off to 10 s)
        "reconnect.backoff.ms": RECONNECT_OPTIONS["reconnect_backoff_ms"],
        "reconnect.backoff.max.ms": RECONNECT_OPTIONS["reconnect_backoff_max_ms"],
        "socket.nagle.disable": True,
        "socket.timeout.ms": settings.kafka_socket_timeout_ms,
    }
    if security.sasl_mechanism:
        config.update({"sasl.mechanism": security.sasl_mechanism, "sasl.username": security.sasl_username,
                       "sasl.password": security.sasl_password})
    if security.ssl_cafile:
        config["ssl.ca.location"] = security.ssl_cafile
    return config


class RdProducer:
    """An idempotent, ``acks=all``, unbuffered librdkafka producer behind kafka-python's ``send``, ``flush``
    and ``close``. Keyed messages land on the partition kafka-python and Java would choose (murmur2)."""

    def __init__(self, settings: Settings) -> None:
        self._producer = Producer({**client_config(settings), "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 0, "message.max.bytes": MAX_MESSAGE_BYTES,
                                   "partitioner": "murmur2_random"})
        self._closed = False

    def send(self, topic: str, *, value: bytes, key: bytes | None = None,
             on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
        """``on_delivery(error, message)`` once the broker has the message (its partition and offset) or
        gave up; called from `send`, `flush` or `poll`, on the calling thread."""
        self.produce(topic, value=value, key=key, on_delivery=on_delivery)
        self._producer.poll(0)

    def produce(self, topic: str, *, value: bytes, key: bytes | None = None,
                on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
        """`send`, leaving the delivery reports that have arrived to the caller's next `poll`: for a caller
        that polls on a schedule of its own (the scheduler's 0.5 s commits need no sooner)."""
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                return
            except BufferError:  # the local queue is full: serve delivery reports until there is room
                self._producer.poll(0.05)

    def poll(self) -> None:
        """Serve the delivery reports that have arrived, without waiting."""
        self._producer.poll(0)

    def unreported(self) -> int:
        """Messages sent whose delivery report has not been served yet (librdkafka's own count)."""
        return len(self._producer)

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(-1 if timeout is None else timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop librdkafka's threads now (not when the object is collected, by which time the
        broker may be gone and they would log reconnect failures)."""
        if not self._closed:
            self.flush(timeout)
            self._producer.close()
            self._closed = True


def make_rd_consumer(settings: Settings, *, group_id: str | None) -> Consumer:
    """A manual-commit consumer for ``assign`` (librdkafka wants a group id; a reader that never commits
    gets a unique one, which never joins a group)."""
    return Consumer({**client_config(settings), "group.id": group_id or f"meridian.reader.{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
                     "fetch.min.bytes": 1, "max.partition.fetch.bytes": MAX_MESSAGE_BYTES,
                     "fetch.max.bytes": 4 * MAX_MESSAGE_BYTES, "receive.message.max.bytes": 5 * MAX_MESSAGE_BYTES})


def assign_at_committed(consumer: Consumer, topic: str, partition: int, *, timeout_s: float = 120.0) -> int:
    """Assign one partition at its group's committed offset, looked up here (the beginning if none); returns
    the offset.

    ``assign`` with ``OFFSET_STORED`` leaves the lookup to librdkafka, and a lookup answered by a group
    coordinator that just moved (a broker of the cluster started or lost) stays pending forever: the
    partition is never fetched (confluentinc/librdkafka#5586). ``committed`` fails instead, and is retried
    until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            (committed,) = consumer.committed([TopicPartition(topic, partition)], timeout=5.0)
            if committed.error is None:
                break
            failure: object = committed.error
        except KafkaException as exc:
            failure = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"no committed offset of {topic}/{partition} after {timeout_s:g} s: {failure}")
        time.sleep(0.2)
    offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
    consumer.assign([TopicPartition(topic, partition, offset)])
    return offset


def poll_messages(consumer: Consumer, *, timeout_s: float, max_messages: int) -> list[Message]:
    """Up to ``max_messages`` that have arrived, waiting at most ``timeout_s`` for the first.

    ``consume(n, 0)`` hands over what librdkafka has queued in one call (with a timeout it would wait for
    a full batch). Error events, such as a broker that went away, are librdkafka's to retry: they are left
    out; a fatal one raises.
    """
    messages = consumer.consume(max_messages, 0)
    if not messages:
        first = consumer.poll(timeout_s)
        if first is None:
            return []
        messages = [first, *consumer.consume(max_messages - 1, 0)]
    ready = []
    for message in messages:
        error = message.error()
        if error is None:
            ready.append(message)
        elif is_fatal(error):
            raise KafkaException(error)
    return ready


def is_fatal(error: KafkaError) -> bool:
    """The client can serve no more: a fatal error, or the event librdkafka hands a consumer for one (code
    ``_FATAL``, whose own ``fatal()`` is false; a static member fenced after its session expired in a broker
    restart came as that event, and a reader that let it pass polled a dead consumer on)."""
    return error.fatal() or error.code() == KafkaError._FATAL
