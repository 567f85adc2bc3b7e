"""Discrete-event simulation of a fleet that changes over time, driven by an autoscaler (`shared.autoscale`).

The engine owns time, machines and queues; the autoscaler only decides. Every ``autoscaler.poll_interval_s``
the engine builds an `AutoscaleState` from its own monitoring (2 s windows, as INFaaS's monitoring
daemon), calls ``autoscaler.step(state, now_s)`` (the object the live service polls) and applies the
`ScaleActions`:

* a started worker is billed at once and usable after its type's ``startup_s``; the instances it was
  started with, and any loaded later, serve ``load_latency_ms`` after that (profiled);
* an unloaded instance (one still loading first, then an Interfered one, then the least queued) takes
  no new queries and finishes its queue (its resources are free at once, make-before-break being the
  autoscaler's business); a stopped worker stops billing.

Queries (one row each) are routed on arrival the way INFaaS's dispatcher picks among matching instances
(Algorithm 1, Active step): the least-loaded Active instance (shortest expected wait: remaining batch +
queued rows / ``Q``) while that wait is within ``latency_budget x SLO`` (an Active instance whose queue
already breaks the SLO does not match the query), else the least-loaded instance of any state. A query
that arrives while its application has no instance waits for one. Each instance runs one batch at
a time and batches dynamically: as many queued queries as the largest profiled batch size they fill,
up to the largest one whose latency fits ``latency_budget x SLO`` (never a size between profiled ones,
which would pay the next size's latency). A query still queued ``timeout_factor x SLO`` after it arrived is dropped.
Batch time is the profiled latency of its rows times any `Slowdown` (a noisy neighbour) in force.

Events are ordered by (time, `AutoscaleEvent`, sequence): completions, then instances becoming ready,
then arrivals, then autoscaler polls.
"""
from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from shared.autoscale.autoscaler import BaseAutoscaler
from shared.autoscale.catalogue import Catalogue, VariantOption, WorkerType
from shared.autoscale.cost import CostReport, WorkerInterval, period_cost
from shared.autoscale.greedy import GreedyConfig, GreedyModelAutoscaler
from shared.autoscale.interference import observe
from shared.autoscale.ledger import pack_instances
from shared.autoscale.state import (
    AutoscaleState,
    InstanceStatus,
    LoadInstance,
    ScaleActions,
    StartWorker,
    UnloadInstance,
    WorkerStatus,
)
from shared.infaas.state import InstanceState, StateThresholds

__all__ = ["AutoscaleEvent", "AutoscaleSimResult", "Slowdown", "settle", "simulate_autoscaling"]


class AutoscaleEvent(IntEnum):
    COMPLETION = 0
    READY = 1
    ARRIVAL = 2
    POLL = 3


@dataclass(frozen=True, slots=True)
class Slowdown:
    """A noisy neighbour: from `start_s` to `end_s`, batches on the oldest running worker of type
    `device` take `factor` times their profiled latency (an assumed contention model, spec §12.21)."""

    device: str
    start_s: float
    end_s: float
    factor: float

    def __post_init__(self) -> None:
        if not (self.end_s >= self.start_s and self.factor >= 1.0):
            raise ValueError(f"need `start_s` <= `end_s` and `factor` >= 1, got {self}")


