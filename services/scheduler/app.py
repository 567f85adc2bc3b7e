"""Scheduler: the single decision point for the applications of its query partitions.

Consumes ``meridian.queries`` (faust agent) and ``meridian.worker-events`` (every scheduler reads all);
produces ``meridian.dispatch.<worker>`` batches, its own ``rejected``/``dropped`` results on
``meridian.results``, copies of bad input on ``meridian.dead-letter`` and ``meridian.load-stats``.
A query's message is acknowledged (its offset committed) only once its batch is durably dispatched or
its final result is sent, so a restarted scheduler re-reads what it had not handed on.

Run: ``python -m services.scheduler``
"""
from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections import deque

import faust
from aiokafka import AIOKafkaConsumer
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from schemas import AllocationPlan, LoadStatistics, Query, Result, worker_event_adapter
from services.scheduler.core import SchedulerCore, Step, rejected
from services.scheduler.policy_options import dispatch_options, follow_ramsis_generation
from shared import metrics, topics
from shared.catalogue import Catalogue
from shared.dead_letter import best_effort_id, dead_letter, describe_validation_error
from shared.plans import from_message
from shared.policy.registry import make_dispatch
from shared.settings import KafkaSecurity, Settings

SERVICE = "scheduler"
STEP_INTERVAL_S = 0.05
MAX_SIZES_PER_WINDOW = 20_000

settings = Settings()


def broker_credentials(security: KafkaSecurity) -> faust.types.auth.CredentialsT | None:
    """The faust/aiokafka form of the same ``MERIDIAN_KAFKA_*`` security settings the other services use."""
    context = ssl.create_default_context(cafile=security.ssl_cafile) if "SSL" in security.security_protocol else None
    if security.sasl_mechanism:
        return faust.SASLCredentials(username=security.sasl_username, password=security.sasl_password,
                                     mechanism=security.sasl_mechanism, ssl_context=context)
    return faust.SSLCredentials(context) if context is not None else None


credentials = broker_credentials(settings.kafka_security)
#: the same credentials for the plain aiokafka consumers below
client_auth = credentials_to_aiokafka_auth(credentials)
app = faust.App(
    "meridian-scheduler",
    broker=f"kafka://{settings.kafka_bootstrap}",
    broker_credentials=credentials,
    value_serializer="raw",
    key_serializer="raw",
    web_enabled=False,
    topic_allow_declare=False,
    topic_disable_leader=True,
    broker_session_timeout=10,
    broker_heartbeat_interval=1,
    broker_commit_interval=0.5,
    producer_linger_ms=0,
    producer_acks=-1,
    producer_max_request_size=16 * 1024 * 1024,
    consumer_max_fetch_size=16 * 1024 * 1024,
    consumer_auto_offset_reset="earliest",
    datadir=str(settings.var_dir / "scheduler"),
)
queries_topic = app.topic(topics.QUERIES, partitions=settings.query_partitions)
results_topic = app.topic(topics.RESULTS, partitions=settings.result_partitions)
dead_letter_topic = app.topic(topics.DEAD_LETTER)
load_stats_topic = app.topic(topics.LOAD_STATS)

catalogue = Catalogue.from_settings(settings)
core = SchedulerCore(
    make_dispatch(settings.scheduler_policy, catalogue.profiles,
                  **dispatch_options(settings, step_interval_s=STEP_INTERVAL_S)),
    catalogue,
    drop_after_slo_multiple=settings.drop_after_slo_multiple,
    worker_timeout_s=3 * settings.heartbeat_interval_s,
)
#: query sizes that arrived since the last load statistics, per application (bounded)
sizes_in_window: dict[str, deque[int]] = {}


@app.agent(queries_topic)
async def admit_queries(stream: faust.StreamT) -> None:
    async for event in stream.noack().events():
        now = time.time()
        raw: bytes = event.value
        try:
            query = Query.model_validate_json(raw)
        except ValidationError as exc:
            await reject(rejected(best_effort_id(raw), describe_validation_error(exc)), raw, event)
            continue
        sizes_in_window.setdefault(query.application, deque(maxlen=MAX_SIZES_PER_WINDOW)).append(query.batch_size)
        rejection = core.admit(query, now, event)
        if rejection is not None:
            await reject(rejection, raw, event)
            continue
        await act(core.step(now))


async def reject(result: Result, raw: bytes, event: faust.EventT) -> None:
    await send_final(result, event)
    await copy_to_dead_letters(raw, result.reason or "rejected", topics.QUERIES, event.message.partition,
                               event.message.offset)


async def copy_to_dead_letters(raw: bytes, reason: str, source_topic: str, partition: int, offset: int) -> None:
    letter = dead_letter(raw, reason, service=SERVICE, source_topic=source_topic, partition=partition, offset=offset)
    await dead_letter_topic.send(value=letter.model_dump_json().encode())
    metrics.DEAD_LETTERS.labels(SERVICE).inc()


