"""The scheduler's state and decisions, free of Kafka so it can be tested alone.

It admits queries (or rejects them with a reason), keeps them queued per application, tracks workers
from their events, asks the dispatch policy what to send where, and re-queues the work of workers that
went silent. The faust app (``app.py``) only moves messages in and out.
"""
from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field

from schemas import (
    BatchFinished,
    DispatchBatch,
    HopTimestamps,
    LoadVariant,
    Query,
    QueryWork,
    Result,
    ResultStatus,
    VariantLoaded,
    VariantUnloaded,
    WorkerHeartbeat,
    WorkerStopped,
)
from shared.catalogue import Catalogue, QueryRejected
from shared.policy.base import DispatchPolicy, PendingQuery, WorkerView


@dataclass
class Queued:
    pending: PendingQuery
    work: QueryWork
    #: what the transport needs to acknowledge the query's message once it is dispatched or final
    ack_token: Hashable | None
    #: the profiled latency of its fastest candidate: a query that waits longer than its SLO minus this
    #: can no longer meet its deadline
    fastest_s: float = 0.0


@dataclass
class WorkerRecord:
    worker_id: str
    device: str
    emulated: bool
    variants: tuple[str, ...]
    max_batch: int
    last_seen_s: float
    available_at_s: float
    incarnation: str | None = None
    #: batch id -> (queued items, predicted finish time)
    inflight: dict[str, tuple[list[Queued], float]] = field(default_factory=dict)

    def view(self, now_s: float) -> WorkerView:
        finish = max((f for _, f in self.inflight.values()), default=now_s)
        return WorkerView(
            worker_id=self.worker_id, device=self.device, variants=self.variants, inflight=len(self.inflight),
            busy_remaining_ms=max(0.0, finish - now_s) * 1000.0,
            available_at_s=self.available_at_s if not self.inflight else finish, max_batch=self.max_batch)


@dataclass
class Step:
    """What the transport must do after one scheduler step."""

    dispatches: list[tuple[DispatchBatch, list[Hashable]]] = field(default_factory=list)
    #: final results produced by the scheduler itself (rejected, dropped), with the tokens to ack
    finals: list[tuple[Result, Hashable | None]] = field(default_factory=list)
    loads: list[LoadVariant] = field(default_factory=list)


