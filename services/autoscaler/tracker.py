"""The fleet as the autoscaler sees it, built from worker events and load statistics.

Kept free of Kafka so it is unit-tested: the service feeds it messages and asks for an `AutoscaleState`
once per poll. Workers it asked for count from the moment it asked (booting, then loading), so one
burst does not start a machine per poll.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from schemas import BatchFinished, LoadStatistics, VariantLoaded, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.autoscale import AutoscaleState, Catalogue, InstanceStatus, ScaleActions, WorkerStatus
from shared.autoscale.interference import latency_ratio, observe
from shared.infaas.state import InstanceState


@dataclass
class _Worker:
    device: str
    ready: bool
    last_seen_s: float
    busy_fraction: float = 0.0
    #: variant -> ready (False while the load the autoscaler asked for is under way)
    variants: dict[str, bool] = field(default_factory=dict)
    #: (finished at, variant, rows, compute ms) of recent batches
    batches: deque[tuple[float, str, int, float]] = field(default_factory=lambda: deque(maxlen=10_000))
    states: dict[str, InstanceState] = field(default_factory=dict)


class FleetTracker:
    """Parameters
    ----------
    catalogue : the autoscalers' catalogue (worker types, variant options, applications).
    window_s : the monitoring window over which rates and latencies are averaged.
    silent_after_s : a worker not heard from this long is gone (it crashed or was stopped).
    """

    def __init__(self, catalogue: Catalogue, *, window_s: float = 2.0, silent_after_s: float = 30.0) -> None:
        self.catalogue = catalogue
        self.window_s = window_s
        self.silent_after_s = silent_after_s
        self.workers: dict[str, _Worker] = {}
        self.demand_qps: dict[str, float] = {}
        self._application_of_family = {a.family: a.name for a in catalogue.applications}
        self._family_of_variant = {o.variant: o.record.family for o in catalogue.options}

    # -- inputs ---------------------------------------------------------------------------------
    def on_load_statistics(self, stats: LoadStatistics) -> None:
        """Demand in rows/s: the arrival rate times the mean rows per query of the window."""
        if stats.application not in self.catalogue.application:
            return
        rows = sum(stats.batch_sizes) / len(stats.batch_sizes) if stats.batch_sizes else 1.0
        self.demand_qps[stats.application] = stats.arrival_rate_qps * rows

    def on_worker_event(self, event: object, now_s: float) -> None:
        if isinstance(event, WorkerStopped):
            self.workers.pop(event.worker_id, None)
            return
        worker = self.workers.get(getattr(event, "worker_id", ""))
        if isinstance(event, WorkerHeartbeat):
            if event.device not in self.catalogue.worker_type:
                return  # a machine kind this autoscaler does not manage
            if worker is None:
                worker = self.workers[event.worker_id] = _Worker(event.device, True, now_s)
            worker.ready, worker.last_seen_s, worker.busy_fraction = True, now_s, event.busy_fraction
            for variant in event.variants:
                worker.variants[variant] = True
            for variant in [v for v, ready in worker.variants.items() if ready and v not in event.variants]:
                del worker.variants[variant]
        elif worker is None:
            return
        elif isinstance(event, BatchFinished):
            worker.batches.append((now_s, event.variant, event.rows, event.compute_ms))
        elif isinstance(event, VariantLoaded):
            worker.variants[event.variant] = True
        elif isinstance(event, VariantUnloaded):
            worker.variants.pop(event.variant, None)
            worker.states.pop(event.variant, None)

    def expect(self, actions: ScaleActions, now_s: float) -> None:
        """Count what was just asked for, so the next poll does not ask again."""
        for stop in actions.stop:
            self.workers.pop(stop.worker_id, None)
        for unload in actions.unloads:
            if unload.worker_id in self.workers:
                self.workers[unload.worker_id].variants.pop(unload.variant, None)
        for start in actions.start:
            self.workers[start.worker_id] = _Worker(start.device, False, now_s,
                                                    variants={i.variant: False for i in start.instances})
        for load in actions.loads:
            if load.worker_id in self.workers:
                self.workers[load.worker_id].variants.setdefault(load.variant, False)

    # -- the state ------------------------------------------------------------------------------
    def expire(self, now_s: float) -> list[str]:
        """Forget workers gone silent, and asked-for ones that never reported (they failed to start);
        the caller stops what may be left of them."""
        gone = [w for w, rec in self.workers.items() if now_s - rec.last_seen_s > self.silent_after_s
                + (0.0 if rec.ready else self.catalogue.worker_type[rec.device].startup_s)]
        for worker_id in gone:
            del self.workers[worker_id]
        return gone

    def state(self, now_s: float) -> AutoscaleState:
        return AutoscaleState(at_s=now_s, workers=tuple(self._status(w, rec, now_s)
                                                        for w, rec in sorted(self.workers.items())),
                              demand_qps=dict(self.demand_qps))

    def _status(self, worker_id: str, worker: _Worker, now_s: float) -> WorkerStatus:
        while worker.batches and worker.batches[0][0] < now_s - self.window_s:
            worker.batches.popleft()
        instances = []
        for variant, ready in sorted(worker.variants.items()):
            application = self._application_of_family.get(self._family_of_variant.get(variant, ""))
            if application is None:
                continue
            mine = [(rows, ms) for _, v, rows, ms in worker.batches if v == variant]
            qps = sum(rows for rows, _ in mine) / self.window_s
            if ready:
                worker.states[variant] = self._next_state(worker, variant, application, mine, qps)
            instances.append(InstanceStatus(variant, application, ready=ready,
                                            state=worker.states.get(variant, InstanceState.ACTIVE), load_qps=qps))
        return WorkerStatus(worker_id, worker.device, ready=worker.ready,
                            utilization=min(1.0, max(0.0, worker.busy_fraction)), instances=tuple(instances))

    def _next_state(self, worker: _Worker, variant: str, application: str, batches: list[tuple[int, float]],
                    qps: float) -> InstanceState:
        option = self.catalogue.option.get((variant, worker.device))
        if option is None:
            return InstanceState.ACTIVE
        ratio = None
        if batches:
            ratio = latency_ratio(option, mean_latency_ms=sum(ms for _, ms in batches) / len(batches),
                                  mean_rows=max(1.0, sum(r for r, _ in batches) / len(batches)))
        peak = option.peak_qps(self.catalogue.application[application].slo_ms, 0.5)
        return observe(worker.states.get(variant, InstanceState.ACTIVE), qps=qps, peak_qps=peak,
                       busy_fraction=worker.busy_fraction, latency_ratio=ratio)