@dataclass(frozen=True)
class AutoscaleSimResult:
    """Per-query outcomes, billed machine lifetimes and a per-poll timeline of one run."""

    applications: tuple[str, ...]
    #: index into `applications` per query
    application: np.ndarray
    arrival_s: np.ndarray
    #: NaN when never served (dropped, or still queued at the end)
    finish_s: np.ndarray
    slo_ms: np.ndarray
    dropped: np.ndarray
    duration_s: float
    workers: tuple[tuple[str, str, WorkerInterval], ...]
    #: per poll: time, fleet $/h, workers per device type, demand rows/s
    timeline: dict[str, list]
    #: wall-clock ms of each ``autoscaler.step``
    decision_ms: np.ndarray
    #: action kind -> count (``load``, ``unload``, ``start``, ``stop`` and reasons' first word)
    actions: Counter = field(default_factory=Counter)

    @property
    def num_queries(self) -> int:
        return len(self.arrival_s)

    @property
    def num_completed(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.finish_s)))

    @property
    def within_slo(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return (self.finish_s - self.arrival_s) * 1000.0 <= self.slo_ms

    @property
    def throughput_qps(self) -> float:
        """Queries served per second (late ones included)."""
        return self.num_completed / self.duration_s

    @property
    def goodput_qps(self) -> float:
        return int(np.count_nonzero(self.within_slo)) / self.duration_s

    @property
    def slo_violation_ratio(self) -> float:
        """Share of queries not served within their SLO (late, dropped or never served)."""
        return 1.0 - int(np.count_nonzero(self.within_slo)) / max(1, self.num_queries)

    def cost(self) -> CostReport:
        return period_cost((w for _, _, w in self.workers), start_s=0.0, end_s=self.duration_s,
                           num_queries=self.num_completed)

    def latency_quantile_ms(self, q: float) -> float:
        latency = np.where(np.isnan(self.finish_s), np.inf, (self.finish_s - self.arrival_s) * 1000.0)
        return float(np.quantile(latency, q, method="higher")) if len(latency) else 0.0


def simulate_autoscaling(
    catalogue: Catalogue,
    workloads: Mapping[str, np.ndarray],
    autoscaler: BaseAutoscaler,
    *,
    initial_fleet: Sequence[StartWorker],
    duration_s: float | None = None,
    latency_budget: float = 0.5,
    monitor_window_s: float = 2.0,
    timeout_factor: float = 4.0,
    slowdowns: Sequence[Slowdown] = (),
    thresholds: StateThresholds | None = None,
) -> AutoscaleSimResult:
    """Replay `workloads` (application -> sorted arrival times, s) on a fleet `autoscaler` manages.

    Parameters
    ----------
    catalogue : Catalogue
        Worker types, variant profiles and the applications (SLOs) of the workloads.
    workloads : application -> arrival times (s), one row per query.
    autoscaler : BaseAutoscaler
        Polled every ``autoscaler.poll_interval_s`` from t = 0.
    initial_fleet : workers up and loaded at t = 0 (billed from t = 0).
    duration_s : float, optional
        End of the billed period; default the last arrival. Queries unserved by then count as violations.
    latency_budget : share of the SLO a batch may take (as the autoscaler's config).
    monitor_window_s : window of the monitoring statistics (INFaaS: 2 s); a multiple of the poll period.
    timeout_factor : queued queries older than this many SLOs are dropped.
    slowdowns : noisy-neighbour episodes.
    thresholds : Interfered / Overloaded thresholds of the monitor (default `StateThresholds()`).
    """
    return _Run(catalogue, workloads, autoscaler, initial_fleet, duration_s, latency_budget, monitor_window_s,
                timeout_factor, slowdowns, thresholds).run()


class _Instance:
    __slots__ = (
        "app",
        "batch",
        "buckets",
        "busy_until",
        "draining",
        "option",
        "q",
        "queue",
        "ready",
        "sizes",
        "state",
        "worker",
    )

    def __init__(self, worker: _Worker, option: VariantOption, app: int, q: float, max_rows: int, window: int):
        self.worker, self.option, self.app, self.q = worker, option, app, q
        #: batch size to run for 1..max_rows queued rows: the largest profiled size that many fill
        #: (a 3-row batch would be billed the 4-row latency), or all of them below the smallest one
        profiled = [b for b, _ in option.record.batch_latency_ms if b <= max_rows]
        self.sizes = [0] + [max((b for b in profiled if b <= n), default=n) for n in range(1, max_rows + 1)]
        self.ready = False
        self.queue: deque[int] = deque()
        self.busy_until: float | None = None
        self.batch: list[int] = []
        self.draining = False
        self.state = InstanceState.ACTIVE
        #: per poll: [rows routed, rows served, busy s, observed ms, profiled ms]
        self.buckets: deque[list[float]] = deque([[0.0] * 5 for _ in range(window)], maxlen=window)


class _Worker:
    __slots__ = ("instances", "ready_s", "start_s", "stop_s", "worker_id", "wtype")

    def __init__(self, worker_id: str, wtype: WorkerType, start_s: float, ready_s: float):
        self.worker_id, self.wtype, self.start_s, self.ready_s = worker_id, wtype, start_s, ready_s
        self.stop_s: float | None = None
        self.instances: list[_Instance] = []


class _Run:
    def __init__(self, catalogue, workloads, autoscaler, initial_fleet, duration_s, latency_budget,
                 monitor_window_s, timeout_factor, slowdowns, thresholds):
        self.catalogue, self.autoscaler = catalogue, autoscaler
        self.apps = tuple(sorted(workloads))
        unknown = [a for a in self.apps if a not in catalogue.application]
        if unknown:
            raise ValueError(f"`workloads` names applications missing from the catalogue: {unknown}")
        arrivals = [np.asarray(workloads[a], dtype=float) for a in self.apps]
        if any(np.any(np.diff(a) < 0) or np.any(a < 0) for a in arrivals):
            raise ValueError("`workloads` arrival times must be sorted and >= 0")
        app_of = np.concatenate([np.full(len(a), k, dtype=np.int64) for k, a in enumerate(arrivals)])
        times = np.concatenate(arrivals) if arrivals else np.zeros(0)
        order = np.argsort(times, kind="stable")
        self.arrival, self.app_of = times[order], app_of[order]
        self.slo_s = np.array([catalogue.application[a].slo_ms / 1000.0 for a in self.apps])
        self.duration = float(duration_s if duration_s is not None else (self.arrival[-1] if len(times) else 0.0))
        if not self.duration > 0:
            raise ValueError("`duration_s` must be > 0 (or the workloads non-empty)")
        self.poll = autoscaler.poll_interval_s
        self.window = max(1, round(monitor_window_s / self.poll))
        if not math.isclose(self.window * self.poll, monitor_window_s, rel_tol=1e-6):
            raise ValueError(f"`monitor_window_s` must be a multiple of the poll period {self.poll}")
        self.latency_budget, self.timeout_factor, self.thresholds = latency_budget, timeout_factor, thresholds
        self.slowdowns = list(slowdowns)
        self.victims: dict[int, _Worker | None] = {}
        n = len(self.arrival)
        self.finish = np.full(n, np.nan)
        self.dropped = np.zeros(n, dtype=bool)
        self.heap: list = []
        self.seq = 0
        self.workers: dict[str, _Worker] = {}
        self.retired: list[_Worker] = []
        self.serving: list[list[_Instance]] = [[] for _ in self.apps]
        self.backlog: list[deque[int]] = [deque() for _ in self.apps]
        self.arrived = [[0] * self.window for _ in self.apps]
        self.timeline: dict[str, list] = {"t": [], "cost_per_hour": [], "workers": [], "demand_qps": []}
        self.decision_ms: list[float] = []
        self.actions: Counter = Counter()
        self.polls = 0
        for start in initial_fleet:
            self._start(start, 0.0, ready_now=True)

    # -- event loop ---------------------------------------------------------------------------------
    def run(self) -> AutoscaleSimResult:
        if len(self.arrival):
            self._push(float(self.arrival[0]), AutoscaleEvent.ARRIVAL, 0)
        self._push(0.0, AutoscaleEvent.POLL, None)
        while self.heap:
            now, kind, _, payload = heapq.heappop(self.heap)
            if kind == AutoscaleEvent.ARRIVAL:
                self._arrive(now, payload)
            elif kind == AutoscaleEvent.COMPLETION:
                self._complete(now, payload)
            elif kind == AutoscaleEvent.READY:
                self._ready(now, payload)
            else:
                self._poll(now)
        intervals = tuple((w.worker_id, w.wtype.name, WorkerInterval(w.wtype.price_per_hour, w.start_s, w.stop_s))
                          for w in [*self.retired, *self.workers.values()])
        slo_ms = self.slo_s[self.app_of] * 1000.0
        finish = np.where(self.finish <= self.duration, self.finish, np.nan)
        return AutoscaleSimResult(self.apps, self.app_of, self.arrival, finish, slo_ms, self.dropped, self.duration,
                                  intervals, self.timeline, np.asarray(self.decision_ms), self.actions)

    def _push(self, time_s: float, kind: AutoscaleEvent, payload) -> None:
        heapq.heappush(self.heap, (time_s, int(kind), self.seq, payload))
        self.seq += 1

    # -- queries ----------------------------------------------------------------------------------------
    def _arrive(self, now: float, i: int) -> None:
        if i + 1 < len(self.arrival):
            self._push(float(self.arrival[i + 1]), AutoscaleEvent.ARRIVAL, i + 1)
        app = self.app_of[i]
        self.arrived[app][-1] += 1
        self._route(now, i, app)

    def _route(self, now: float, i: int, app: int) -> None:
        best = active = None
        best_wait = active_wait = math.inf
        for inst in self.serving[app]:
            wait = (inst.busy_until - now if inst.busy_until is not None else 0.0) + len(inst.queue) / inst.q
            if wait < best_wait:
                best, best_wait = inst, wait
            if inst.state is not InstanceState.INTERFERED and wait < active_wait:
                active, active_wait = inst, wait
        if active is not None and active_wait <= self.latency_budget * self.slo_s[app]:
            best = active
        if best is None:
            self.backlog[app].append(i)
            return
        best.queue.append(i)
        best.buckets[-1][0] += 1
        if best.busy_until is None:
            self._start_batch(now, best)

    def _start_batch(self, now: float, inst: _Instance) -> None:
        queue, timeout = inst.queue, self.timeout_factor * self.slo_s[inst.app]
        while queue and now - self.arrival[queue[0]] > timeout:
            self.dropped[queue.popleft()] = True
        if not queue:
            inst.busy_until = None
            return
        rows = inst.sizes[min(len(queue), len(inst.sizes) - 1)]
        inst.batch = [queue.popleft() for _ in range(rows)]
        profiled = inst.option.record.latency_ms(rows)
        service = profiled * self._slowdown(now, inst.worker)
        inst.busy_until = now + service / 1000.0
        bucket = inst.buckets[-1]
        bucket[2] += service / 1000.0
        bucket[3] += service
        bucket[4] += profiled
        self._push(inst.busy_until, AutoscaleEvent.COMPLETION, inst)

    def _complete(self, now: float, inst: _Instance) -> None:
        self.finish[inst.batch] = now
        inst.buckets[-1][1] += len(inst.batch)
        inst.batch = []
        self._start_batch(now, inst)

    def _slowdown(self, now: float, worker: _Worker) -> float:
        factor = 1.0
        for k, episode in enumerate(self.slowdowns):
            if episode.start_s <= now < episode.end_s:
                if k not in self.victims:
                    alive = [w for w in self.workers.values() if w.wtype.name == episode.device and w.ready_s <= now]
                    self.victims[k] = min(alive, key=lambda w: (w.start_s, w.worker_id), default=None)
                if self.victims[k] is worker:
                    factor *= episode.factor
        return factor

    # -- machines ---------------------------------------------------------------------------------------
    def _start(self, start: StartWorker, now: float, *, ready_now: bool = False) -> None:
        if start.worker_id in self.workers:
            raise ValueError(f"worker {start.worker_id!r} already exists")
        wtype = self.catalogue.worker_type[start.device]
        worker = _Worker(start.worker_id, wtype, now, now if ready_now else now + wtype.startup_s)
        self.workers[start.worker_id] = worker
        for spec in start.instances:
            self._load(LoadInstance(start.worker_id, spec.variant, spec.application), now, ready_now=ready_now)

    def _load(self, load: LoadInstance, now: float, *, ready_now: bool = False) -> None:
        worker = self.workers.get(load.worker_id)
        option = self.catalogue.option.get((load.variant, worker.wtype.name)) if worker else None
        if option is None or load.application not in self.apps:
            raise ValueError(f"cannot load {load}: unknown worker, variant or application")
        free = dict(worker.wtype.capacity)
        for other in worker.instances:
            for resource, amount in other.option.needs.items():
                free[resource] = free.get(resource, 0.0) - amount
        if any(free.get(r, 0.0) + 1e-9 < a for r, a in option.needs.items()):
            raise ValueError(f"cannot load {load}: {worker.worker_id!r} lacks resources")
        app = self.apps.index(load.application)
        slo_ms = self.slo_s[app] * 1000.0
        inst = _Instance(worker, option, app, option.peak_qps(slo_ms, self.latency_budget),
                         option.batch_limit(slo_ms, self.latency_budget), self.window)
        worker.instances.append(inst)
        if ready_now:
            self._ready(now, inst)
        else:
            self._push(max(now, worker.ready_s) + option.load_s, AutoscaleEvent.READY, inst)

    def _ready(self, now: float, inst: _Instance) -> None:
        if inst.draining or inst.worker.stop_s is not None:
            return
        inst.ready = True
        self.serving[inst.app].append(inst)
        backlog = self.backlog[inst.app]
        while backlog:
            self._route(now, backlog.popleft(), inst.app)

    def _unload(self, unload: UnloadInstance, now: float) -> None:
        worker = self.workers.get(unload.worker_id)
        mine = [i for i in (worker.instances if worker else ()) if not i.draining
                and i.option.variant == unload.variant and self.apps[i.app] == unload.application]
        if not mine:
            raise ValueError(f"cannot unload {unload}: no such instance")
        inst = min(mine, key=lambda i: (i.ready, i.state is not InstanceState.INTERFERED, len(i.queue)))
        inst.draining = True
        worker.instances.remove(inst)
        if inst.ready:
            self.serving[inst.app].remove(inst)

    def _stop(self, worker_id: str, now: float) -> None:
        worker = self.workers.pop(worker_id, None)
        if worker is None:
            raise ValueError(f"cannot stop unknown worker {worker_id!r}")
        for inst in list(worker.instances):
            self._unload(UnloadInstance(worker_id, inst.option.variant, self.apps[inst.app]), now)
        worker.stop_s = now
        self.retired.append(worker)

    # -- autoscaler -------------------------------------------------------------------------------------
    def _poll(self, now: float) -> None:
        self.polls += 1
        if self.polls % self.window == 0:
            self._monitor()
        state = self._state(now)
        began = time.perf_counter()
        actions = self.autoscaler.step(state, now)
        self.decision_ms.append((time.perf_counter() - began) * 1000.0)
        self._apply(actions, now)
        self._record(now, actions, state)
        for inst in (i for w in self.workers.values() for i in w.instances):
            inst.buckets.append([0.0] * 5)
        for counts in self.arrived:
            counts.append(0)
            del counts[0]
        if now + self.poll <= self.duration + 1e-9:
            self._push(now + self.poll, AutoscaleEvent.POLL, None)

    def _window(self, inst: _Instance) -> list[float]:
        return [sum(b[k] for b in inst.buckets) for k in range(5)]

    def _monitor(self) -> None:
        span = self.window * self.poll
        for worker in self.workers.values():
            for inst in worker.instances:
                if not inst.ready:
                    continue
                _, served, busy, observed, profiled = self._window(inst)
                inst.state = observe(inst.state, qps=served / span, peak_qps=inst.q, busy_fraction=busy / span,
                                     latency_ratio=observed / profiled if profiled > 0 else None,
                                     thresholds=self.thresholds)

    def _state(self, now: float) -> AutoscaleState:
        span = self.window * self.poll
        workers = []
        for worker in self.workers.values():
            instances, busy = [], 0.0
            for inst in worker.instances:
                routed, _, busy_s, _, _ = self._window(inst)
                busy += busy_s * inst.option.needs.get(worker.wtype.compute, 0.0)
                instances.append(InstanceStatus(inst.option.variant, self.apps[inst.app], inst.ready,
                                                inst.state, (routed + len(inst.queue)) / span))
            utilization = min(1.0, busy / (span * worker.wtype.capacity[worker.wtype.compute]))
            workers.append(WorkerStatus(worker.worker_id, worker.wtype.name, worker.ready_s <= now, utilization,
                                        tuple(instances)))
        demand = {app: (sum(self.arrived[k]) + len(self.backlog[k])) / span for k, app in enumerate(self.apps)}
        return AutoscaleState(now, tuple(workers), demand)

    def _apply(self, actions: ScaleActions, now: float) -> None:
        for stop in actions.stop:
            self._stop(stop.worker_id, now)
        for unload in actions.unloads:
            self._unload(unload, now)
        for start in actions.start:
            self._start(start, now)
        for load in actions.loads:
            self._load(load, now)
        for kind, items in (("start", actions.start), ("stop", actions.stop), ("load", actions.loads),
                            ("unload", actions.unloads)):
            for item in items:
                self.actions[kind] += 1
                if item.reason:
                    self.actions[f"{kind}:{item.reason.split(':')[0].split(' ')[0]}"] += 1

    def _record(self, now: float, actions: ScaleActions, state: AutoscaleState) -> None:
        devices = Counter(w.wtype.name for w in self.workers.values())
        self.timeline["t"].append(now)
        self.timeline["cost_per_hour"].append(sum(w.wtype.price_per_hour for w in self.workers.values()))
        self.timeline["workers"].append(dict(devices))
        self.timeline["demand_qps"].append(sum(state.demand_qps.values()))


def settle(
    catalogue: Catalogue,
    demand_qps: Mapping[str, float],
    *,
    initial_fleet: Sequence[StartWorker] = (),
    config: GreedyConfig | None = None,
    max_polls: int = 500,
) -> AutoscaleState:
    """Where the greedy Model-Autoscaler settles for a steady load, in a fluid model of the fleet.

    No queues and no delays: actions take effect at once, a machine for requests that fit nowhere
    appears at once, and each application's demand is spread over its instances in proportion to
    their ``Q``. Polls (1 s apart, so every ``T_v`` wait passes) repeat until two in a row change
    nothing. This isolates the heuristic's choices from the dynamics, for comparison with the ILP.

    Raises
    ------
    RuntimeError
        If the greedy still acts after `max_polls` polls.
    """
    greedy = GreedyModelAutoscaler(catalogue, config=config)
    budget = greedy.config.latency_budget
    fleet: dict[str, tuple[str, list[tuple[str, str]]]] = {
        s.worker_id: (s.device, [(i.variant, i.application) for i in s.instances]) for s in initial_fleet}
    quiet, ids = 0, itertools.count()
    for poll in range(max_polls):
        state = _fluid_state(catalogue, fleet, demand_qps, float(poll), budget)
        decision = greedy.decide(state, float(poll))
        for unload in decision.actions.unloads:
            fleet[unload.worker_id][1].remove((unload.variant, unload.application))
        for load in decision.actions.loads:
            fleet[load.worker_id][1].append((load.variant, load.application))
        for device, bins in pack_instances(catalogue, decision.requests).items():
            for members in bins:
                fleet[f"settle-{device}-{next(ids)}"] = (device, [(m.variant, m.application) for m in members])
        for worker_id in [w for w, (_, hosted) in fleet.items() if not hosted]:
            del fleet[worker_id]
        quiet = 0 if (decision.actions or decision.requests) else quiet + 1
        if quiet == 2:
            return _fluid_state(catalogue, fleet, demand_qps, float(poll), budget)
    raise RuntimeError(f"the greedy did not settle within {max_polls} polls")


def _fluid_state(catalogue: Catalogue, fleet: Mapping[str, tuple[str, list[tuple[str, str]]]],
                 demand_qps: Mapping[str, float], now: float, budget: float) -> AutoscaleState:
    capacity: Counter[str] = Counter()
    for device, hosted in fleet.values():
        for variant, app in hosted:
            capacity[app] += catalogue.option[(variant, device)].peak_qps(catalogue.application[app].slo_ms, budget)
    workers = []
    for worker_id, (device, hosted) in sorted(fleet.items()):
        instances = []
        for variant, app in hosted:
            q = catalogue.option[(variant, device)].peak_qps(catalogue.application[app].slo_ms, budget)
            instances.append(InstanceStatus(variant, app, load_qps=demand_qps.get(app, 0.0) * q / capacity[app]))
        workers.append(WorkerStatus(worker_id, device, instances=tuple(instances)))
    return AutoscaleState(now, tuple(workers), dict(demand_qps))
