"""INFaaS autoscaling (ATC'21 §4.2, §6.1) on the one engine: the live loops, on a virtual clock.

Every query goes through the live scheduler's core and is routed by `InfaasDispatch` (getVariant); the
fleet is changed by the autoscaler service's loop (`shared.autoscale.loop.AutoscaleLoop`) and the dispatch
learns instance states through the registry's monitoring daemon, as live:

- the scheduler's load statistics reach the loop every ``load_stats_interval_s`` (the live scheduler's
  ``load_stats_interval_s``, 2 s by default), each the arrivals of its interval; worker events (heartbeats
  every second, batches, loads, unloads, stops) reach it and the daemon as they happen;
- every ``window_s`` the daemon writes its `InfaasMonitor` snapshot to an in-memory metadata store and
  the dispatch reads the store (`InfaasDispatch.update_from_metadata`), so Overloaded and Interfered
  instances are avoided from then on;
- every ``policy.poll_interval_s`` the loop is polled and its `ScaleActions` become `FleetCommands`:
  a started worker joins after its type's ``startup_s`` and its variants' load latency; loads and
  unloads queue behind the worker's batches.

A worker is one process with a set of variants that runs one batch at a time, as a live worker: the
autoscaler may reserve several one-vCPU instances on a machine, but they share that one process.
Machines are billed from the start request to the stop (boot included), whole. A `Slowdown` (a noisy
neighbour) multiplies the batch times of the oldest running worker of its type.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from schemas import LoadStatistics, WorkerHeartbeat, WorkerStopped
from shared.autoscale.autoscaler import BaseAutoscaler
from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.cost import CostReport, WorkerInterval, period_cost
from shared.autoscale.loop import AutoscaleLoop
from shared.autoscale.state import ScaleActions, StartWorker
from shared.infaas.daemon import InstanceMonitor
from shared.infaas.dispatch import InfaasDispatch
from shared.infaas.metadata import InMemoryMetadataStore
from shared.infaas.monitor import MonitorConfig
from shared.policy.base import FleetCommands, FleetController, Placement
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.serving.core import CoreConfig
from shared.sim.arrivals import Workload
from shared.sim.engine import SimResult, Simulation
from shared.sim.transport import TransportModel
from shared.sim.workers import SimWorker

__all__ = ["AutoscaleSimResult", "AutoscalingController", "Slowdown", "serving_profiles", "simulate_autoscaling"]

logger = logging.getLogger(__name__)


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
    """The engine's per-query outcomes, billed machine lifetimes and the loop's per-poll timeline."""

    serving: SimResult
    duration_s: float
    #: (worker id, device, billed lifetime) of every machine of the run
    workers: tuple[tuple[str, str, WorkerInterval], ...]
    #: per poll: time, fleet $/h, workers per device type (booting included), demand rows/s
    timeline: dict[str, list]
    #: wall-clock ms of each ``policy.step``
    decision_ms: np.ndarray
    #: action kind -> count (``load``, ``unload``, ``start``, ``stop`` and reasons' first word)
    actions: Counter = field(default_factory=Counter)

    @property
    def num_queries(self) -> int:
        return len(self.serving.arrival_s)

    @property
    def finish_s(self) -> np.ndarray:
        """NaN when never finished (dropped, queued or running at the end)."""
        return self.serving.finish_s

    @property
    def dropped(self) -> np.ndarray:
        """Rejected, dropped by the core's deadline rule, or still queued at the end."""
        mask = np.zeros(self.num_queries, dtype=bool)
        mask[list(self.serving.dropped)] = True
        return mask

    @property
    def num_completed(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.finish_s)))

    @property
    def within_slo(self) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return (self.finish_s - self.serving.arrival_s) * 1000.0 <= self.serving.slo_ms

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
        latency = np.where(np.isnan(self.finish_s), np.inf, (self.finish_s - self.serving.arrival_s) * 1000.0)
        return float(np.quantile(latency, q, method="higher")) if len(latency) else 0.0


def serving_profiles(catalogue: MachineCatalogue, latency_budget: float) -> ProfileSet:
    """The options some application may use, as the profiles the core, the dispatch and the workers read.

    Worker types become device types (price, start-up); each family's SLO is its strictest application's.
    Options no application may use (a baseline's unpinned ones) are left out, so the dispatch never loads
    them either.
    """
    options = {o.key: o for a in catalogue.applications for o in catalogue.eligible(a.name, latency_budget)}
    slo_ms: dict[str, float] = {}
    for app in catalogue.applications:
        slo_ms[app.family] = min(app.slo_ms, slo_ms.get(app.family, app.slo_ms))
    return ProfileSet(
        source=catalogue.source or "autoscale catalogue",
        devices=[DeviceType(name=w.name, kind=w.kind, price_per_hour=w.price_per_hour, startup_s=w.startup_s)
                 for w in catalogue.worker_types],
        slo_ms=slo_ms,
        variants=[VariantProfile(variant=o.variant, family=o.record.family, device=o.device,
                                 accuracy=o.record.accuracy, batch_latency_ms=dict(o.record.batch_latency_ms),
                                 load_latency_ms=o.record.load_latency_ms, peak_memory_mb=o.record.peak_memory_mb,
                                 max_batch=o.record.max_batch) for _, o in sorted(options.items())])


