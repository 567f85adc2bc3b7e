"""The scheduler's Kafka plumbing: the faust app's settings (the same ``MERIDIAN_KAFKA_*`` security as
every other client), its topics and metrics endpoint before it starts, and the group-less topic reader."""
from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from faust.tables import TableManager
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from kafka.admin import MemberToRemove
from kafka.errors import KafkaError
from pydantic import BaseModel, ValidationError

from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import ensure_core_topics, make_admin
from shared.settings import KafkaSecurity, Settings

SERVICE = "scheduler"


def broker_credentials(security: KafkaSecurity) -> faust.types.auth.CredentialsT | None:
    context = ssl.create_default_context(cafile=security.ssl_cafile) if "SSL" in security.security_protocol else None
    if security.sasl_mechanism:
        return faust.SASLCredentials(username=security.sasl_username, password=security.sasl_password,
                                     mechanism=security.sasl_mechanism, ssl_context=context)
    return faust.SSLCredentials(context) if context is not None else None


class LogFriendlyWorker(faust.Worker):
    """faust's worker without its progress spinner where no terminal shows it (a log file, a process
    manager): the spinner's cursor escape codes would be all over the log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.spinner.file.isatty():
            self.spinner = None


class TablelessTableManager(TableManager):
    """faust's table manager waits a second at start so that tables declared late still join the first
    subscription. The scheduler declares none: it subscribes at once, and a restart serves a second sooner."""

    async def on_start(self) -> None:
        if self:
            await super().on_start()
            return
        await self._update_channels()
        await self.recovery.start()


def app_options(settings: Settings) -> dict[str, Any]:
    """Commit often: a restart re-reads what was not committed. (The scheduler's sends do not go through
    faust's producer but through `services.scheduler.publisher`.)"""
    return dict(
        Worker=LogFriendlyWorker, TableManager=TablelessTableManager,
        broker=";".join(f"kafka://{server}" for server in settings.kafka_bootstrap.split(",")),
        broker_credentials=broker_credentials(settings.kafka_security),
        value_serializer="raw", key_serializer="raw",
        web_enabled=False, topic_allow_declare=False, topic_disable_leader=True,
        broker_session_timeout=10, broker_heartbeat_interval=1, broker_commit_interval=0.5,
        consumer_max_fetch_size=16 * 1024 * 1024,
        consumer_auto_offset_reset="earliest", consumer_group_instance_id=settings.scheduler_instance,
        datadir=str(settings.var_dir / "scheduler"),
    )


def prepare(settings: Settings) -> None:
    """Create the core topics (faust must find them) and expose metrics, before the app starts."""
    ensure_core_topics(settings)
    metrics.serve_metrics(settings.scheduler_metrics_port, settings.bind_host)
    # faust leaves the client loggers at DEBUG: every message would build a log record nobody prints
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
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


async def follow_topic(settings: Settings, credentials: faust.types.auth.CredentialsT | None, topic: str,
                       parse: Callable[[bytes], BaseModel], handle: Callable[[BaseModel], Awaitable[str | None]], *,
                       on_invalid: Callable[[bytes, str, str, int, int], None], **options: Any) -> None:
    """Read a whole topic with no consumer group; what does not parse, or what ``handle`` refuses (it returns
    why), goes to ``on_invalid`` with the reason."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka_bootstrap, group_id=None, **options,
                                **credentials_to_aiokafka_auth(credentials))
    await consumer.start()
    try:
        async for message in consumer:
            try:
                parsed = parse(message.value)
            except ValidationError as exc:
                on_invalid(message.value, describe_validation_error(exc), topic, message.partition, message.offset)
                continue
            refusal = await handle(parsed)
            if refusal is not None:
                on_invalid(message.value, refusal, topic, message.partition, message.offset)
    finally:
        await consumer.stop()
