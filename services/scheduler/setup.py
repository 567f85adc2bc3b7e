"""The scheduler's plumbing: the faust app's settings, its topics and metrics endpoint before it starts,
and leaving the group."""
from __future__ import annotations

import logging
from typing import Any

import faust
from faust.app.base import BootStrategy
from kafka.admin import MemberToRemove
from kafka.errors import KafkaError

from shared import metrics
from shared.adapters import topics
from shared.adapters.kafka_io import ensure_core_topics, make_admin
from shared.settings import Settings

SERVICE = "scheduler"


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
    """faust's options; its data directory is made here, parents and all (faust makes only the last part:
    a fresh host's or container's ``MERIDIAN_VAR_DIR`` does not exist yet)."""
    datadir = settings.var_dir / "scheduler"
    datadir.mkdir(parents=True, exist_ok=True)
    return dict(Worker=LogFriendlyWorker, web_enabled=False, datadir=str(datadir))


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