class AutoscalingController(FleetController):
    """The autoscaler service, the scheduler's load statistics and the registry's daemon, as the engine's
    controller; see the module docstring.

    Parameters
    ----------
    loop : the autoscaler's loop (its tracker already expects the initial fleet).
    daemon : the registry's monitoring daemon, writing to `store`.
    dispatch : the scheduler's policy, refreshed from `store`.
    queue_depth : the scheduler core's queued queries per application, now (for the load statistics).
    load_stats_interval_s : how often the scheduler publishes load statistics (the live setting of that name).
    slowdowns : noisy-neighbour episodes (`service_factor`).
    """

    def __init__(self, loop: AutoscaleLoop, daemon: InstanceMonitor, store: InMemoryMetadataStore,
                 dispatch: InfaasDispatch, queue_depth: Callable[[], Mapping[str, int]], *,
                 load_stats_interval_s: float = 2.0, slowdowns: Sequence[Slowdown] = ()) -> None:
        self.loop, self.daemon, self.store, self.dispatch = loop, daemon, store, dispatch
        self.queue_depth = queue_depth
        self.window_s = daemon.config.window_s
        self.load_stats_interval_s = load_stats_interval_s
        self.slowdowns = tuple(slowdowns)
        self.timeline: dict[str, list] = {"t": [], "cost_per_hour": [], "workers": [], "demand_qps": []}
        self.decision_ms: list[float] = []
        self.actions: Counter = Counter()
        #: worker id -> when it was asked for (machines are billed and aged from then)
        self.requested_s: dict[str, float] = {}
        self._arrivals: Counter[str] = Counter()
        self._stats_at_s = 0.0
        #: running workers (joined, not stopped) -> (asked for at, device), and each episode's victim
        self._running: dict[str, tuple[float, str]] = {}
        self._victims: dict[int, str | None] = {}

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetCommands | None:
        self._arrivals.update(arrivals)
        if now_s - self._stats_at_s >= self.load_stats_interval_s:
            span, self._stats_at_s = now_s - self._stats_at_s, now_s
            depth = self.queue_depth()
            for application in sorted(set(depth) | set(self._arrivals)):
                self.loop.on_load_statistics(LoadStatistics(
                    application=application, window_s=span, arrival_rate_qps=self._arrivals[application] / span,
                    queue_depth=depth.get(application, 0), at=now_s))
            self._arrivals.clear()
        if now_s - self.daemon.last_flush_s >= self.window_s:
            self.daemon.flush(now_s)
            self.dispatch.update_from_metadata(self.store.snapshot(now_s))
        poll = self.loop.poll(now_s)
        self.decision_ms.append(poll.decision_s * 1000.0)
        self._count(poll.actions)
        for start in poll.actions.start:
            self.requested_s[start.worker_id] = now_s
        self._record(now_s, sum(poll.state.demand_qps.values()))
        actions, expired = poll.actions, poll.expired
        if not (actions or expired):
            return None
        logger.debug("t=%.0f s: start %d, stop %d, load %d, unload %d, expired %s", now_s, len(actions.start),
                     len(actions.stop), len(actions.loads), len(actions.unloads), list(expired))
        return FleetCommands(
            start=tuple((s.worker_id, Placement(s.device, tuple(sorted({i.variant for i in s.instances}))))
                        for s in actions.start),
            stop=tuple(dict.fromkeys([*expired, *(s.worker_id for s in actions.stop)])),
            load=tuple((load.worker_id, load.variant) for load in actions.loads),
            unload=tuple((unload.worker_id, unload.variant) for unload in actions.unloads))

    def on_worker_event(self, event: object) -> None:
        self.loop.on_worker_event(event, event.at)
        self.daemon.observe(event, event.at)
        if isinstance(event, WorkerHeartbeat) and event.worker_id not in self._running:
            self._running[event.worker_id] = (self.requested_s.get(event.worker_id, event.at), event.device)
        elif isinstance(event, WorkerStopped):
            self._running.pop(event.worker_id, None)

    def service_factor(self, worker_id: str, device: str, now_s: float) -> float:
        """Each episode's victim is the oldest worker of its type running when the episode's first batch starts."""
        factor = 1.0
        for k, episode in enumerate(self.slowdowns):
            if episode.start_s <= now_s < episode.end_s:
                if k not in self._victims:
                    alive = [(at, w) for w, (at, d) in self._running.items() if d == episode.device]
                    self._victims[k] = min(alive)[1] if alive else None
                if self._victims[k] == worker_id:
                    factor *= episode.factor
        return factor

    def _count(self, actions: ScaleActions) -> None:
        for kind, items in (("start", actions.start), ("stop", actions.stop), ("load", actions.loads),
                            ("unload", actions.unloads)):
            for item in items:
                self.actions[kind] += 1
                if item.reason:
                    self.actions[f"{kind}:{item.reason.split(':')[0].split(' ')[0]}"] += 1

    def _record(self, now_s: float, demand_qps: float) -> None:
        """The fleet after the poll, as the tracker counts it (asked-for machines included)."""
        types = self.loop.policy.catalogue.worker_type
        devices = Counter(w.device for w in self.loop.tracker.workers.values())
        self.timeline["t"].append(now_s)
        self.timeline["cost_per_hour"].append(sum(types[d].price_per_hour * n for d, n in devices.items()))
        self.timeline["workers"].append(dict(devices))
        self.timeline["demand_qps"].append(demand_qps)


