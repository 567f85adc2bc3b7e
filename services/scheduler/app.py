"""Scheduler: the faust loop around the serving core (`shared.serving.SchedulerCore`).

Consumes ``meridian.queries`` (faust agent) and, with no consumer group, ``meridian.worker-events``,
``meridian.plans`` and ``meridian.control`` (policy switches, `switching`); produces
``meridian.dispatch.<worker>`` batches, its own ``rejected``/``dropped`` results on
``meridian.results.<application>`` (``meridian.results`` for messages of no known application), copies
of bad input on ``meridian.dead-letter`` and ``meridian.load-stats``. Every decision is the core's; this
module only moves messages. A query's message is acknowledged (its offset committed) only once its
batch is durably dispatched or its final result is sent, so a restarted scheduler re-reads what it had
not acknowledged, and skips those it finds it had handed on (`handed_on`). Several scheduler processes
split the partitions (the applications) between them; a rebalance moves them with the same mechanism
(`take_over`).

Run: ``python -m services.scheduler``
"""
from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
from typing import cast

import faust
from faust.types import TP
from pydantic import BaseModel, ValidationError

from schemas import (AllocationPlan, HopTimestamps, LoadVariant, Query, Result, SwitchPolicy, position,
                     worker_event_adapter)
from services.scheduler import messages
from services.scheduler.handed_on import handed_on_query_ids
from services.scheduler.load_window import LoadWindow
from services.scheduler.metadata_feed import follow_metadata_store
from services.scheduler.policy_options import FEEDS, build_policy, configured_policies, follow_ramsis_generation
from services.scheduler.publisher import Publisher
from services.scheduler.setup import SERVICE, app_options, follow_topic
from services.scheduler.switching import PolicySwitcher
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import best_effort_id, dead_letter, describe_validation_error
from shared.catalogue import Catalogue
from shared.plans import from_message
from shared.policy.per_application import PerApplicationDispatch
from shared.serving import CoreConfig, SchedulerCore, Step
from shared.settings import Settings

STEP_INTERVAL_S = 0.05
#: Kafka's timestamp type of a record stamped by its producer (the other is the broker's append time)
CREATE_TIME = 0

logger = logging.getLogger(__name__)


def make_core(settings: Settings, catalogue: Catalogue) -> SchedulerCore:
    """The core the live scheduler serves with, on the wall clock: each application's configured policy
    (``scheduler_policy`` for those not named), switchable while serving."""
    try:
        policy = build_policy(settings, catalogue.profiles, step_interval_s=STEP_INTERVAL_S)
    except ValueError as exc:
        raise SystemExit(f"scheduler: {exc}") from None
    config = CoreConfig.from_settings(settings, batch_id_prefix=f"b{secrets.token_hex(4)}")
    return SchedulerCore(policy, catalogue, config, clock=time.time)