async def send_final(result: Result, event: faust.EventT | None) -> None:
    fut = await results_topic.send(key=result.query_id.encode(), value=result.model_dump_json().encode())
    metrics.RESULTS.labels(result.application or "unknown", result.status.value, reason_class(result)).inc()
    if event is not None:
        asyncio.ensure_future(ack_when_written(fut, [event]))


async def act(step: Step) -> None:
    for result, event in step.finals:
        await send_final(result, event)
    for load in step.loads:
        await worker_topic(load.worker_id).send(key=load.variant.encode(), value=load.model_dump_json().encode())
    for batch, events in step.dispatches:
        fut = await worker_topic(batch.worker_id).send(key=batch.batch_id.encode(),
                                                       value=batch.model_dump_json().encode())
        asyncio.ensure_future(ack_when_written(fut, [e for e in events if e is not None]))
        metrics.DISPATCHED_BATCH_ROWS.labels(batch.variant).observe(sum(q.batch_size for q in batch.queries))
        for work in batch.queries:
            waited = work.timestamps.dispatched - work.timestamps.scheduler_received
            metrics.HOP_LATENCY.labels(work.application, "queue_wait").observe(waited)


@functools.lru_cache(maxsize=4096)
def worker_topic(worker_id: str) -> faust.TopicT:
    return app.topic(topics.dispatch_topic(worker_id))


async def ack_when_written(fut: asyncio.Future, events: list[faust.EventT]) -> None:
    await fut
    for event in events:
        event.ack()


def reason_class(result: Result) -> str:
    return (result.reason or "").split(":")[0].split(" ")[0][:32] or "none"


@app.task
async def follow_worker_events() -> None:
    """Every scheduler process reads the whole fleet's events, from now on, with no consumer group."""
    consumer = AIOKafkaConsumer(topics.WORKER_EVENTS, bootstrap_servers=settings.kafka_bootstrap,
                                group_id=None, auto_offset_reset="latest", fetch_max_wait_ms=5, **client_auth)
    await consumer.start()
    try:
        async for message in consumer:
            try:
                event = worker_event_adapter.validate_json(message.value)
            except ValidationError as exc:
                await copy_to_dead_letters(message.value, describe_validation_error(exc), topics.WORKER_EVENTS,
                                           message.partition, message.offset)
                continue
            now = time.time()
            core.on_worker_event(event, now)
            await act(core.step(now))
    finally:
        await consumer.stop()


@app.task
async def follow_plans() -> None:
    """Routing policies (Proteus) split queries by the latest plan; read them all, oldest first, so the
    newest one wins also after a restart."""
    consumer = AIOKafkaConsumer(topics.PLANS, bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                auto_offset_reset="earliest", **client_auth)
    await consumer.start()
    try:
        async for message in consumer:
            try:
                plan = AllocationPlan.model_validate_json(message.value)
            except ValidationError as exc:
                await copy_to_dead_letters(message.value, describe_validation_error(exc), topics.PLANS,
                                           message.partition, message.offset)
                continue
            # only the configured planner's plans: the autoscaler's and others' split load their own way
            if plan.status != "infeasible" and plan.planner == settings.planner:
                core.policy.on_plan(from_message(plan))
    finally:
        await consumer.stop()


@app.timer(interval=STEP_INTERVAL_S)
async def housekeeping() -> None:
    """Drops queries past hope and notices silent workers even when no message arrives."""
    await act(core.step(time.time()))
    for application, depth in core.depth_by_application().items():
        metrics.QUEUE_DEPTH.labels(application).set(depth)
    metrics.WORKERS_KNOWN.set(len(core.workers))


if settings.scheduler_policy == "infaas":
    from services.scheduler.metadata_feed import follow_metadata_store

    follow_metadata_store(app, core, settings)
elif settings.scheduler_policy == "ramsis":
    follow_ramsis_generation(app, core.policy, catalogue.profiles, settings)


@app.timer(interval=settings.load_stats_interval_s)
async def publish_load_statistics() -> None:
    depth = core.depth_by_application()
    for application in set(sizes_in_window) | set(depth):
        sizes = sizes_in_window.pop(application, ())
        stats = LoadStatistics(
            application=application, window_s=settings.load_stats_interval_s,
            arrival_rate_qps=len(sizes) / settings.load_stats_interval_s,
            queue_depth=depth.get(application, 0), batch_sizes=list(sizes), at=time.time())
        await load_stats_topic.send(key=application.encode(), value=stats.model_dump_json().encode())


def prepare() -> None:
    """Create the core topics (faust must find them) and expose metrics, before the app starts."""
    from shared.kafka_io import make_admin

    admin = make_admin(settings)
    try:
        topics.ensure_topics(admin, topics.core_topics(settings))
    finally:
        admin.close()
    metrics.serve_metrics(settings.scheduler_metrics_port, settings.bind_host)
    # faust leaves the client loggers at DEBUG: every message would build a log record nobody prints
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    metrics.DEAD_LETTERS.labels(SERVICE)  # series exist before the first event
    for application in settings.applications:
        metrics.QUEUE_DEPTH.labels(application).set(0)
