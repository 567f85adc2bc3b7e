"""INFaaS's monitoring daemon (spec §4, §5, §12.7-8; checklist 9) as one pure, event-fed object.

Per variant instance it keeps the last ``window_s`` of what happened: batches finished (rows, measured
latency), rows routed to it and its latest queue depth. `InfaasMonitor.snapshot` turns that window into
served and incoming load, mean latency, observed / profiled latency, busy share, spare capacity and the
Fig. 4 state (`shared.infaas.state.next_state`), and per worker its utilization. States advance at most
once per ``window_s`` (INFaaS's daemon updates every 2 s); rates are over the sliding window at every
snapshot. Nothing here reads a clock, Kafka or Redis: time comes in as ``now_s``, so the registry
service, the autoscaler service and the discrete-event simulator drive the same object, live or virtual.

Instances are named by a caller-chosen hashable key: the live adapters use ``(worker_id, variant)``; a
simulator may use its own ids, since a worker can hold two instances of one variant while one replaces
the other.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from shared.infaas.records import InstanceRecord, VariantRecord, WorkerRecord
from shared.infaas.state import InstanceState, InstanceWindow, StateThresholds, next_state

if TYPE_CHECKING:
    from shared.settings import Settings

__all__ = ["InfaasMonitor", "InstanceReport", "MonitorConfig", "MonitorSnapshot"]

#: float slack when comparing virtual times (a window that ends at 2.0000000001 has ended at 2)
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class MonitorConfig:
    """Thresholds of the monitor, from ``MERIDIAN_INFAAS_*`` settings (`from_settings`).

    window_s : span of the statistics and period of state updates (spec §6.8: 2 s).
    latency_budget : share of the SLO one batch may take; an instance's peak ``Q`` is its best rate with
        batches within ``latency_budget * SLO`` (spec silent; 0.5 as the greedy autoscaler and simulator).
    thresholds : Interfered above 1.5x the profiled latency, Active again below 1.25x (spec §12.7), at
        peak when busy >= 95% of the window (spec silent; the current behaviour).
    overload_queue_s : Overloaded also when more than ``Q * overload_queue_s`` rows are queued (spec
        §12.8: about 1 s of peak work); 0 turns the queue test off.
    """

    window_s: float = 2.0
    latency_budget: float = 0.5
    thresholds: StateThresholds = StateThresholds()
    overload_queue_s: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"`window_s` must be finite and > 0, got {self.window_s}")
        if not 0.0 < self.latency_budget <= 1.0:
            raise ValueError(f"`latency_budget` must be in (0, 1], got {self.latency_budget}")
        if not (math.isfinite(self.overload_queue_s) and self.overload_queue_s >= 0):
            raise ValueError(f"`overload_queue_s` must be finite and >= 0, got {self.overload_queue_s}")

    @classmethod
    def from_settings(cls, settings: Settings) -> MonitorConfig:
        return cls(window_s=settings.infaas_monitor_window_s, latency_budget=settings.infaas_latency_budget,
                   thresholds=StateThresholds(interfered_ratio=settings.infaas_interfered_ratio,
                                              mitigated_ratio=settings.infaas_mitigated_ratio,
                                              saturated_busy_fraction=settings.infaas_saturated_busy_fraction),
                   overload_queue_s=settings.infaas_overload_queue_s)


@dataclass(frozen=True, slots=True)
class InstanceReport:
    """One instance at a snapshot: its metadata-store record and the window its state was judged on."""

    #: what the metadata store holds: state, served rows/s, mean batch latency, load latency
    record: InstanceRecord
    #: what the window showed: served rows/s, peak ``Q``, observed / profiled latency, busy share
    window: InstanceWindow
    #: incoming rows/s: rows routed to it (served rows when the caller reports no routing) plus its
    #: queued rows, over the window (spec §12.23)
    load_qps: float
    queue_rows: int = 0
    application: str | None = None

    @property
    def state(self) -> InstanceState:
        return self.record.state

    @property
    def slack_qps(self) -> float:
        """Spare capacity ``Q - load`` in rows/s (negative when more arrives than it can serve)."""
        return self.window.peak_qps - self.load_qps


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """Every instance and worker the monitor knows, at `at_s`.

    An instance unloaded (or on a lost worker) since the previous snapshot appears once more, Inactive,
    so a store that removes Inactive records forgets it; it is gone from the snapshots after that.
    """

    at_s: float
    instances: Mapping[Hashable, InstanceReport] = field(default_factory=dict)
    workers: Mapping[str, WorkerRecord] = field(default_factory=dict)
    #: whether the states advanced at this snapshot (once per ``window_s``)
    stepped: bool = False

    def records(self) -> tuple[InstanceRecord, ...]:
        return tuple(r.record for r in self.instances.values())


@dataclass(slots=True)
class _Worker:
    device: str
    device_kind: str = "unknown"
    #: busy share from the worker's own heartbeat; ``None``: derived from its instances' batches
    busy_fraction: float | None = None


@dataclass(slots=True)
class _Instance:
    worker_id: str
    variant: str
    device: str
    profile: VariantRecord | None
    slo_ms: float | None
    load_latency_ms: float | None
    compute_share: float
    application: str | None
    #: loading is Fig. 4's Inactive -> Active edge
    state: InstanceState = next_state(InstanceState.INACTIVE, loaded=True)
    loaded: bool = True
    #: (finished at, rows, measured ms)
    batches: deque[tuple[float, int, float]] = field(default_factory=deque)
    #: (routed at, rows); `routing` once the caller has reported any
    routed: deque[tuple[float, int]] = field(default_factory=deque)
    routing: bool = False
    queue_rows: int = 0
    #: rows -> profiled ms for the current profile
    profiled: dict[int, float | None] = field(default_factory=dict)

    def peak_qps(self, latency_budget: float) -> float:
        if self.profile is None:
            return 0.0
        return self.profile.peak_qps(None if self.slo_ms is None else latency_budget * self.slo_ms)

    def profiled_ms(self, rows: int) -> float | None:
        if rows not in self.profiled:
            self.profiled[rows] = self.profile.latency_ms(rows) if self.profile is not None and rows >= 1 else None
        return self.profiled[rows]


class InfaasMonitor:
    """Window statistics and Fig. 4 state per variant instance, fed by events stamped with ``now_s``.

    Parameters
    ----------
    config : MonitorConfig, optional
    start_s : float, optional
        When the first window starts (states first advance at ``start_s + window_s``); default the time
        of the first call.

    Notes
    -----
    Events for an instance that is not loaded are ignored. Busy time counts when a batch finishes.
    Worker utilization is the worker's own busy share when it reports one (`worker_seen`), else the sum
    over its instances of busy time times their `compute_share`, over the window.

    Examples
    --------
    >>> from shared.infaas.records import VariantRecord
    >>> profile = VariantRecord("m", "f", "cpu", batch_latency_ms=((1, 10.0), (4, 20.0)), max_batch=4)
    >>> mon = InfaasMonitor(MonitorConfig(window_s=2.0), start_s=0.0)
    >>> mon.instance_loaded(("w1", "m"), 0.0, worker_id="w1", variant="m", device="cpu", profile=profile)
    >>> mon.batch_finished(("w1", "m"), 1.0, rows=4, latency_ms=50.0)  # 2.5x the profile, far below peak
    >>> report = mon.snapshot(2.0).instances[("w1", "m")]
    >>> report.state, report.record.qps, report.window.latency_ratio
    (<InstanceState.INTERFERED: 'interfered'>, 2.0, 2.5)
    """

    def __init__(self, config: MonitorConfig | None = None, *, start_s: float | None = None) -> None:
        self.config = config or MonitorConfig()
        self._next_step_s = None if start_s is None else start_s + self.config.window_s
        self._instances: dict[Hashable, _Instance] = {}
        self._workers: dict[str, _Worker] = {}

    # -- events ------------------------------------------------------------------------------------
    def worker_seen(self, worker_id: str, now_s: float, *, device: str, device_kind: str = "unknown",
                    busy_fraction: float | None = None) -> None:
        """A worker's heartbeat: its device and, when it measures one, its busy share (0..1)."""
        self._clock(now_s)
        if busy_fraction is not None and not 0.0 <= busy_fraction <= 1.0:
            raise ValueError(f"`busy_fraction` must be in [0, 1], got {busy_fraction}")
        self._workers[worker_id] = _Worker(device, device_kind, busy_fraction)

    def worker_lost(self, worker_id: str, now_s: float) -> None:
        """The worker stopped or went silent: its instances become Inactive (Fig. 4 Unloaded)."""
        self._clock(now_s)
        self._workers.pop(worker_id, None)
        for inst in self._instances.values():
            if inst.worker_id == worker_id:
                inst.loaded = False

    def instance_loaded(self, key: Hashable, now_s: float, *, worker_id: str, variant: str, device: str,
                        profile: VariantRecord | None = None, slo_ms: float | None = None,
                        load_latency_ms: float | None = None, compute_share: float = 1.0,
                        application: str | None = None) -> None:
        """The instance `key` can serve (Fig. 4 Inactive -> Active).

        `profile` gives the profiled latencies and, with `slo_ms`, the peak ``Q`` (without `slo_ms`: the
        best rate at any profiled batch). `compute_share` is the share of the worker's compute one busy
        second of this instance takes (derived utilization). Calling it again for a loaded instance
        updates these and keeps its state and window.
        """
        self._clock(now_s)
        if not 0.0 <= compute_share <= 1.0:
            raise ValueError(f"`compute_share` must be in [0, 1], got {compute_share}")
        if slo_ms is not None and not (math.isfinite(slo_ms) and slo_ms > 0):
            raise ValueError(f"`slo_ms` must be finite and > 0, got {slo_ms}")
        inst = self._instances.get(key)
        if inst is None or not inst.loaded:
            self._instances[key] = _Instance(worker_id, variant, device, profile, slo_ms, load_latency_ms,
                                             compute_share, application)
        else:
            if profile is not inst.profile:
                inst.profiled.clear()
            inst.worker_id, inst.variant, inst.device, inst.profile = worker_id, variant, device, profile
            inst.slo_ms, inst.compute_share, inst.application = slo_ms, compute_share, application
            if load_latency_ms is not None:
                inst.load_latency_ms = load_latency_ms
        if worker_id not in self._workers:
            self._workers[worker_id] = _Worker(device)

    def instance_unloaded(self, key: Hashable, now_s: float) -> None:
        """The instance no longer serves (Fig. 4 Unloaded -> Inactive); its later batches are ignored."""
        self._clock(now_s)
        inst = self._instances.get(key)
        if inst is not None:
            inst.loaded = False

    def batch_finished(self, key: Hashable, now_s: float, *, rows: int, latency_ms: float,
                       queue_rows: int | None = None) -> None:
        """A batch of `rows` finished after `latency_ms` of compute; `queue_rows` still wait, if known."""
        self._clock(now_s)
        if rows < 0 or not (math.isfinite(latency_ms) and latency_ms >= 0):
            raise ValueError(f"need `rows` >= 0 and finite `latency_ms` >= 0, got {rows} and {latency_ms}")
        inst = self._loaded(key)
        if inst is None:
            return
        inst.batches.append((now_s, rows, latency_ms))
        _evict(inst.batches, now_s - self.config.window_s)
        if queue_rows is not None:
            self.queue_depth(key, queue_rows, now_s)

    def rows_routed(self, key: Hashable, rows: int, now_s: float) -> None:
        """`rows` were sent to the instance (its incoming load; served rows stand in until reported)."""
        self._clock(now_s)
        if rows < 0:
            raise ValueError(f"`rows` must be >= 0, got {rows}")
        inst = self._loaded(key)
        if inst is None:
            return
        inst.routing = True
        inst.routed.append((now_s, rows))
        _evict(inst.routed, now_s - self.config.window_s)

    def queue_depth(self, key: Hashable, rows: int, now_s: float) -> None:
        """`rows` wait at the instance now (the Overloaded queue test, spec §12.8, and incoming load)."""
        self._clock(now_s)
        if rows < 0:
            raise ValueError(f"`rows` must be >= 0, got {rows}")
        inst = self._loaded(key)
        if inst is not None:
            inst.queue_rows = rows

    # -- reading -----------------------------------------------------------------------------------
    def state(self, key: Hashable) -> InstanceState:
        """The state the last window left the instance in (Inactive when unknown or unloaded)."""
        inst = self._instances.get(key)
        return inst.state if inst is not None and inst.loaded else InstanceState.INACTIVE

    def snapshot(self, now_s: float) -> MonitorSnapshot:
        """Every instance and worker over the window ending at `now_s`; advances the states once the
        current window has ended (every ``window_s``), and forgets instances reported Inactive."""
        self._clock(now_s)
        step = now_s + _EPS >= self._next_step_s
        if step:
            while self._next_step_s <= now_s + _EPS:
                self._next_step_s += self.config.window_s
        span = self.config.window_s
        since = now_s - span
        reports: dict[Hashable, InstanceReport] = {}
        busy_by_worker: dict[str, float] = {}
        for key, inst in list(self._instances.items()):
            if not inst.loaded:
                del self._instances[key]
                inst.state = InstanceState.INACTIVE
                reports[key] = self._report(inst, InstanceWindow(qps=0.0, peak_qps=inst.peak_qps(
                    self.config.latency_budget)), 0.0, None, now_s)
                continue
            _evict(inst.batches, since)
            _evict(inst.routed, since)
            rows = sum(b[1] for b in inst.batches)
            busy_ms = sum(b[2] for b in inst.batches)
            window = InstanceWindow(qps=rows / span, peak_qps=inst.peak_qps(self.config.latency_budget),
                                    latency_ratio=self._latency_ratio(inst),
                                    busy_fraction=min(1.0, busy_ms / 1000.0 / span))
            if step:
                inst.state = next_state(inst.state, loaded=True, window=self._judged(inst, window),
                                        thresholds=self.config.thresholds)
            incoming = sum(r[1] for r in inst.routed) if inst.routing else rows
            avg_ms = busy_ms / len(inst.batches) if inst.batches else None
            reports[key] = self._report(inst, window, (incoming + inst.queue_rows) / span, avg_ms, now_s)
            busy_by_worker[inst.worker_id] = busy_by_worker.get(inst.worker_id, 0.0) + \
                busy_ms / 1000.0 * inst.compute_share
        workers = {}
        for worker_id, worker in sorted(self._workers.items()):
            utilization = worker.busy_fraction
            if utilization is None:
                utilization = min(1.0, busy_by_worker.get(worker_id, 0.0) / span)
            workers[worker_id] = WorkerRecord(worker_id, worker.device, worker.device_kind, utilization, now_s)
        return MonitorSnapshot(now_s, reports, workers, step)

    # -- helpers -----------------------------------------------------------------------------------
    def _clock(self, now_s: float) -> None:
        if not math.isfinite(now_s):
            raise ValueError(f"`now_s` must be finite, got {now_s}")
        if self._next_step_s is None:
            self._next_step_s = now_s + self.config.window_s

    def _loaded(self, key: Hashable) -> _Instance | None:
        inst = self._instances.get(key)
        return inst if inst is not None and inst.loaded else None

    def _latency_ratio(self, inst: _Instance) -> float | None:
        """Sum of measured over sum of profiled latencies of the window's batches that have a profile."""
        observed = profiled = 0.0
        for _, rows, ms in inst.batches:
            expected = inst.profiled_ms(rows)
            if expected is not None:
                observed += ms
                profiled += expected
        return observed / profiled if profiled > 0 else None

    def _judged(self, inst: _Instance, window: InstanceWindow) -> InstanceWindow:
        """The window as the state machine sees it: a queue of more than ``overload_queue_s`` of peak
        work counts as saturated (spec §12.8)."""
        queue_limit = window.peak_qps * self.config.overload_queue_s
        if queue_limit > 0 and inst.queue_rows > queue_limit:
            return replace(window, busy_fraction=1.0)
        return window

    def _report(self, inst: _Instance, window: InstanceWindow, load_qps: float, avg_ms: float | None,
                now_s: float) -> InstanceReport:
        record = InstanceRecord(inst.variant, inst.device, inst.worker_id, inst.state, qps=window.qps,
                                avg_latency_ms=avg_ms, load_latency_ms=inst.load_latency_ms, updated_s=now_s)
        return InstanceReport(record, window, load_qps, inst.queue_rows, inst.application)


def _evict(samples: deque, before_s: float) -> None:
    """Drop samples stamped at or before `before_s` (the window is ``(now - window_s, now]``)."""
    while samples and samples[0][0] <= before_s + _EPS:
        samples.popleft()
