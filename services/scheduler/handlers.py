"""What the scheduler does with each poll of queries, message, timer tick and rebalance: one object holding
the core and the publisher, whose methods `services.scheduler.app` wires to the query reader and to
faust's tasks, timers and signals.

Every decision is the core's; these handlers move messages. A query's message is acknowledged (its
offset becomes committable, `offsets`) only once its batch is durably dispatched or its final result is
sent, so a restarted scheduler re-reads what it had not acknowledged, and skips those it finds it had
handed on (`take_over`).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Hashable
from typing import Any, cast

from prometheus_client.metrics import MetricWrapperBase
from pydantic import BaseModel, ValidationError

from schemas import AllocationPlan, HopTimestamps, LoadVariant, Query, Result, SwitchPolicy, position, wire
from services.scheduler import messages
from services.scheduler.handed_on import handed_on_query_ids
from services.scheduler.load_window import LoadWindow
from services.scheduler.metadata_feed import MetadataFeed
from services.scheduler.offsets import Acknowledgements
from services.scheduler.publisher import Publisher
from services.scheduler.query_reader import QueryMessage
from services.scheduler.setup import SERVICE
from services.scheduler.switching import PolicySwitcher
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import best_effort_id, dead_letter, describe_validation_error
from shared.plans import from_message
from shared.policy.per_application import PerApplicationDispatch
from shared.serving import Dispatch, SchedulerCore, Step
from shared.serving.drift import DriftChange
from shared.settings import Settings

logger = logging.getLogger(__name__)


class SchedulerHandlers:
    def __init__(self, settings: Settings, core: SchedulerCore, publisher: Publisher, *,
                 switcher: PolicySwitcher, metadata: MetadataFeed | None) -> None:
        self.settings, self.core, self.publisher = settings, core, publisher
        self.policies = cast(PerApplicationDispatch, core.policy)
        self.switcher, self.metadata = switcher, metadata
        self.load = LoadWindow(settings.load_stats_interval_s)
        self.acks = Acknowledgements()
        #: re-read query ids found handed on already, and the queries topic's partitions this process owns
        self.handed_on: set[str] = set()
        self.owned: set[int] = set()
        #: set once this process knows what it owns (its first assignment)
        self.settled = asyncio.Event()
        self.started = time.monotonic()
        self._step_due = False
        #: (metric, labels) -> the labelled metric (`_labelled`)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}

    # -- queries ----------------------------------------------------------------------------------
    async def on_queries(self, batch: list[QueryMessage]) -> None:
        """A poll's messages of ``meridian.queries``, in order: each refused, skipped as handed on, or
        queued; then one step decides them all, and the first waits only for the others' admission."""
        for message in batch:
            self.acks.read(message.partition, message.offset)
            await self.on_query(message)
        self.serve()

    async def on_query(self, message: QueryMessage) -> None:
        core = self.core
        try:
            header, binary = wire.unpack(message.value)
            query = Query.model_validate_json(header)
        except wire.FrameError as exc:
            self.refuse(message, str(exc), None, trusted_id=False)
            return
        except ValidationError as exc:
            self.refuse(message, describe_validation_error(exc), None, trusted_id=False)
            return
        if len(binary) != query.binary_bytes:
            self.refuse(message, f"the message carries {len(binary):,} bytes of binary data, but its `inputs` "
                                 f"declare {query.binary_bytes:,}", query, trusted_id=False)
            return
        delivery = (message.partition, message.offset)
        if query.query_id in self.handed_on:  # re-read after a restart: dispatched or answered before it
            self.handed_on.discard(query.query_id)
            self.acks.acknowledge(*delivery)
            return
        self.load.record(query.application, query.batch_size)
        if self.metadata is not None and query.application not in core.catalogue.applications:
            await self.metadata.learn(query.application)
        received = messages.Received(query, position(topics.QUERIES, *delivery), binary)
        rejection = core.admit(query, payload=received, ack_token=delivery, delivery=delivery,
                               transport_s=message.created_s)
        if rejection is not None:
            self.refuse(message, rejection.reason, query, trusted_id=not rejection.foreign_id)

    def step_soon(self) -> None:
        """Step the core once the event loop has run what is ready: the worker events of one fetch are
        decided in one step instead of one step each."""
        if not self._step_due:
            self._step_due = True
            asyncio.get_running_loop().call_soon(self._step_now)

    def _step_now(self) -> None:
        self._step_due = False
        self.serve()

    def serve(self) -> None:
        """Let the core decide, once this process knows which applications are its own."""
        if self.settled.is_set():
            self.act(self.core.step())

    def act(self, step: Step) -> None:
        publisher, now = self.publisher, time.time()
        for item, reason in step.dropped:
            self.send_final(messages.dropped(item, reason, now), item.ack_token)
        for worker_id, variant in step.loads:
            load = LoadVariant(worker_id=worker_id, variant=variant)
            publisher.send(topics.dispatch_topic(worker_id), key=variant.encode(), value=load.model_dump_json().encode())
        for dispatch in step.dispatches:
            written = publisher.send(topics.dispatch_topic(dispatch.worker_id), key=dispatch.batch_id.encode(),
                                     value=messages.dispatch_value(dispatch))
            written.add_done_callback(functools.partial(self._dispatch_written, dispatch))
            self.observe_dispatch(dispatch, dispatch.rows)

    def _dispatch_written(self, dispatch: Dispatch, written: asyncio.Future[None]) -> None:
        """A batch's send is over: its queries' messages are acknowledged once the broker holds it; if the
        send failed (the broker or librdkafka refused it), the worker never got it, so the core frees the
        worker and each query is answered ``error`` with the reason: nothing stays in flight."""
        error = written.exception() if not written.cancelled() else None
        if not written.cancelled() and error is None:
            _acknowledge_if_written(self.acks, [i.ack_token for i in dispatch.items if i.ack_token is not None], written)
            return
        reason = f"its batch could not be sent to worker {dispatch.worker_id}: {error or 'the send was cancelled'}"
        logger.warning("batch %s of %d queries: %s", dispatch.batch_id, len(dispatch.items), reason)
        self.core.batch_failed(dispatch.worker_id, dispatch.batch_id)
        now = time.time()
        for item in dispatch.items:
            self.send_final(messages.failed(item, reason[:2000], now), item.ack_token)
        self.step_soon()

    def observe_dispatch(self, dispatch: Dispatch, rows: int) -> None:
        """A batch's metrics: its rows, and per query its wait in the queue; counted per application."""
        self._labelled(metrics.DISPATCHED_BATCH_ROWS, dispatch.variant).observe(rows)
        dispatched: dict[str, int] = {}
        for item in dispatch.items:
            application = item.pending.application
            self._labelled(metrics.HOP_LATENCY, application, "queue_wait").observe(dispatch.at_s - item.admitted_s)
            dispatched[application] = dispatched.get(application, 0) + 1
        for application, count in dispatched.items():
            self._labelled(metrics.DISPATCHED_QUERIES, application, self.policies.policy_of(application)).inc(count)

    def _labelled(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label set: prometheus-client's lookup takes a lock and
        builds its key on every call (~5 µs each in a no-broker harness of the handlers)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def refuse(self, message: QueryMessage, reason: str, query: Query | None, *, trusted_id: bool) -> None:
        """Answer ``rejected`` (under the query id only if it is the query's own) and keep a dead letter."""
        raw = message.value
        at = position(topics.QUERIES, message.partition, message.offset)
        if query is not None and trusted_id:
            result = messages.rejected(query.query_id, reason, position=at, application=query.application,
                                       timestamps=HopTimestamps(client_sent=query.sent_at))
        else:
            claimed = query.query_id if query is not None else best_effort_id(_header(raw))
            result = messages.rejected_at(at, reason, claimed_query_id=claimed,
                                          application=query and query.application)
        self.send_final(result, (message.partition, message.offset))
        self.copy_to_dead_letters(raw, reason, topics.QUERIES, message.partition, message.offset)

    def send_final(self, result: Result, delivery: Hashable | None) -> None:
        """``delivery``: the (partition, offset) of the message this answers, if not acknowledged yet."""
        written = self.publisher.send(self.results_topic(result.application), key=result.query_id.encode(),
                                      value=result.model_dump_json().encode())
        self._labelled(metrics.RESULTS, result.application or "unknown", result.status.value,
                       messages.reason_class(result)).inc()
        metrics.count_class_result(result, within_slo=False)
        if delivery is not None:
            self.acknowledge_when_written(written, [delivery])

    def acknowledge_when_written(self, written: asyncio.Future[None], deliveries: list[Hashable]) -> None:
        """Acknowledge the messages at ``deliveries`` once ``written`` says their answer or batch is
        durable; never if it failed (they are read again after a restart)."""
        written.add_done_callback(functools.partial(_acknowledge_if_written, self.acks, deliveries))

    async def commit_points(self, *, final: bool = False) -> dict[int, int]:
        """What the query reader may commit; ``final``: once every send under way is written."""
        if final:
            self.publisher.flush()
            await asyncio.sleep(0)  # the delivery reports' acknowledgements
        return self.acks.commit_points()

    def results_topic(self, application: str | None) -> str:
        """The application's results topic once the catalogue knows it (a registration made the topic)."""
        return topics.results_topic(application if application in self.core.catalogue.applications else None)

    def copy_to_dead_letters(self, raw: bytes, reason: str, source: str, partition: int, offset: int) -> None:
        letter = dead_letter(raw, reason, service=SERVICE, source_topic=source, partition=partition, offset=offset)
        self.publisher.send(topics.DEAD_LETTER, value=letter.model_dump_json().encode())
        metrics.DEAD_LETTERS.labels(SERVICE).inc()

    # -- rebalances -------------------------------------------------------------------------------
    async def release(self, revoked: set[int], *, lost: bool = False) -> dict[int, int]:
        """Partitions gone to another scheduler: their waiting queries are let go unanswered (their messages
        were not acknowledged, so the new owner reads them again). Returns their commit points, once what
        is being sent for them is written, so the new owner finds it handed on. ``lost``: taken while this
        process was not heard, perhaps with the broker away; nothing can be committed, so nothing waits."""
        if not lost:
            self.publisher.flush()
            await asyncio.sleep(0)  # the delivery reports' acknowledgements
        released = self.core.release(lambda delivery: cast(tuple[int, int], delivery)[0] in revoked)
        logger.info("partitions %s moved to another scheduler: %d waiting queries let go", sorted(revoked), released)
        points = self.acks.commit_points(revoked)
        self.acks.forget(revoked)
        self.owned -= revoked
        metrics.OWNED_PARTITIONS.set(len(self.owned))
        return points

    async def take_over(self, assigned: set[int]) -> None:
        """Partitions new to this process (at start, or from a scheduler that left or died): what was handed
        on before is read back before any of their queries is, so that no re-read query is served twice."""
        if taken := assigned - self.owned:
            lookback_s = self.settings.restart_lookback_s
            logger.info("partitions %s of %s are this scheduler's: reading back dispatch and results since their "
                        "oldest unacknowledged query (at most %g s) first, to skip what was handed on already",
                        sorted(taken), topics.QUERIES, lookback_s)
            reading = time.monotonic()
            handed_on = await asyncio.to_thread(handed_on_query_ids, self.settings, taken, lookback_s=lookback_s)
            self.handed_on |= handed_on
            logger.info("read back in %.1f s: %d queries were handed on already", time.monotonic() - reading,
                        len(handed_on))
        self.owned |= assigned
        metrics.OWNED_PARTITIONS.set(len(self.owned))
        self.settled.set()

    async def say_what_it_waits_for(self) -> None:
        """A starting scheduler says what it waits for while it waits: a silent start looks like a hang."""
        started = self.started
        await self.settled.wait()
        logger.info("serving partitions %s of %s, %.1f s after start", sorted(self.owned), topics.QUERIES,
                    time.monotonic() - started)
        if not self.core.workers:
            logger.info("no worker heard yet: queries wait for a worker's heartbeat on %s", topics.WORKER_EVENTS)
            while not self.core.workers:
                await asyncio.sleep(0.1)
            logger.info("heard worker %s, %.1f s after start", next(iter(self.core.workers)), time.monotonic() - started)

    # -- the fleet and the operator ---------------------------------------------------------------
    async def on_worker_event(self, event: BaseModel) -> None:
        self.core.on_worker_event(event)
        while self.core.drift_changes:
            self.flag_drift(self.core.drift_changes.popleft())
        self.step_soon()

    @staticmethod
    def flag_drift(change: DriftChange) -> None:
        """Say in the log that a real worker's profile drifted, or came back (`shared.serving.drift`)."""
        if change.drifted:
            logger.warning("worker %s computes %s at %.2fx the latency it is served by: its profile has drifted "
                           "(restart it with an emptied measurement cache to measure it again)",
                           change.worker_id, change.variant, change.ratio)
        else:
            logger.info("worker %s computes %s at %.2fx its profile again", change.worker_id, change.variant,
                        change.ratio)

    async def on_plan(self, plan: AllocationPlan) -> None:
        # only the configured planner's plans: the autoscaler's and others' split load their own way
        if plan.status != "infeasible" and plan.planner == self.settings.planner:
            self.core.apply_plan(from_message(plan))

    async def on_switch(self, switch: SwitchPolicy) -> str | None:
        refusal = await self.switcher.apply(switch)
        if refusal is None:
            self.serve()
        return refusal

    def refuse_control(self, raw: bytes, reason: str, source: str, partition: int, offset: int) -> None:
        logger.warning("refused the control message at %s/%d@%d: %s", source, partition, offset, reason)
        self.copy_to_dead_letters(raw, reason, source, partition, offset)

    # -- timers -----------------------------------------------------------------------------------
    async def housekeeping(self) -> None:
        """Drops queries past hope, notices silent workers and wakes waiting batches with no message."""
        self.serve()
        core = self.core
        for application, depth in core.depth_by_application().items():
            metrics.QUEUE_DEPTH.labels(application).set(depth)
        metrics.WORKERS_KNOWN.set(len(core.workers))
        for hop, reserve_ms in core.transport.quantiles_ms().items():
            metrics.TRANSPORT_RESERVE.labels(hop).set(reserve_ms)
        metrics.PROFILE_DRIFT.clear()
        for (worker_id, variant), ratio in core.drift.ratios().items():
            metrics.PROFILE_DRIFT.labels(worker_id, variant).set(round(ratio, 3))

    async def publish_load_statistics(self) -> None:
        for stats in self.load.close(self.core.depth_by_application(), time.time()):
            self.publisher.send(topics.LOAD_STATS, key=stats.application.encode(),
                                value=stats.model_dump_json().encode())


def _acknowledge_if_written(acks: Acknowledgements, deliveries: list[Hashable], written: asyncio.Future[None]) -> None:
    if written.cancelled() or written.exception() is not None:
        logger.warning("a send failed (%s): %d messages stay unacknowledged",
                       "cancelled" if written.cancelled() else written.exception(), len(deliveries))
        return
    for partition, offset in cast(list[tuple[int, int]], deliveries):
        acks.acknowledge(partition, offset)


def _header(value: bytes) -> bytes:
    """A message's JSON header, where the id it claims is (the value itself when it is not framed)."""
    try:
        return wire.unpack(value)[0]
    except wire.FrameError:
        return value
