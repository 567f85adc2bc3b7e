"""The monitoring daemon of INFaaS (spec §4, checklist 9) fed by ``meridian.worker-events``.

Workers here publish events instead of writing the metadata store themselves, so the registry
aggregates them: per (variant, worker) the rows served, batches and compute time of the window; per
worker its loaded variants and its heartbeat's busy fraction. Every `flush` (every ~2 s) turns the
window into QPS, average latency versus profile, the Fig. 4 state and worker utilization, and writes
them to the metadata store. Time comes in as ``now_s``; nothing here reads a clock or Kafka.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas import BatchFinished, VariantLoaded, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.infaas.metadata import MetadataStore
from shared.infaas.records import InstanceRecord, VariantRecord, WorkerRecord
from shared.infaas.state import InstanceState, InstanceWindow, StateThresholds, next_state

__all__ = ["InstanceMonitor"]


@dataclass
class _Worker:
    device: str
    loaded: set[str]
    utilization: float
    last_seen_s: float


@dataclass
class _Window:
    rows: int = 0
    batches: int = 0
    compute_ms: float = 0.0


@dataclass
class InstanceMonitor:
    """Window aggregation and state transitions for every instance the fleet reports."""

    store: MetadataStore
    #: device type -> kind (``cpu``, ``gpu``), from the profile sets; unknown types are ``unknown``
    device_kinds: Mapping[str, str]
    #: a worker silent this long is gone (its instances become Inactive)
    worker_timeout_s: float
    last_flush_s: float
    thresholds: StateThresholds = StateThresholds()
    _workers: dict[str, _Worker] = field(default_factory=dict)
    _windows: dict[tuple[str, str], _Window] = field(default_factory=dict)
    _load_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    _states: dict[tuple[str, str], InstanceState] = field(default_factory=dict)
    _stopped: set[str] = field(default_factory=set)

    def observe(self, event: object, now_s: float) -> None:
        handler = _EVENT_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, now_s)

    def _heartbeat(self, event: WorkerHeartbeat, now_s: float) -> None:
        self._workers[event.worker_id] = _Worker(event.device, set(event.variants), event.busy_fraction, now_s)
        self._stopped.discard(event.worker_id)

    def _batch_finished(self, event: BatchFinished, now_s: float) -> None:
        window = self._windows.setdefault((event.variant, event.worker_id), _Window())
        window.rows += event.rows
        window.batches += 1
        window.compute_ms += event.compute_ms

    def _loaded(self, event: VariantLoaded, now_s: float) -> None:
        self._load_ms[(event.variant, event.worker_id)] = event.load_ms
        if event.worker_id in self._workers:
            self._workers[event.worker_id].loaded.add(event.variant)

    def _unloaded(self, event: VariantUnloaded, now_s: float) -> None:
        if event.worker_id in self._workers:
            self._workers[event.worker_id].loaded.discard(event.variant)

    def _worker_stopped(self, event: WorkerStopped, now_s: float) -> None:
        self._stopped.add(event.worker_id)

    def flush(self, now_s: float) -> None:
        """Write the window's worker and instance state to the store and start a new window."""
        window_s = max(now_s - self.last_flush_s, 1e-3)
        gone = {w for w, seen in self._workers.items()
                if w in self._stopped or now_s - seen.last_seen_s > self.worker_timeout_s}
        for worker_id in gone:
            self._forget(worker_id)
        for worker_id, seen in self._workers.items():
            self.store.put_worker(WorkerRecord(worker_id, seen.device, self.device_kinds.get(seen.device, "unknown"),
                                               seen.utilization, now_s))
            for variant in seen.loaded:
                self._update_instance(variant, worker_id, seen.device, window_s, now_s)
        for variant, worker_id in [k for k in self._states if k[1] in self._workers]:
            if variant not in self._workers[worker_id].loaded:
                self.store.remove_instance(variant, worker_id)
                del self._states[(variant, worker_id)]
        self._windows.clear()
        self.last_flush_s = now_s

    def _forget(self, worker_id: str) -> None:
        self.store.remove_worker(worker_id)
        del self._workers[worker_id]
        self._stopped.discard(worker_id)
        for key in [k for k in self._states if k[1] == worker_id]:
            del self._states[key]

    def _update_instance(self, variant: str, worker_id: str, device: str, window_s: float, now_s: float) -> None:
        key = (variant, worker_id)
        seen = self._windows.get(key, _Window())
        profile = self.store.get_variant(variant, device)
        avg_ms = seen.compute_ms / seen.batches if seen.batches else None
        window = InstanceWindow(
            qps=seen.rows / window_s, peak_qps=profile.peak_qps() if profile else 0.0,
            latency_ratio=_latency_ratio(profile, avg_ms, seen), busy_fraction=seen.compute_ms / 1000.0 / window_s)
        state = next_state(self._states.get(key, InstanceState.INACTIVE), loaded=True, window=window,
                           thresholds=self.thresholds)
        self._states[key] = state
        self.store.put_instance(InstanceRecord(variant, device, worker_id, state, qps=window.qps,
                                               avg_latency_ms=avg_ms, load_latency_ms=self._load_ms.get(key),
                                               updated_s=now_s))


def _latency_ratio(profile: VariantRecord | None, avg_ms: float | None, seen: _Window) -> float | None:
    """Mean observed batch latency over the profiled latency at the mean batch size."""
    if profile is None or avg_ms is None:
        return None
    profiled = profile.latency_ms(max(1, math.ceil(seen.rows / seen.batches)))
    return None if profiled is None else avg_ms / profiled


_EVENT_HANDLERS = {
    WorkerHeartbeat: InstanceMonitor._heartbeat,
    BatchFinished: InstanceMonitor._batch_finished,
    VariantLoaded: InstanceMonitor._loaded,
    VariantUnloaded: InstanceMonitor._unloaded,
    WorkerStopped: InstanceMonitor._worker_stopped,
}
