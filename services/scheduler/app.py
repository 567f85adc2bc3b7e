"""Scheduler: the faust loop around the serving core (`shared.serving.SchedulerCore`).

Consumes ``meridian.queries`` (`query_reader`, librdkafka, in the scheduler group) and, with no consumer
group, ``meridian.worker-events``, ``meridian.plans`` and ``meridian.control`` (policy switches,
`switching`); produces
``meridian.dispatch.<worker>`` batches, its own ``rejected``/``dropped`` results on
``meridian.results.<application>`` (``meridian.results`` for messages of no known application), copies
of bad input on ``meridian.dead-letter`` and ``meridian.load-stats``. Every decision is the core's; this
module only wires the query reader and faust's tasks, timers and signals to the handlers (`handlers`),
which move messages. Several scheduler processes split the partitions (the applications) between them; a
rebalance moves them as a restart does (`SchedulerHandlers.release`, `SchedulerHandlers.take_over`).

Run: ``python -m services.scheduler``
"""
from __future__ import annotations

import functools
import logging
import secrets
import time

import faust

from schemas import AllocationPlan, SwitchPolicy, worker_event_adapter
from services.scheduler.feeds import start_feeds
from services.scheduler.follower import follow_topic
from services.scheduler.handlers import SchedulerHandlers
from services.scheduler.publisher import Publisher
from services.scheduler.query_reader import QueryReader
from services.scheduler.setup import SchedulerApp, app_options
from services.scheduler.switching import PolicySwitcher
from shared.adapters import topics
from shared.adapters.ramsis_store import policy_set_reader
from shared.adapters.rdkafka import RdProducer
from shared.catalogue import Catalogue
from shared.policy.registry import BuildContext, build_policy, configured_policies, feeds_of
from shared.serving import STEP_INTERVAL_S, CoreConfig, SchedulerCore
from shared.settings import Settings

logger = logging.getLogger(__name__)


def build_context(settings: Settings) -> BuildContext:
    """What the live scheduler builds its policies with (at start, and on a switch)."""
    return BuildContext(settings, STEP_INTERVAL_S, policy_sets=policy_set_reader(settings.redis_url))


def make_core(settings: Settings, catalogue: Catalogue) -> SchedulerCore:
    """The core the live scheduler serves with, on the wall clock: each application's configured policy
    (``scheduler_policy`` for those not named), switchable while serving."""
    try:
        policy = build_policy(catalogue.profiles, build_context(settings))
    except ValueError as exc:
        raise SystemExit(f"scheduler: {exc}") from None
    config = CoreConfig.from_settings(settings, batch_id_prefix=f"b{secrets.token_hex(4)}")
    return SchedulerCore(policy, catalogue, config, clock=time.time)


def build_app(settings: Settings) -> faust.App:
    app = SchedulerApp(topics.SCHEDULER_GROUP, **app_options(settings))
    core = make_core(settings, Catalogue.from_settings(settings))
    feeds = feeds_of(configured_policies(settings))
    switcher = PolicySwitcher(core, feeds=feeds, context=build_context(settings))
    handlers = SchedulerHandlers(settings, core, Publisher(RdProducer(settings)), switcher=switcher,
                                 metadata=start_feeds(feeds, app, core, settings))
    reader = QueryReader(settings, on_batch=handlers.on_queries, on_revoked=handlers.release,
                         on_assigned=handlers.take_over, commit_points=handlers.commit_points)
    app.task(reader.run)

    member = f" as static member {settings.scheduler_instance!r}" if settings.scheduler_instance else ""
    logger.info("joining consumer group %s%s: waiting for partitions of %s", topics.SCHEDULER_GROUP, member,
                topics.QUERIES)
    app.task(handlers.say_what_it_waits_for)

    follow = functools.partial(follow_topic, settings)

    @app.task
    async def follow_worker_events() -> None:
        """The whole fleet's events, from now on."""
        await follow(topics.WORKER_EVENTS, worker_event_adapter.validate_json, handlers.on_worker_event,
                     on_invalid=handlers.copy_to_dead_letters, from_start=False)

    @app.task
    async def follow_plans() -> None:
        """Every plan, oldest first, so the newest one wins also after a restart."""
        await follow(topics.PLANS, AllocationPlan.model_validate_json, handlers.on_plan,
                     on_invalid=handlers.copy_to_dead_letters, from_start=True)

    @app.task
    async def follow_control() -> None:
        """Every policy switch, oldest first, so the newest one per application wins also after a restart."""
        await follow(topics.CONTROL, SwitchPolicy.model_validate_json, handlers.on_switch,
                     on_invalid=handlers.refuse_control, from_start=True)

    app.timer(interval=STEP_INTERVAL_S)(handlers.housekeeping)
    app.timer(interval=settings.load_stats_interval_s)(handlers.publish_load_statistics)
    app.task(handlers.publisher.serve_delivery_reports)

    @app.on_before_shutdown.connect
    async def stop_reading(app: faust.App, **_: object) -> None:
        """Commit what was acknowledged once what is being sent is written."""
        await reader.stop()
        handlers.publisher.flush()

    return app