class SchedulerCore:
    def __init__(self, policy: DispatchPolicy, catalogue: Catalogue, *, drop_after_slo_multiple: float,
                 worker_timeout_s: float) -> None:
        self.policy = policy
        self.catalogue = catalogue
        self.queue: dict[str, Queued] = {}
        self.workers: dict[str, WorkerRecord] = {}
        self._drop_after = drop_after_slo_multiple
        self._worker_timeout_s = worker_timeout_s
        self._batch_ids = itertools.count()
        self._instance = f"{id(self):x}"

    # -- inputs ---------------------------------------------------------------------------------
    def admit(self, query: Query, now_s: float, ack_token: Hashable | None) -> Result | None:
        """Queue a valid query; return a ``rejected`` result for one that cannot be served."""
        stamps = HopTimestamps(client_sent=query.sent_at, scheduler_received=now_s)
        try:
            resolution = self.catalogue.resolve(query.application, query.model, query.batch_size, query.slo_ms,
                                                query.accuracy_floor)
        except QueryRejected as exc:
            return rejected(query.query_id, str(exc), application=query.application, timestamps=stamps)
        if query.inputs is None and not self._emulated_only(resolution.candidates):
            return rejected(query.query_id, "query has no `inputs` and a real (non-emulated) device may serve it",
                            application=query.application, timestamps=stamps)
        if query.query_id in self.queue:
            return None  # a redelivered copy of a query already waiting
        self.queue[query.query_id] = Queued(
            pending=PendingQuery(query.query_id, query.application, query.batch_size, now_s, query.slo_ms,
                                 resolution.candidates),
            work=QueryWork(query_id=query.query_id, application=query.application, batch_size=query.batch_size,
                           slo_ms=query.slo_ms, inputs=query.inputs, timestamps=stamps, note=resolution.note),
            ack_token=ack_token, fastest_s=self._fastest_s(resolution.candidates, query.batch_size))
        return None

    def on_worker_event(self, event: object, now_s: float) -> None:
        if isinstance(event, WorkerHeartbeat):
            record = self.workers.get(event.worker_id)
            if record is not None and record.incarnation != event.incarnation:
                self._forget_worker(event.worker_id)  # it restarted: what its previous life held is lost
                record = None
            if record is None:
                self.workers[event.worker_id] = WorkerRecord(
                    event.worker_id, event.device, event.emulated, tuple(event.variants), event.max_batch,
                    last_seen_s=now_s, available_at_s=now_s, incarnation=event.incarnation)
            else:
                record.variants, record.max_batch, record.last_seen_s = tuple(event.variants), event.max_batch, now_s
        elif isinstance(event, BatchFinished):
            record = self.workers.get(event.worker_id)
            if record is not None and record.inflight.pop(event.batch_id, None) is not None:
                record.last_seen_s = record.available_at_s = now_s
                self.policy.observe(event.device, event.variant, event.rows, event.compute_ms)
        elif isinstance(event, (VariantLoaded, VariantUnloaded)):
            record = self.workers.get(event.worker_id)
            if record is not None:
                loaded = set(record.variants)
                loaded.add(event.variant) if isinstance(event, VariantLoaded) else loaded.discard(event.variant)
                record.variants = tuple(sorted(loaded))
        elif isinstance(event, WorkerStopped):
            self._forget_worker(event.worker_id)

    # -- decisions ------------------------------------------------------------------------------
    def step(self, now_s: float) -> Step:
        """Expire silent workers, drop hopeless queries, then dispatch what the policy says."""
        out = Step()
        for worker_id in [w.worker_id for w in self.workers.values() if now_s - w.last_seen_s > self._worker_timeout_s]:
            self._forget_worker(worker_id)
        self._drop_stale(now_s, out)
        if not self.queue or not self.workers:
            return out
        views = [w.view(now_s) for w in self.workers.values()]
        if not any(v.idle for v in views):
            return out
        decision = self.policy.decide(now_s, [q.pending for q in self.queue.values()], views)
        out.loads.extend(LoadVariant(worker_id=w, variant=v) for w, v in decision.loads if w in self.workers)
        for query_id, reason in decision.dropped:
            item = self.queue.pop(query_id)
            out.finals.append((dropped(item, reason, now_s), item.ack_token))
        for assignment in decision.assignments:
            worker = self.workers[assignment.worker_id]
            items = [self.queue.pop(qid) for qid in assignment.query_ids]
            batch_id = f"b{self._instance}-{next(self._batch_ids)}"
            predicted = self._predicted_finish_s(worker, assignment.variant, items, now_s)
            worker.inflight[batch_id] = (items, predicted)
            out.dispatches.append((
                DispatchBatch(batch_id=batch_id, worker_id=worker.worker_id, incarnation=worker.incarnation,
                              variant=assignment.variant,
                              queries=[i.work.model_copy(update={"timestamps": i.work.timestamps.model_copy(
                                  update={"dispatched": now_s})}) for i in items]),
                [i.ack_token for i in items]))
        return out

    def depth_by_application(self) -> dict[str, int]:
        depth: dict[str, int] = {app: 0 for app in self.catalogue.applications}
        for item in self.queue.values():
            depth[item.pending.application] = depth.get(item.pending.application, 0) + 1
        return depth

    # -- internals ------------------------------------------------------------------------------
    def _emulated_only(self, variants: tuple[str, ...]) -> bool:
        live = [w for w in self.workers.values() if set(w.variants) & set(variants)]
        return bool(live) and all(w.emulated for w in live)

    def _predicted_finish_s(self, worker: WorkerRecord, variant: str, items: list[Queued], now_s: float) -> float:
        profile = self.catalogue.profile(variant, worker.device)
        rows = sum(i.pending.batch_size for i in items)
        if profile is None or rows > max(profile.batch_latency_ms):
            return now_s
        return now_s + profile.latency_ms(rows) / 1000.0

    def _fastest_s(self, variants: tuple[str, ...], rows: int) -> float:
        latencies = [p.latency_ms(rows) for v in variants for p in self.catalogue.profiles_of(v)
                     if rows <= max(p.batch_latency_ms)]
        return min(latencies, default=0.0) / 1000.0

    def _drop_stale(self, now_s: float, out: Step) -> None:
        stale = [q for q in self.queue.values()
                 if now_s + q.fastest_s - q.pending.arrival_s > self._drop_after * q.pending.slo_ms / 1000.0]
        for item in stale:
            del self.queue[item.pending.query_id]
            reason = (f"could no longer finish within {self._drop_after:g}x its SLO: still queued, and its fastest "
                      f"variant takes {item.fastest_s * 1000:.3g} ms")
            out.finals.append((dropped(item, reason, now_s), item.ack_token))

    def _forget_worker(self, worker_id: str) -> None:
        """Put a lost worker's unfinished work back at the head of the queue (results dedup by query id)."""
        record = self.workers.pop(worker_id, None)
        if record is None:
            return
        # their messages were acknowledged at dispatch; only this memory holds them now
        requeued = {i.pending.query_id: Queued(i.pending, i.work, ack_token=None, fastest_s=i.fastest_s)
                    for items, _ in record.inflight.values() for i in items}
        self.queue = {**requeued, **self.queue}


def rejected(query_id: str, reason: str, *, application: str | None = None,
             timestamps: HopTimestamps | None = None) -> Result:
    return Result(query_id=query_id, application=application, status=ResultStatus.REJECTED, reason=reason,
                  timestamps=timestamps or HopTimestamps())


def dropped(item: Queued, reason: str, now_s: float) -> Result:
    return Result(query_id=item.pending.query_id, application=item.pending.application,
                  status=ResultStatus.DROPPED, reason=reason,
                  timestamps=item.work.timestamps.model_copy(update={"result_sent": now_s}))