def build_app(settings: Settings) -> faust.App:
    app = faust.App(topics.SCHEDULER_GROUP, **app_options(settings))
    publisher = Publisher(settings)
    core = make_core(settings, Catalogue.from_settings(settings))
    policies = cast(PerApplicationDispatch, core.policy)
    fed = configured_policies(settings) & FEEDS.keys()
    metadata = follow_metadata_store(app, core, policies, settings) if "infaas" in fed else None
    switcher = PolicySwitcher(settings, core, policies, fed=fed, step_interval_s=STEP_INTERVAL_S)
    load = LoadWindow(settings.load_stats_interval_s)
    #: re-read query ids found handed on already, and the queries topic's partitions this process owns
    handed_on: set[str] = set()
    owned: set[int] = set()
    #: set once this process knows what it owns; clear while a rebalance moves partitions
    settled = asyncio.Event()

    def results_topic(application: str | None) -> str:
        """The application's results topic once the catalogue knows it (a registration made the topic)."""
        return topics.results_topic(application if application in core.catalogue.applications else None)

    async def send_final(result: Result, event: faust.EventT | None) -> None:
        written = publisher.send(results_topic(result.application), key=result.query_id.encode(),
                                 value=result.model_dump_json().encode())
        metrics.RESULTS.labels(result.application or "unknown", result.status.value, messages.reason_class(result)).inc()
        if event is not None:
            asyncio.ensure_future(ack_when_written(written, [event]))

    async def copy_to_dead_letters(raw: bytes, reason: str, source: str, partition: int, offset: int) -> None:
        letter = dead_letter(raw, reason, service=SERVICE, source_topic=source, partition=partition, offset=offset)
        publisher.send(topics.DEAD_LETTER, value=letter.model_dump_json().encode())
        metrics.DEAD_LETTERS.labels(SERVICE).inc()

    async def act(step: Step) -> None:
        now = time.time()
        for item, reason in step.dropped:
            await send_final(messages.dropped(item, reason, now), item.ack_token)
        for worker_id, variant in step.loads:
            load = LoadVariant(worker_id=worker_id, variant=variant)
            publisher.send(topics.dispatch_topic(worker_id), key=variant.encode(), value=load.model_dump_json().encode())
        for dispatch in step.dispatches:
            batch = messages.dispatch_batch(dispatch, core.note_of)
            written = publisher.send(topics.dispatch_topic(batch.worker_id), key=batch.batch_id.encode(),
                                     value=batch.model_dump_json().encode())
            asyncio.ensure_future(ack_when_written(written, [i.ack_token for i in dispatch.items
                                                             if i.ack_token is not None]))
            metrics.DISPATCHED_BATCH_ROWS.labels(batch.variant).observe(sum(q.batch_size for q in batch.queries))
            for item in dispatch.items:
                application = item.pending.application
                metrics.HOP_LATENCY.labels(application, "queue_wait").observe(dispatch.at_s - item.admitted_s)
                metrics.DISPATCHED_QUERIES.labels(application, policies.policy_of(application)).inc()

    async def refuse(event: faust.EventT, reason: str, query: Query | None, *, trusted_id: bool) -> None:
        """Answer ``rejected`` (under the query id only if it is the query's own) and keep a dead letter."""
        raw, message = event.value, event.message
        at = position(message.topic, message.partition, message.offset)
        if query is not None and trusted_id:
            result = messages.rejected(query.query_id, reason, position=at, application=query.application,
                                       timestamps=HopTimestamps(client_sent=query.sent_at))
        else:
            claimed = query.query_id if query is not None else best_effort_id(raw)
            result = messages.rejected_at(at, reason, claimed_query_id=claimed,
                                          application=query and query.application)
        await send_final(result, event)
        await copy_to_dead_letters(raw, reason, topics.QUERIES, message.partition, message.offset)

    async def serve() -> None:
        """Let the core decide, unless a rebalance may be moving applications between schedulers (from the
        moment this process hears of it until it has taken over its share): a query is handed on by one
        owner only."""
        if settled.is_set() and not app.rebalancing:
            await act(core.step())

    @app.on_partitions_revoked.connect
    async def hold(app: faust.App, revoked: set[TP], **_: object) -> None:
        settled.clear()

    @app.on_partitions_assigned.connect
    async def take_over(app: faust.App, assigned: set[TP], **_: object) -> None:
        """Queries of partitions gone to another scheduler are let go unanswered (their messages were not
        acknowledged, so the new owner reads them again). For partitions new to this process (at start, or
        from a scheduler that left or died), what was handed on before is read back while they are
        paused, so that no re-read query is served twice."""
        nonlocal handed_on
        now_owned = {tp.partition for tp in assigned if tp.topic == topics.QUERIES}
        gone = owned - now_owned
        if gone:
            released = core.release(lambda delivery: cast(tuple[int, int], delivery)[0] in gone)
            logger.info("partitions %s moved to another scheduler: %d waiting queries let go", sorted(gone), released)
        if taken := now_owned - owned:
            logger.info("partitions %s of %s are this scheduler's: reading back dispatch and results since their "
                        "oldest unacknowledged query (at most %g s) first, to skip what was handed on already",
                        sorted(taken), topics.QUERIES, settings.restart_lookback_s)
            reading = time.monotonic()
            handed_on = await asyncio.to_thread(handed_on_query_ids, settings, taken,
                                                lookback_s=settings.restart_lookback_s)
            logger.info("read back in %.1f s: %d queries were handed on already", time.monotonic() - reading,
                        len(handed_on))
        owned.clear()
        owned.update(now_owned)
        metrics.OWNED_PARTITIONS.set(len(owned))
        settled.set()

    started = time.monotonic()
    member = f" as static member {settings.scheduler_instance!r}" if settings.scheduler_instance else ""
    logger.info("joining consumer group %s%s: waiting for partitions of %s", topics.SCHEDULER_GROUP, member,
                topics.QUERIES)

    @app.task
    async def say_what_it_waits_for() -> None:
        """A starting scheduler says what it waits for while it waits: a silent start looks like a hang."""
        await settled.wait()
        logger.info("serving partitions %s of %s, %.1f s after start", sorted(owned), topics.QUERIES,
                    time.monotonic() - started)
        if not core.workers:
            logger.info("no worker heard yet: queries wait for a worker's heartbeat on %s", topics.WORKER_EVENTS)
            while not core.workers:
                await asyncio.sleep(0.1)
            logger.info("heard worker %s, %.1f s after start", next(iter(core.workers)), time.monotonic() - started)

    @app.agent(app.topic(topics.QUERIES, partitions=settings.query_partitions))
    async def admit_queries(stream: faust.StreamT) -> None:
        async for event in stream.noack().events():
            await settled.wait()  # faust may resume fetching before the take-over has read what was handed on
            message = event.message
            try:
                query = Query.model_validate_json(event.value)
            except ValidationError as exc:
                await refuse(event, describe_validation_error(exc), None, trusted_id=False)
                continue
            if query.query_id in handed_on:  # re-read after a restart: dispatched or answered before it
                handed_on.discard(query.query_id)
                event.ack()
                continue
            load.record(query.application, query.batch_size)
            if metadata is not None and query.application not in core.catalogue.applications:
                await metadata.learn(query.application)
            created_s = message.timestamp if message.timestamp_type == CREATE_TIME else None
            received = messages.Received(query, position(message.topic, message.partition, message.offset))
            rejection = core.admit(query, payload=received, ack_token=event, delivery=(message.partition, message.offset),
                                   transport_s=created_s)
            if rejection is not None:
                await refuse(event, rejection.reason, query, trusted_id=not rejection.foreign_id)
                continue
            await serve()

    follow = functools.partial(follow_topic, settings, app.conf.broker_credentials, on_invalid=copy_to_dead_letters)

    async def on_worker_event(event: BaseModel) -> None:
        core.on_worker_event(event)
        await serve()

    async def on_plan(plan: AllocationPlan) -> None:
        # only the configured planner's plans: the autoscaler's and others' split load their own way
        if plan.status != "infeasible" and plan.planner == settings.planner:
            core.apply_plan(from_message(plan))

    @app.task
    async def follow_worker_events() -> None:
        """The whole fleet's events, from now on."""
        await follow(topics.WORKER_EVENTS, worker_event_adapter.validate_json, on_worker_event,
                     auto_offset_reset="latest", fetch_max_wait_ms=5)

    @app.task
    async def follow_plans() -> None:
        """Every plan, oldest first, so the newest one wins also after a restart."""
        await follow(topics.PLANS, AllocationPlan.model_validate_json, on_plan, auto_offset_reset="earliest")

    async def on_switch(switch: SwitchPolicy) -> str | None:
        refusal = await switcher.apply(switch)
        if refusal is None:
            await serve()
        return refusal

    async def refuse_control(raw: bytes, reason: str, source: str, partition: int, offset: int) -> None:
        logger.warning("refused the control message at %s/%d@%d: %s", source, partition, offset, reason)
        await copy_to_dead_letters(raw, reason, source, partition, offset)

    @app.task
    async def follow_control() -> None:
        """Every policy switch, oldest first, so the newest one per application wins also after a restart."""
        await follow_topic(settings, app.conf.broker_credentials, topics.CONTROL, SwitchPolicy.model_validate_json,
                           on_switch, on_invalid=refuse_control, auto_offset_reset="earliest")

    @app.timer(interval=STEP_INTERVAL_S)
    async def housekeeping() -> None:
        """Drops queries past hope, notices silent workers and wakes waiting batches with no message."""
        await serve()
        for application, depth in core.depth_by_application().items():
            metrics.QUEUE_DEPTH.labels(application).set(depth)
        metrics.WORKERS_KNOWN.set(len(core.workers))
        for hop, reserve_ms in core.transport.quantiles_ms().items():
            metrics.TRANSPORT_RESERVE.labels(hop).set(reserve_ms)

    @app.timer(interval=settings.load_stats_interval_s)
    async def publish_load_statistics() -> None:
        for stats in load.close(core.depth_by_application(), time.time()):
            publisher.send(topics.LOAD_STATS, key=stats.application.encode(), value=stats.model_dump_json().encode())

    @app.task
    async def serve_delivery_reports() -> None:
        await publisher.serve_delivery_reports()

    @app.on_before_shutdown.connect
    async def flush_sends(app: faust.App, **_: object) -> None:
        publisher.flush()

    if "ramsis" in fed:
        follow_ramsis_generation(app, policies, core.catalogue.profiles, settings)
    return app


async def ack_when_written(written: asyncio.Future[None], events: list[faust.EventT]) -> None:
    await written
    for event in events:
        event.ack()
