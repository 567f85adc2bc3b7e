"""Autoscaler: INFaaS's model- and VM-level autoscaling as a service.

Consumes ``meridian.load-stats`` (group ``meridian.autoscaler``) and ``meridian.worker-events`` (every
event, no group) into the shared autoscaler loop (`shared.autoscale.loop`, which the simulator runs too);
every second it polls the loop and carries out the answer, unloads and stops, then starts and loads:
variants through the workers' dispatch topics, machines through a `WorkerLauncher` (local processes, or a cluster's pods).
Each change is published as an ``AllocationPlan`` with its $/hour on ``meridian.plans``.

Run: ``python -m services.autoscaler``
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

from kafka import KafkaProducer
from pydantic import ValidationError

from schemas import LoadStatistics, LoadVariant, UnloadVariant, worker_event_adapter
from services.launcher import LocalLauncher
from services.machines import WorkerLauncher, worker_launcher
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error, send_dead_letter
from shared.adapters.kafka_io import ensure_core_topics, make_consumer, make_producer
from shared.autoscale import (
    Application,
    AutoscaleState,
    GreedyConfig,
    InstanceSpec,
    MachineCatalogue,
    ScaleActions,
    StartWorker,
    serving_catalogue,
)
from shared.autoscale.loop import AutoscaleLoop
from shared.catalogue import Catalogue
from shared.infaas.monitor import MonitorConfig
from shared.plans import to_message
from shared.policy.registry import make_autoscaler
from shared.profiles.format import ProfileSet
from shared.settings import Settings

SERVICE = "autoscaler"

logger = logging.getLogger(__name__)


def autoscale_catalogue(settings: Settings, profiles: ProfileSet | None = None) -> MachineCatalogue:
    """The simulator's catalogue (`serving_catalogue`) of the profiled devices (``profiles``, by default the
    settings' own), serving with its SLO every application of the fleet's policy: one given a policy of its
    own (``MERIDIAN_APPLICATION_POLICIES``) has workers of its own."""
    profiles = profiles if profiles is not None else Catalogue.from_settings(settings).profiles
    default_slo = profiles.slo_ms
    applications = [Application(app, family, settings.application_slo_ms.get(app, default_slo.get(family, 1000.0)))
                    for app, families in settings.applications.items() for family in families[:1]
                    if settings.application_policies.get(app, settings.scheduler_policy) == settings.scheduler_policy]
    return serving_catalogue(profiles, applications, startup_s=settings.autoscaler_worker_startup_s)


def initial_fleet(settings: Settings, catalogue: MachineCatalogue) -> tuple[StartWorker, ...]:
    """``autoscaler_initial_fleet`` as start actions, each variant serving the first application it may serve."""
    serves = catalogue.applications_by_option(settings.infaas_latency_budget)
    fleet = []
    for k, machine in enumerate(settings.autoscaler_initial_fleet):
        if machine.device not in catalogue.worker_type:
            raise SystemExit(f"autoscaler: autoscaler_initial_fleet: device {machine.device!r} has no profile; "
                             f"known: {', '.join(sorted(catalogue.worker_type))}")
        instances = []
        for variant in machine.variants:
            applications = serves.get((variant, machine.device))
            if not applications:
                raise SystemExit(f"autoscaler: autoscaler_initial_fleet: no application may use {variant!r} on "
                                 f"{machine.device!r} within its SLO")
            instances.append(InstanceSpec(variant, applications[0]))
        fleet.append(StartWorker(f"init-{machine.device}-{k}", machine.device, tuple(instances), "initial fleet"))
    return tuple(fleet)


class Autoscaler:
    """Carries out the shared loop's polls (`shared.autoscale.loop`): launcher, dispatch topics, plans."""

    def __init__(self, loop: AutoscaleLoop, launcher: WorkerLauncher, producer: KafkaProducer) -> None:
        self.loop = loop
        self.launcher = launcher
        self.producer = producer

    def poll(self, now_s: float) -> ScaleActions:
        poll = self.loop.poll(now_s)
        for worker_id in poll.expired:
            self.launcher.stop(worker_id)  # crashed, hung or never started: whatever is left of it goes
        metrics.PLANNER_SOLVE.labels(SERVICE, self.loop.policy.name).observe(poll.decision_s)
        if poll.plan is None:
            return poll.actions
        self.apply(poll.actions, poll.state)
        message = to_message(poll.plan, planner=SERVICE, now=now_s)
        self.producer.send(topics.PLANS, key=b"fleet", value=message.model_dump_json().encode())
        metrics.PLANS.labels(SERVICE, message.status).inc()
        if poll.plan.cost_per_hour is not None:
            metrics.FLEET_COST.labels("fleet").set(poll.plan.cost_per_hour)
        return poll.actions

    def apply(self, actions: ScaleActions, state: AutoscaleState) -> None:
        """Stops and unloads first, then starts and loads, as the policy's contract says."""
        devices = {worker.worker_id: worker.device for worker in state.workers}
        for unload in actions.unloads:
            self._command(UnloadVariant(worker_id=unload.worker_id, variant=unload.variant),
                          devices.get(unload.worker_id, "unknown"), unload.reason)
        for stop in actions.stop:
            self.launcher.stop(stop.worker_id)
            self._count("stop", devices.get(stop.worker_id, "unknown"), stop.reason)
        for start in actions.start:
            self.launcher.start(start.worker_id, start.device, [i.variant for i in start.instances])
            self._count("start", start.device, start.reason)
        for load in actions.loads:
            self._command(LoadVariant(worker_id=load.worker_id, variant=load.variant),
                          devices.get(load.worker_id, "unknown"), load.reason)
        self.producer.flush()

    def _command(self, command: LoadVariant | UnloadVariant, device: str, reason: str) -> None:
        self.producer.send(topics.dispatch_topic(command.worker_id), key=command.variant.encode(),
                           value=command.model_dump_json().encode())
        self._count(command.command, device, f"{command.variant} on {command.worker_id}: {reason}")

    def _count(self, action: str, device: str, reason: str) -> None:
        metrics.SCALING_ACTIONS.labels(SERVICE, action, device).inc()
        logger.info("%s (%s): %s", action, device, reason or "no reason given")


