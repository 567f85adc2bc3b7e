"""The scheduler's plumbing: the faust app's settings, its topics and metrics endpoint before it starts,
leaving the group, and the group-less topic reader (the same ``MERIDIAN_KAFKA_*`` security as every other
client)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Message, TopicPartition
from faust.app.base import BootStrategy
from kafka.admin import MemberToRemove
from kafka.errors import KafkaError
from pydantic import BaseModel, ValidationError

from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import ensure_core_topics, make_admin
from shared.adapters.rdkafka import make_rd_consumer, poll_messages
from shared.settings import Settings

SERVICE = "scheduler"
#: a group-less reader's longest wait for a first message (and so a stop's), and the most it hands over
FOLLOW_POLL_S = 0.1
FOLLOW_MAX_MESSAGES = 500


class LogFriendlyWorker(faust.Worker):
    """faust's worker without its progress spinner where no terminal shows it (a log file, a process
    manager): the spinner's cursor escape codes would be all over the log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.spinner.file.isatty():
            self.spinner = None


class WithoutKafkaClients(BootStrategy):
    enable_kafka = False


class SchedulerApp(faust.App):
    """faust runs the scheduler's tasks, timers and signals; its own Kafka consumer and producer stay off
    (the scheduler reads with `query_reader` and sends with `publisher`, both librdkafka)."""

    BootStrategy = WithoutKafkaClients


def app_options(settings: Settings) -> dict[str, Any]:
    return dict(Worker=LogFriendlyWorker, web_enabled=False, datadir=str(settings.var_dir / "scheduler"))


def prepare(settings: Settings) -> None:
    """Create the core topics and expose metrics, before the app starts."""
    ensure_core_topics(settings)
    metrics.serve_metrics(settings.scheduler_metrics_port, settings.bind_host)
    # faust leaves kafka-python's logger (topics, leaving the group) at DEBUG: it would build log records
    # nobody prints
    logging.getLogger("kafka").setLevel(logging.WARNING)
    metrics.DEAD_LETTERS.labels(SERVICE)  # series exist before the first event
    for application in settings.applications:
        metrics.QUEUE_DEPTH.labels(application).set(0)


def leave_group(settings: Settings) -> None:
    """Take a static member (``scheduler_instance``) out of the scheduler group once it has stopped.

    A static member does not leave its group when it stops, so that a restart takes its partitions straight
    back; a stop that is not a crash says it is gone, and the other schedulers take over at once instead
    of after the session timeout."""
    if settings.scheduler_instance is None:
        return
    admin = make_admin(settings)
    try:
        admin.remove_group_members(topics.SCHEDULER_GROUP, [MemberToRemove(
            group_instance_id=settings.scheduler_instance, reason="the scheduler stopped")])
    except KafkaError as exc:  # gone already (its session expired), or no broker: nothing to hand over
        logging.getLogger(__name__).warning("could not leave the scheduler group: %s", exc)
    finally:
        admin.close()


async def follow_topic(settings: Settings, topic: str, parse: Callable[[bytes], BaseModel],
                       handle: Callable[[BaseModel], Awaitable[str | None]], *,
                       on_invalid: Callable[[bytes, str, str, int, int], None], from_start: bool) -> None:
    """Read a whole topic with no consumer group, from its start or from now; what does not parse, or what
    ``handle`` refuses (it returns why), goes to ``on_invalid`` with the reason.

    librdkafka polls on a thread of the default executor, so the event loop waits for no fetch, and a poll
    hands over everything that has arrived (a fetch of worker events, at load, is many)."""
    consumer = make_rd_consumer(settings, group_id=None)
    polling: asyncio.Future[list[Message]] | None = None
    try:
        partitions = await asyncio.to_thread(partitions_of, consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING if from_start else OFFSET_END) for p in partitions])
        while True:
            polling = asyncio.ensure_future(asyncio.to_thread(
                poll_messages, consumer, timeout_s=FOLLOW_POLL_S, max_messages=FOLLOW_MAX_MESSAGES))
            for message in await asyncio.shield(polling):  # a stop waits for the poll below, then closes
                value = message.value()
                try:
                    parsed = parse(value)
                except ValidationError as exc:
                    on_invalid(value, describe_validation_error(exc), topic, message.partition(), message.offset())
                    continue
                refusal = await handle(parsed)
                if refusal is not None:
                    on_invalid(value, refusal, topic, message.partition(), message.offset())
    finally:
        if polling is not None and not polling.done():
            await asyncio.wait([polling])
        consumer.close()


def partitions_of(consumer: Consumer, topic: str, timeout_s: float = 30.0) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)
