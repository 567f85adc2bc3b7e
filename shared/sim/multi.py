"""Discrete-event simulation of several applications on a fleet whose variants follow plans.

`simulate` (``engine.py``) runs one application on a fixed fleet. Accuracy-scaling systems need more:
several applications, each with its own SLO and candidate variants, sharing one queue; a controller
that re-plans while queries flow; devices that switch variants when a plan says so; and wake-ups for
batching policies that choose to wait. `simulate_serving` adds exactly that and drives the same
`DispatchPolicy` objects the live scheduler runs:

- every ``control_interval_s`` the controller is told how many queries of each application arrived
  since its last call, and may return a `FleetPlan`. The plan's placements are applied to the devices
  of each type (a device keeps its variants if the plan still wants them, otherwise it takes a wanted
  one; devices no placement wants host nothing), then the policy hears ``on_plan(plan)``. A device
  that changes variants finishes the batch it runs and is unavailable for ``load_delay_s``;
- after every event, while queries wait and a worker is idle, the policy decides; a policy with a
  ``next_wakeup_s()`` method (e.g. `ProteusDispatch`) is asked again at the time it names.

Events are ordered by ``(time, type, sequence)``: completions, then control, then arrivals, then
wake-ups at the same instant. Queries still queued when nothing more can happen are recorded as dropped.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

import numpy as np

from shared.policy.base import (
    DispatchDecision,
    DispatchPolicy,
    FleetPlan,
    PendingQuery,
    WorkerView,
)
from shared.sim.arrivals import Workload
from shared.sim.engine import SimStatus
from shared.sim.workers import ServiceModel, SimWorker


class ServingEvent(IntEnum):
    COMPLETION = 0
    CONTROL = 1
    ARRIVAL = 2
    WAKEUP = 3


class Controller(Protocol):
    """Plans while the simulation runs (Proteus's resource manager, a static plan, an autoscaler)."""

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        """``arrivals``: queries per application since the previous call. Return a plan to apply, or None."""


@dataclass(frozen=True, slots=True)
class ServingResult:
    """Per-query outcomes of one run, in global arrival order; unserved queries have NaN times, worker -1."""

    status: SimStatus
    message: str
    application: np.ndarray
    slo_ms: np.ndarray
    arrival_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    worker: np.ndarray
    variant: np.ndarray
    #: query index -> reason, for queries dropped by the policy or never dispatched
    dropped: dict[int, str]
    #: (time, plan) of every plan applied
    plans: tuple[tuple[float, FleetPlan], ...]

    @property
    def latency_ms(self) -> np.ndarray:
        return (self.finish_s - self.arrival_s) * 1000.0

    @property
    def served(self) -> np.ndarray:
        return self.worker >= 0

    @property
    def late(self) -> np.ndarray:
        """Served, but after the SLO."""
        with np.errstate(invalid="ignore"):
            return self.served & (self.latency_ms > self.slo_ms)

    @property
    def violated(self) -> np.ndarray:
        """Dropped, never served, or late: the paper's SLO violations."""
        return ~self.served | self.late


class _QueueView(Sequence[PendingQuery]):
    """The waiting queries in arrival order, without copying (cheap ``len`` and reverse iteration)."""

    def __init__(self, pending: dict[str, PendingQuery]) -> None:
        self._pending = pending

    def __len__(self) -> int:
        return len(self._pending)

    def __iter__(self) -> Iterator[PendingQuery]:
        return iter(self._pending.values())

    def __reversed__(self) -> Iterator[PendingQuery]:
        return reversed(self._pending.values())

    def __getitem__(self, index):  # type: ignore[override]
        return list(self._pending.values())[index]


def simulate_serving(
    workloads: Sequence[Workload],
    workers: Sequence[SimWorker],
    policy: DispatchPolicy,
    service: ServiceModel,
    *,
    controller: Controller | None = None,
    control_interval_s: float = 1.0,
    load_delay_s: float = 0.0,
    seed: int | None = None,
) -> ServingResult:
    """Run the merged ``workloads`` through ``policy`` on ``workers``, re-planned by ``controller``.

    ``workers`` give the fleet (ids, device types, batch limits) and the variants each hosts at the
    start (empty: none until a plan places one). ``seed`` drives sampled service times.
    """
    if not workloads:
        raise ValueError("`workloads` must not be empty")
    if not workers or len({w.worker_id for w in workers}) != len(workers):
        raise ValueError("`workers` must be non-empty with unique ids")
    if not control_interval_s > 0 or load_delay_s < 0:
        raise ValueError(f"need `control_interval_s` > 0 and `load_delay_s` >= 0, got {control_interval_s}, {load_delay_s}")
    return _Run(workloads, workers, policy, service, controller, control_interval_s, load_delay_s,
                np.random.default_rng(seed)).run()


class _Run:
    def __init__(self, workloads, workers, policy, service, controller, interval, load_delay, rng) -> None:
        arrival = np.concatenate([w.arrival_s for w in workloads])
        source = np.concatenate([np.full(len(w), k) for k, w in enumerate(workloads)])
        order = np.argsort(arrival, kind="stable")
        self.workloads = workloads
        self.arrival = arrival[order]
        self.source = source[order]
        self.rows = np.concatenate([w.batch_size for w in workloads])[order]
        self.application = np.array([workloads[k].application for k in self.source], dtype=object)
        self.slo_ms = np.array([workloads[k].slo_ms for k in self.source], dtype=float)
        self.workers = list(workers)
        self.policy = policy
        self.service = service
        self.controller = controller
        self.interval = interval
        self.load_delay = load_delay
        self.rng = rng
        n, m = len(workers), len(self.arrival)
        self.variants: list[tuple[str, ...]] = [w.variants for w in workers]
        self.batch_of: list[tuple[int, ...] | None] = [None] * n
        self.variant_of = [""] * n
        self.started_s = [0.0] * n
        self.expected_ms = [0.0] * n
        self.free_at = [0.0] * n
        self.reload = [False] * n
        self.index_of = {w.worker_id: j for j, w in enumerate(workers)}
        self.pending: dict[str, PendingQuery] = {}
        self.queue_view = _QueueView(self.pending)
        self.start_s = np.full(m, np.nan)
        self.finish_s = np.full(m, np.nan)
        self.served_by = np.full(m, -1, dtype=np.int64)
        self.variant_served = np.full(m, "", dtype=object)
        self.dropped: dict[int, str] = {}
        self.plans: list[tuple[float, FleetPlan]] = []
        self.counts: dict[str, int] = {}
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.next_wakeup = -np.inf
        self.wakeup = getattr(policy, "next_wakeup_s", None)

    def run(self) -> ServingResult:
        if len(self.arrival):
            self._push(float(self.arrival[0]), ServingEvent.ARRIVAL, 0)
        end_control = float(self.arrival[-1]) + self.interval if len(self.arrival) else 0.0
        if self.controller is not None:
            self._push(min(0.0, float(self.arrival[0])) if len(self.arrival) else 0.0, ServingEvent.CONTROL, 0)
        handlers = {ServingEvent.COMPLETION: self._complete, ServingEvent.CONTROL: self._control,
                    ServingEvent.ARRIVAL: self._arrive, ServingEvent.WAKEUP: lambda now, _: None}
        while self.heap:
            now, kind, _, payload = heapq.heappop(self.heap)
            if kind == ServingEvent.WAKEUP:
                self.next_wakeup = -np.inf
            handlers[ServingEvent(kind)](now, payload)
            if kind == ServingEvent.CONTROL and now + self.interval <= end_control:
                self._push(now + self.interval, ServingEvent.CONTROL, 0)
            self._dispatch(now)
        for query_id in self.pending:
            self.dropped[int(query_id)] = "never dispatched: the run ended with it queued"
        message = f"{len(self.arrival)} queries, {len(self.dropped)} dropped, {len(self.plans)} plans applied"
        return ServingResult(SimStatus.COMPLETED, message, self.application, self.slo_ms, self.arrival,
                             self.start_s, self.finish_s, self.served_by, self.variant_served, self.dropped,
                             tuple(self.plans))

    def _push(self, time_s: float, kind: ServingEvent, payload: int) -> None:
        heapq.heappush(self.heap, (time_s, int(kind), self.seq, payload))
        self.seq += 1

    # -- handlers ---------------------------------------------------------------------------------
    def _arrive(self, now: float, i: int) -> None:
        w = self.workloads[self.source[i]]
        self.pending[str(i)] = PendingQuery(str(i), w.application, int(self.rows[i]), float(self.arrival[i]),
                                            w.slo_ms, w.candidate_variants)
        self.counts[w.application] = self.counts.get(w.application, 0) + 1
        if i + 1 < len(self.arrival):
            self._push(float(self.arrival[i + 1]), ServingEvent.ARRIVAL, i + 1)

    def _complete(self, now: float, j: int) -> None:
        batch = self.batch_of[j]
        assert batch is not None
        if batch:
            rows = int(sum(self.rows[i] for i in batch))
            self.policy.observe(self.workers[j].device, self.variant_of[j], rows, (now - self.started_s[j]) * 1000.0)
            self.finish_s[list(batch)] = now
        self.batch_of[j] = None
        self.free_at[j] = now
        if self.reload[j]:
            self._start_load(now, j)

    def _control(self, now: float, _: int) -> None:
        counts, self.counts = self.counts, {}
        plan = self.controller.control(now, counts)
        if plan is None or not plan.success:
            return
        self._apply_plan(now, plan)
        self.plans.append((now, plan))
        self.policy.on_plan(plan)

    # -- plans ------------------------------------------------------------------------------------
    def _apply_plan(self, now: float, plan: FleetPlan) -> None:
        wanted: dict[str, list[tuple[str, ...]]] = {}
        for placement in plan.placements:
            wanted.setdefault(placement.device, []).append(tuple(placement.variants))
        for device in {w.device for w in self.workers}:
            members = [j for j, w in enumerate(self.workers) if w.device == device]
            desired = wanted.get(device, [])
            unmatched = []
            for j in members:
                if self.variants[j] and self.variants[j] in desired:
                    desired.remove(self.variants[j])
                else:
                    unmatched.append(j)
            for j in unmatched:
                self._switch(now, j, desired.pop(0) if desired else ())

    def _switch(self, now: float, j: int, variants: tuple[str, ...]) -> None:
        if variants == self.variants[j]:
            return
        self.variants[j] = variants
        if not variants or self.load_delay <= 0:
            return
        if self.batch_of[j] is None:
            self._start_load(now, j)
        else:
            self.reload[j] = True

    def _start_load(self, now: float, j: int) -> None:
        """The worker loads its new variants: busy, with no queries, for the load delay."""
        self.reload[j] = False
        self.batch_of[j] = ()
        self.started_s[j] = now
        self.expected_ms[j] = self.load_delay * 1000.0
        self._push(now + self.load_delay, ServingEvent.COMPLETION, j)

    # -- decisions --------------------------------------------------------------------------------
    def _views(self, now: float) -> tuple[list[WorkerView], bool]:
        views, any_idle = [], False
        for j, w in enumerate(self.workers):
            if not self.variants[j]:
                continue
            if self.batch_of[j] is None:
                views.append(WorkerView(w.worker_id, w.device, self.variants[j], 0, 0.0, self.free_at[j], w.max_batch))
                any_idle = True
            else:
                end = self.started_s[j] + self.expected_ms[j] / 1000.0
                views.append(WorkerView(w.worker_id, w.device, self.variants[j], 1, max(0.0, (end - now) * 1000.0),
                                        end, w.max_batch))
        return views, any_idle

    def _dispatch(self, now: float) -> None:
        while self.pending:
            views, any_idle = self._views(now)
            if not any_idle:
                break
            decision = self.policy.decide(now, self.queue_view, views)
            if not decision:
                break
            self._apply(now, decision)
        if self.wakeup is not None:
            at = self.wakeup()
            if at is not None and at > now and (at < self.next_wakeup or self.next_wakeup <= now):
                self.next_wakeup = at
                self._push(at, ServingEvent.WAKEUP, 0)

    def _apply(self, now: float, decision: DispatchDecision) -> None:
        for query_id, reason in decision.dropped:
            if self.pending.pop(query_id, None) is None:
                raise ValueError(f"dropped query {query_id!r} is not queued")
            self.dropped[int(query_id)] = reason
        for assignment in decision.assignments:
            j = self.index_of.get(assignment.worker_id)
            if j is None or self.batch_of[j] is not None:
                raise ValueError(f"assignment to unknown or busy worker {assignment.worker_id!r}")
            if assignment.variant not in self.variants[j] or not assignment.query_ids:
                raise ValueError(f"bad assignment {assignment!r}: worker hosts {self.variants[j]}")
            batch = []
            for query_id in assignment.query_ids:
                query = self.pending.pop(query_id, None)
                if query is None or assignment.variant not in query.candidate_variants:
                    raise ValueError(f"query {query_id!r} is not queued or may not run on {assignment.variant!r}")
                batch.append(int(query_id))
            worker = self.workers[j]
            rows = int(sum(self.rows[i] for i in batch))
            if rows > worker.max_batch:
                raise ValueError(f"{rows} rows exceed max_batch {worker.max_batch} of {worker.worker_id!r}")
            service_ms = self.service.sample_ms(worker.device, assignment.variant, rows, self.rng)
            self.expected_ms[j] = self.service.expected_ms(worker.device, assignment.variant, rows)
            self.batch_of[j] = tuple(batch)
            self.variant_of[j] = assignment.variant
            self.started_s[j] = now
            self.start_s[batch] = now
            self.served_by[batch] = j
            self.variant_served[batch] = assignment.variant
            self._push(now + service_ms / 1000.0, ServingEvent.COMPLETION, j)
