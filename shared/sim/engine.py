"""Discrete-event simulation of one scheduler queue in front of a fleet, driven by a `DispatchPolicy`.

The engine owns time and state; the policy only decides. On every arrival and every completion, while
the queue is non-empty and some worker is idle, it calls ``policy.decide(now_s, queue, workers)`` and
applies the assignments (each worker runs one batch at a time). On completion it calls
``policy.observe(...)`` with the measured service time. A query's latency is its wait plus its batch's
service time.

Events are ordered by ``(time, event type, sequence)``; completions sort before arrivals at the same
instant so a worker freed at ``t`` is visible to a query arriving at ``t``.

What policies see of busy workers is a *prediction*: ``busy_remaining_ms`` is the service model's
expected time minus the time elapsed, floored at 0 (the Kairos artifact tracks it the same way), so
sampled service times surprise the policy just as real ones would.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np

from shared.policy.base import DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.sim.arrivals import Workload
from shared.sim.workers import ServiceModel, SimWorker


class EventType(IntEnum):
    COMPLETION = 0
    ARRIVAL = 1


#: (time in s, type, payload: query index for arrivals, worker index for completions)
Event = tuple[float, EventType, int]


class SimStatus(str, Enum):
    COMPLETED = "completed"
    #: the queue outgrew `StopRule.max_queue`: offered load above capacity
    DIVERGED = "diverged"
    #: more SLO misses than `StopRule.max_misses`: the run can no longer pass
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class StopRule:
    """When to end a run early because its verdict is already known."""

    max_queue: int | None = None
    max_misses: int | None = None


@dataclass(frozen=True, slots=True)
class SimResult:
    """Per-query outcomes of one run; unserved queries have NaN times and worker -1."""

    status: SimStatus
    message: str
    slo_ms: float
    arrival_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    #: index into the fleet of the worker that served each query
    worker: np.ndarray
    #: the variant that served each query ("" when unserved), for accuracy-aware policies
    variant: np.ndarray
    #: query index -> reason, for queries the policy dropped
    dropped: dict[int, str]

    @property
    def success(self) -> bool:
        return self.status is SimStatus.COMPLETED

    @property
    def latency_ms(self) -> np.ndarray:
        return (self.finish_s - self.arrival_s) * 1000.0

    @property
    def num_served(self) -> int:
        return int(np.count_nonzero(self.worker >= 0))

    @property
    def num_within_slo(self) -> int:
        """Queries finished within the SLO; dropped or unfinished ones are misses."""
        with np.errstate(invalid="ignore"):
            return int(np.count_nonzero(self.latency_ms <= self.slo_ms))

    def fraction_within_slo(self) -> float:
        return self.num_within_slo / len(self.arrival_s)

    def latency_quantile_ms(self, q: float = 0.99) -> float:
        """Latency quantile over all queries, unserved ones counting as infinitely late."""
        lat = np.where(np.isnan(self.latency_ms), np.inf, self.latency_ms)
        return float(np.quantile(lat, q, method="higher"))

def simulate(
    workload: Workload,
    workers: Sequence[SimWorker],
    policy: DispatchPolicy,
    service: ServiceModel,
    *,
    seed: int | None = None,
    stop: StopRule | None = None,
) -> SimResult:
    """Run ``workload`` through ``policy`` on ``workers``; ``seed`` drives sampled service times."""
    return _Run(workload, workers, policy, service, np.random.default_rng(seed), stop or StopRule()).run()


class _Run:
    def __init__(
        self,
        workload: Workload,
        workers: Sequence[SimWorker],
        policy: DispatchPolicy,
        service: ServiceModel,
        rng: np.random.Generator,
        stop: StopRule,
    ) -> None:
        if not workers:
            raise ValueError("`workers` must not be empty")
        if len({w.worker_id for w in workers}) != len(workers):
            raise ValueError("`workers` must have unique ids")
        self.workload = workload
        self.workers = list(workers)
        self.policy = policy
        self.service = service
        self.rng = rng
        self.stop = stop
        n, m = len(workers), len(workload)
        self.index_of = {w.worker_id: j for j, w in enumerate(workers)}
        self.batch_of: list[tuple[int, ...] | None] = [None] * n
        self.variant_of: list[str] = [""] * n
        self.started_s = [0.0] * n
        self.expected_ms = [0.0] * n
        self.idle_views: list[WorkerView | None] = [
            WorkerView(w.worker_id, w.device, w.variants, 0, 0.0, 0.0, w.max_batch) for w in workers
        ]
        self.num_idle = n
        self.queue: list[PendingQuery] = []
        self.start_s = np.full(m, np.nan)
        self.finish_s = np.full(m, np.nan)
        self.served_by = np.full(m, -1, dtype=np.int64)
        self.variant_served = np.full(m, "", dtype=object)
        self.dropped: dict[int, str] = {}
        self.misses = 0
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0

    def run(self) -> SimResult:
        arrivals = self.workload.arrival_s
        if len(arrivals):
            self._push(float(arrivals[0]), EventType.ARRIVAL, 0)
        status, message = SimStatus.COMPLETED, "all queries processed"
        while self.heap:
            now, kind, _, payload = heapq.heappop(self.heap)
            handler = self._arrive if kind == EventType.ARRIVAL else self._complete
            events = handler(now, payload)
            events += self._dispatch(now)  # after the handler: it sees the freed worker or new query
            for event in events:
                self._push(*event)
            verdict = self._verdict()
            if verdict is not None:
                status, message = verdict
                break
        if status is SimStatus.COMPLETED and self.queue:
            status, message = SimStatus.DIVERGED, f"{len(self.queue)} queries never dispatched"
        return SimResult(
            status=status,
            message=message,
            slo_ms=self.workload.slo_ms,
            arrival_s=self.workload.arrival_s,
            start_s=self.start_s,
            finish_s=self.finish_s,
            worker=self.served_by,
            variant=self.variant_served,
            dropped=self.dropped,
        )

    def _push(self, time_s: float, kind: EventType, payload: int) -> None:
        heapq.heappush(self.heap, (time_s, int(kind), self.seq, payload))
        self.seq += 1

    def _arrive(self, now: float, i: int) -> list[Event]:
        """Queue query ``i``; the next arrival is the only new event."""
        w = self.workload
        self.queue.append(
            PendingQuery(
                query_id=str(i),
                application=w.application,
                batch_size=int(w.batch_size[i]),
                arrival_s=float(w.arrival_s[i]),
                slo_ms=w.slo_ms,
                candidate_variants=w.candidate_variants,
            )
        )
        return [(float(w.arrival_s[i + 1]), EventType.ARRIVAL, i + 1)] if i + 1 < len(w) else []

    def _complete(self, now: float, j: int) -> list[Event]:
        """Worker ``j`` finished its batch: record it, tell the policy, free the worker."""
        batch = self.batch_of[j]
        assert batch is not None
        worker = self.workers[j]
        rows = sum(int(self.workload.batch_size[i]) for i in batch)
        self.policy.observe(worker.device, self.variant_of[j], rows, (now - self.started_s[j]) * 1000.0)
        slo_s = self.workload.slo_ms / 1000.0
        for i in batch:
            self.finish_s[i] = now
            if now - self.workload.arrival_s[i] > slo_s:
                self.misses += 1
        self.batch_of[j] = None
        self.idle_views[j] = WorkerView(
            worker.worker_id, worker.device, worker.variants, 0, 0.0, now, worker.max_batch
        )
        self.num_idle += 1
        return []

    def _dispatch(self, now: float) -> list[Event]:
        """Ask the policy while it can act; the started batches' completions are the new events."""
        events: list[Event] = []
        while self.queue and self.num_idle:
            decision = self.policy.decide(now, self.queue, self._views(now))
            if not decision:
                break
            events.extend(self._apply(now, decision))
        return events

    def _views(self, now: float) -> list[WorkerView]:
        views = []
        for j, view in enumerate(self.idle_views):
            if view is None:
                w = self.workers[j]
                end_s = self.started_s[j] + self.expected_ms[j] / 1000.0
                views.append(
                    WorkerView(
                        w.worker_id, w.device, w.variants, 1, max(0.0, (end_s - now) * 1000.0), end_s,
                        w.max_batch,
                    )
                )
            else:
                views.append(view)
        return views

    def _apply(self, now: float, decision: DispatchDecision) -> list[Event]:
        events: list[Event] = []
        position = {q.query_id: k for k, q in enumerate(self.queue)}
        removed: set[int] = set()
        for query_id, reason in decision.dropped:
            self._take(position, removed, query_id)
            self.dropped[int(query_id)] = reason
            self.misses += 1
        for assignment in decision.assignments:
            j = self.index_of.get(assignment.worker_id)
            if j is None or self.idle_views[j] is None:
                raise ValueError(f"assignment to unknown or busy worker {assignment.worker_id!r}")
            worker = self.workers[j]
            if assignment.variant not in worker.variants or not assignment.query_ids:
                raise ValueError(f"bad assignment {assignment!r} for worker {worker.worker_id!r}")
            batch = []
            for query_id in assignment.query_ids:
                k = self._take(position, removed, query_id)
                if assignment.variant not in self.queue[k].candidate_variants:
                    raise ValueError(f"query {query_id!r} may not run on {assignment.variant!r}")
                batch.append(int(query_id))
            rows = sum(int(self.workload.batch_size[i]) for i in batch)
            if rows > worker.max_batch:
                raise ValueError(f"{rows} rows exceed max_batch {worker.max_batch} of {worker.worker_id!r}")
            service_ms = self.service.sample_ms(worker.device, assignment.variant, rows, self.rng)
            self.expected_ms[j] = self.service.expected_ms(worker.device, assignment.variant, rows)
            self.batch_of[j] = tuple(batch)
            self.variant_of[j] = assignment.variant
            self.started_s[j] = now
            self.idle_views[j] = None
            self.num_idle -= 1
            self.start_s[batch] = now
            self.served_by[batch] = j
            self.variant_served[batch] = assignment.variant
            events.append((now + service_ms / 1000.0, EventType.COMPLETION, j))
        self.queue = [q for k, q in enumerate(self.queue) if k not in removed]
        return events

    @staticmethod
    def _take(position: dict[str, int], removed: set[int], query_id: str) -> int:
        k = position.get(query_id)
        if k is None or k in removed:
            raise ValueError(f"query {query_id!r} is not queued (or named twice)")
        removed.add(k)
        return k

    def _verdict(self) -> tuple[SimStatus, str] | None:
        stop = self.stop
        if stop.max_queue is not None and len(self.queue) > stop.max_queue:
            return SimStatus.DIVERGED, f"queue reached {len(self.queue)} > {stop.max_queue}"
        if stop.max_misses is not None and self.misses > stop.max_misses:
            return SimStatus.ABORTED, f"{self.misses} SLO misses > {stop.max_misses}"
        return None
