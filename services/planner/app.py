"""Planner: turns load statistics into allocation plans.

Consumes ``meridian.load-stats`` (group ``meridian.planner``); produces ``AllocationPlan`` on
``meridian.plans``. The planner's registry entry (`shared.policy.registry`) makes its loops, of two kinds:

- per application (Kairos', `shared.kairos.control`): fed each application's query sizes and arrivals as
  they come, it plans once enough were seen, then again whenever their distribution shifts, with zero
  online evaluations (and, following the load, as the rate rises and falls);
- the whole fleet at once (Proteus', `shared.proteus.control`): each statistics window's arrivals of all
  applications go to a re-plan monitor, and it solves the MILP periodically and on bursts.

Run: ``python -m services.planner``
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from kafka import KafkaProducer
from pydantic import ValidationError

from schemas import AllocationPlan, LoadStatistics, worker_event_adapter
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error, send_dead_letter
from shared.adapters.kafka_io import ensure_core_topics, make_consumer, make_producer
from shared.catalogue import Catalogue
from shared.kairos.control import KairosPlanningLoop
from shared.plans import to_message
from shared.policy.base import PlanStatus
from shared.policy.registry import build_planning
from shared.proteus.control import PlanningController
from shared.settings import Settings

SERVICE = "planner"

logger = logging.getLogger(__name__)


@dataclass
class PlannerContext:
    settings: Settings
    producer: KafkaProducer
    applications: dict[str, KairosPlanningLoop] = field(default_factory=dict)
    #: the fleet-wide planner (``proteus``), and the arrivals of the statistics window being gathered
    #: (one per scheduler tick: every application's statistics of a tick carry about the same ``at``)
    fleet: PlanningController | None = None
    arrivals: Counter[str] = field(default_factory=Counter)
    arrivals_at: float | None = None
    #: devices of each application's latest applied plan (to drop the gauges of devices a new plan drops)
    planned_devices: dict[str, set[str]] = field(default_factory=dict)


def handle_load_statistics(ctx: PlannerContext, stats: LoadStatistics, now: float) -> AllocationPlan | None:
    if ctx.fleet is not None:
        message = None
        if ctx.arrivals_at is not None and stats.at - ctx.arrivals_at > stats.window_s / 2:
            message = plan_fleet(ctx, now)  # the next window began: the gathered one is complete
        if ctx.arrivals_at is None:
            ctx.arrivals_at = stats.at
        ctx.arrivals[stats.application] += round(stats.arrival_rate_qps * stats.window_s)
        return message
    loop = ctx.applications.get(stats.application)
    if loop is None:
        return None
    loop.on_query_sizes(stats.application, stats.batch_sizes)
    # on the scheduler's clock: statistics read late, or several at once, still span their windows
    return publish_new_plan(ctx, loop, stats.application, stats.at,
                            {stats.application: round(stats.arrival_rate_qps * stats.window_s)})


def handle_worker_event(ctx: PlannerContext, raw: bytes) -> None:
    """A worker event for the fleet planner's learned profiles; one it cannot read is the scheduler's to
    refuse (it reads the same topic), so it is skipped here."""
    try:
        event = worker_event_adapter.validate_json(raw)
    except ValidationError:
        return
    if ctx.fleet is not None:
        ctx.fleet.on_worker_event(event)


def plan_fleet(ctx: PlannerContext, now: float) -> AllocationPlan | None:
    """One statistics window of the fleet-wide planner: record its arrivals, re-plan if it is due."""
    assert ctx.fleet is not None
    arrivals, ctx.arrivals, ctx.arrivals_at = dict(ctx.arrivals), Counter(), None
    return publish_new_plan(ctx, ctx.fleet, "fleet", now, arrivals)


def publish_new_plan(ctx: PlannerContext, loop: PlanningController | KairosPlanningLoop, key: str, now: float,
                     arrivals: dict[str, int] | None = None) -> AllocationPlan | None:
    """Run the planning loop; publish the plan it made, if any (an infeasible one too: it is not applied)."""
    solves = len(loop.log)
    started = time.perf_counter()
    loop.control(now, arrivals or {})
    if len(loop.log) == solves:
        return None  # not due
    metrics.PLANNER_SOLVE.labels(SERVICE, ctx.settings.planner).observe(time.perf_counter() - started)
    _, reason, plan = loop.log[-1]
    message = to_message(plan, planner=ctx.settings.planner, now=now)
    message = message.model_copy(update={"message": f"{reason}: {message.message}"[:2000]})
    ctx.producer.send(topics.PLANS, key=key.encode(), value=message.model_dump_json().encode())
    observe_plan(ctx, key, message)
    return message


def observe_plan(ctx: PlannerContext, application: str, message: AllocationPlan) -> None:
    """The decision as metrics: its status, cost and, for a plan the fleet applies, workers per device."""
    metrics.PLANS.labels(SERVICE, message.status).inc()
    metrics.PLAN_TIMESTAMP.labels(application).set(message.at)
    if message.status == "infeasible":
        return  # the fleet keeps the previous plan's workers, and so do these gauges
    if message.cost_per_hour is not None:
        metrics.FLEET_COST.labels(application).set(message.cost_per_hour)
    counts = Counter(p.device for p in message.placements)
    for device in ctx.planned_devices.get(application, set()) - set(counts):
        metrics.PLANNED_WORKERS.remove(application, device)
    for device, count in counts.items():
        metrics.PLANNED_WORKERS.labels(application, device).set(count)
    ctx.planned_devices[application] = set(counts)


def bootstrap(settings: Settings) -> PlannerContext:
    ctx = PlannerContext(settings=settings, producer=make_producer(settings))
    try:
        entry, loops = build_planning(settings, Catalogue.from_settings(settings))
    except ValueError as exc:
        raise SystemExit(f"planner: {exc}") from None
    assert entry.planning is not None
    if entry.planning.fleet_wide:
        ctx.fleet = cast(PlanningController, loops["fleet"])
    else:
        ctx.applications.update(cast(dict[str, KairosPlanningLoop], loops))
    ensure_core_topics(settings)
    return ctx


def initialize_metrics(settings: Settings) -> None:
    """Export the counters at 0 before the first plan, so ``increase()`` sees the first one too."""
    for status in PlanStatus:
        metrics.PLANS.labels(SERVICE, status.value)
    metrics.PLANNER_SOLVE.labels(SERVICE, settings.planner)
    metrics.DEAD_LETTERS.labels(SERVICE)


def main() -> None:
    settings = Settings()
    ctx = bootstrap(settings)
    metrics.serve_metrics(settings.planner_metrics_port, settings.bind_host)
    initialize_metrics(settings)
    # load statistics, and for a fleet-wide planner the workers' events (what their batches really take)
    followed = (topics.LOAD_STATS, topics.WORKER_EVENTS) if ctx.fleet is not None else (topics.LOAD_STATS,)
    consumer = make_consumer(settings, *followed, group_id="meridian.planner", auto_offset_reset="latest")
    # fetch the topics' metadata before the first join: a join that races it gets no partition
    for topic in followed:
        consumer.partitions_for_topic(topic)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    if record.topic == topics.WORKER_EVENTS:
                        handle_worker_event(ctx, record.value)
                        continue
                    try:
                        stats = LoadStatistics.model_validate_json(record.value)
                    except ValidationError as exc:
                        send_dead_letter(ctx.producer, record, describe_validation_error(exc), service=SERVICE)
                        continue
                    handle_load_statistics(ctx, stats, time.time())
            ctx.producer.flush()
            consumer.commit()
    finally:
        consumer.close()
        ctx.producer.close(timeout=5)