def main() -> None:
    settings = Settings()
    ensure_core_topics(settings)
    metrics.serve_metrics(settings.autoscaler_metrics_port, settings.bind_host)
    metrics.DEAD_LETTERS.labels(SERVICE)
    if settings.autoscaler_policy != "infaas":
        raise SystemExit(f"autoscaler: {settings.autoscaler_policy!r} runs in the simulator only (its fleet is "
                         "pinned or static there); the service runs 'infaas'")
    profiles = Catalogue.from_settings(settings).profiles
    policy = make_autoscaler(settings.autoscaler_policy, autoscale_catalogue(settings, profiles),
                             model=GreedyConfig.from_settings(settings))
    loop = AutoscaleLoop(policy, config=MonitorConfig.from_settings(settings), timer=time.perf_counter,
                         profiles=profiles)
    load_stats = make_consumer(settings, topics.LOAD_STATS, group_id="meridian.autoscaler",
                               auto_offset_reset="latest")
    load_stats.partitions_for_topic(topics.LOAD_STATS)
    events = make_consumer(settings, topics.WORKER_EVENTS, group_id=None, auto_offset_reset="latest",
                           fetch_max_wait_ms=50)
    producer = make_producer(settings)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalLauncher(dict(os.environ), settings.var_dir / "logs" / "autoscaler") as launcher:
        workers = worker_launcher(settings, launcher, metrics_port_base=settings.autoscaler_worker_port_base)
        autoscaler = Autoscaler(loop, workers, producer)
        now = time.time()
        autoscaler.apply(loop.begin(initial_fleet(settings, policy.catalogue), now), AutoscaleState(now))
        next_poll = time.time()
        try:
            while not stop.is_set():
                for consumer in (events, load_stats):
                    for records in consumer.poll(timeout_ms=50).values():
                        for record in records:
                            feed(autoscaler, producer, record, consumer is events)
                load_stats.commit()
                if time.time() >= next_poll:
                    autoscaler.poll(time.time())
                    next_poll = max(next_poll + policy.poll_interval_s, time.time())
        finally:
            events.close()
            load_stats.close()
            producer.close(timeout=5)


def feed(autoscaler: Autoscaler, producer: KafkaProducer, record, is_event: bool) -> None:
    try:
        if is_event:
            autoscaler.loop.on_worker_event(worker_event_adapter.validate_json(record.value), time.time())
        else:
            autoscaler.loop.on_load_statistics(LoadStatistics.model_validate_json(record.value))
    except ValidationError as exc:
        send_dead_letter(producer, record, describe_validation_error(exc), service=SERVICE)
