"""Fleet: makes the running workers match the latest allocation plan.

Consumes ``meridian.plans`` (group ``meridian.fleet``); starts and stops worker processes through a
launcher (here local processes; a cloud or Kubernetes launcher would implement the same calls). A
device this machine has runs a real onnxruntime worker; any other device is emulated from its measured
profile. New workers start before old ones stop, and a stopped worker's unfinished batches are
re-queued by the scheduler, so applying a plan loses no query.

Run: ``python -m services.fleet``
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
import os
import signal
import threading

from pydantic import ValidationError

from schemas import AllocationPlan
from services.launcher import LocalLauncher
from services.machines import LocalWorkerLauncher, WorkerLauncher
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error, send_dead_letter
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.fleet import FleetChanges, reconcile
from shared.policy.base import Placement
from shared.settings import Settings

SERVICE = "fleet"
AUTOSCALER = "autoscaler"

logger = logging.getLogger(__name__)


class Fleet:
    """The workers this service runs, and how to change them."""

    def __init__(self, settings: Settings, launcher: WorkerLauncher, devices: Iterable[str]) -> None:
        self.settings = settings
        self.launcher = launcher
        self.running: dict[str, Placement] = {}
        self._ids = itertools.count(1)
        for device in devices:  # at 0 before the first change, so increase() counts it
            for action in ("start", "stop"):
                metrics.SCALING_ACTIONS.labels(SERVICE, action, device)

    def apply(self, plan: AllocationPlan) -> FleetChanges:
        # the autoscaler starts and stops its own workers; its plans are a record, not a request
        if plan.status == "infeasible" or plan.planner == AUTOSCALER:
            metrics.FLEET_PLANS_RECEIVED.labels("skipped").inc()
            return FleetChanges(start=(), stop=())
        desired = [Placement(p.device, tuple(p.variants)) for p in plan.placements]
        changes = reconcile(desired, self.running)
        for placement in changes.start:
            self._start(placement)
            metrics.SCALING_ACTIONS.labels(SERVICE, "start", placement.device).inc()
        for worker_id in changes.stop:
            self.launcher.stop(worker_id)
            metrics.SCALING_ACTIONS.labels(SERVICE, "stop", self.running.pop(worker_id).device).inc()
        metrics.FLEET_PLANS_RECEIVED.labels("applied").inc()
        self._report()
        return changes

    def _start(self, placement: Placement) -> None:
        worker_id = f"{placement.device.replace('.', '-')}-{next(self._ids)}"
        self.launcher.start(worker_id, placement.device, placement.variants)
        self.running[worker_id] = placement

    def _report(self) -> None:
        metrics.FLEET_WORKERS.clear()
        for placement in self.running.values():
            emulated = "false" if placement.device == self.settings.local_device else "true"
            metrics.FLEET_WORKERS.labels(placement.device, emulated).inc()


def main() -> None:
    settings = Settings()
    metrics.serve_metrics(settings.fleet_metrics_port, settings.bind_host)
    for outcome in ("applied", "skipped"):  # at 0 before the first plan, so increase() counts it
        metrics.FLEET_PLANS_RECEIVED.labels(outcome)
    metrics.DEAD_LETTERS.labels(SERVICE)
    consumer = make_consumer(settings, topics.PLANS, group_id="meridian.fleet", auto_offset_reset="latest")
    # fetch the topic's metadata before the first join: a join that races it gets no partition
    consumer.partitions_for_topic(topics.PLANS)
    producer = make_producer(settings)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LocalLauncher(dict(os.environ), settings.var_dir / "logs" / "fleet") as launcher:
        workers = LocalWorkerLauncher(launcher, settings, metrics_port_base=settings.fleet_metrics_port_base)
        fleet = Fleet(settings, workers, workers.device_source)
        try:
            while not stop.is_set():
                for records in consumer.poll(timeout_ms=500).values():
                    for record in records:
                        try:
                            plan = AllocationPlan.model_validate_json(record.value)
                        except ValidationError as exc:
                            send_dead_letter(producer, record, describe_validation_error(exc), service=SERVICE)
                            continue
                        changes = fleet.apply(plan)
                        logger.info("plan %s (%s): started %d, stopped %d", plan.plan_id, plan.message,
                                    len(changes.start), len(changes.stop))
                producer.flush()
                consumer.commit()
        finally:
            consumer.close()
            producer.close(timeout=5)