def simulate_autoscaling(
    workloads: Mapping[str, np.ndarray],
    autoscaler: BaseAutoscaler,
    *,
    initial_fleet: Sequence[StartWorker],
    duration_s: float | None = None,
    slowdowns: Sequence[Slowdown] = (),
    monitor: MonitorConfig | None = None,
    core: CoreConfig | None = None,
    heartbeat_interval_s: float = 1.0,
    load_stats_interval_s: float = 2.0,
    transport: TransportModel | None = None,
    seed: int = 0,
) -> AutoscaleSimResult:
    """Replay `workloads` (application -> sorted arrival times, s; one row per query) on a fleet
    `autoscaler` manages, from `initial_fleet` (up and loaded at t = 0, billed from t = 0).

    Parameters
    ----------
    autoscaler : polled every ``autoscaler.poll_interval_s``; its catalogue (pinned for the baselines)
        gives the applications, their SLOs and what may serve them.
    duration_s : end of the run and of the billed period; default the last arrival. Queries not served
        by then count as violations.
    monitor : window and thresholds of the tracker's and the daemon's monitors (default: the live
        settings' defaults); give the autoscaler the same latency budget, as the live service does.
    core : the scheduler core's settings (default `CoreConfig()`: an ideal machine's, one batch at a time per
        worker; a replay of a live run gives the live scheduler's, `services.replay.comparison.sim_config`).
    heartbeat_interval_s : how often workers heartbeat (live default 1 s).
    load_stats_interval_s : how often the scheduler publishes load statistics (live default 2 s).
    transport : Kafka's hops (`shared.sim.transport.fit_transport` of a live run); None: an ideal machine.
    seed : the draws of the transport's hops.
    """
    catalogue = autoscaler.catalogue
    monitor = monitor or MonitorConfig()
    unknown = sorted(a for a in workloads if a not in catalogue.application)
    if unknown:
        raise ValueError(f"`workloads` names applications missing from the catalogue: {unknown}")
    profiles = serving_profiles(catalogue, monitor.latency_budget)
    max_batch = {d.name: max((p.max_batch for p in profiles.variants if p.device == d.name), default=1)
                 for d in profiles.devices}
    accuracy = {p.variant: p.accuracy or 0.0 for p in profiles.variants}
    jobs = []
    for name, arrivals in sorted(workloads.items()):
        app = catalogue.application[name]
        candidates = sorted({o.variant for o in catalogue.eligible(name, monitor.latency_budget)},
                            key=lambda v: (-accuracy.get(v, 0.0), v))
        arrivals = np.asarray(arrivals, dtype=float)
        jobs.append(Workload(arrivals, np.ones(len(arrivals), dtype=int), name, app.slo_ms, tuple(candidates)))
    end_s = float(duration_s if duration_s is not None else max((w.arrival_s[-1] for w in jobs if len(w)),
                                                                default=0.0))
    if not end_s > 0:
        raise ValueError("`duration_s` must be > 0 (or the workloads non-empty)")
    loop = AutoscaleLoop(autoscaler, config=monitor, timer=time.perf_counter, profiles=profiles)
    loop.begin(initial_fleet, 0.0)
    daemon = InstanceMonitor.in_memory(profiles, worker_timeout_s=3 * heartbeat_interval_s, start_s=0.0,
                                       config=monitor)
    store = daemon.store
    for app in catalogue.applications:
        store.register_model(app.name, app.family)
    dispatch = InfaasDispatch(profiles)
    sim: Simulation | None = None
    controller = AutoscalingController(loop, daemon, store, dispatch, lambda: sim.core.depth_by_application(),
                                       load_stats_interval_s=load_stats_interval_s, slowdowns=slowdowns)
    controller.requested_s.update({s.worker_id: 0.0 for s in initial_fleet})
    fleet = [SimWorker(s.worker_id, s.device, tuple(sorted({i.variant for i in s.instances})), max_batch[s.device])
             for s in initial_fleet]
    sim = Simulation(jobs, fleet, dispatch, profiles, controller=controller,
                     control_interval_s=autoscaler.poll_interval_s, config=core,
                     service_factor=controller.service_factor if slowdowns else None, end_s=end_s,
                     heartbeat_interval_s=heartbeat_interval_s, transport=transport, seed=seed)
    result = sim.run()
    prices = {w.name: w.price_per_hour for w in catalogue.worker_types}
    billed = tuple((life.worker_id, life.device, WorkerInterval(prices[life.device], life.requested_s, life.stopped_s))
                   for life in result.lifetimes)
    return AutoscaleSimResult(result, end_s, billed, controller.timeline, np.asarray(controller.decision_ms),
                              controller.actions)
