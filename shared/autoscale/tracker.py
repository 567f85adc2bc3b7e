"""The fleet as the autoscaler sees it, built from worker events and load statistics.

Pure: the autoscaler service and the simulator feed it the same messages (`shared.autoscale.loop`) and
ask for an `AutoscaleState` once per poll. Which machines and instances exist is kept here: workers it
asked for count from the moment it asked (booting, then loading), so one burst does not start a machine
per poll. A worker holds each variant once (it is one process with a set of loaded variants); the
instance serves the application it was asked for, or, loaded unasked (by the dispatcher, or before the
autoscaler started), the first application it is eligible for. A worker it did not start is its own only if
it holds a variant one of its applications may use: a worker serving other applications is another policy's.
How each ready instance is doing (served rate, Fig. 4 state, worker utilization) comes from the one INFaaS
monitor (`shared.infaas.monitor.InfaasMonitor`), keyed by ``(worker_id, variant)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from schemas import BatchFinished, LoadStatistics, VariantLoaded, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.state import AutoscaleState, InstanceStatus, ScaleActions, WorkerStatus
from shared.infaas.monitor import InfaasMonitor, MonitorConfig, MonitorSnapshot
from shared.infaas.state import InstanceState


@dataclass
class _Worker:
    device: str
    ready: bool
    last_seen_s: float
    #: variant -> ready (False while the load the autoscaler asked for is under way)
    variants: dict[str, bool] = field(default_factory=dict)
    #: variant -> the application the autoscaler loaded it for
    applications: dict[str, str] = field(default_factory=dict)


class FleetTracker:
    """Parameters
    ----------
    catalogue : the autoscalers' catalogue (worker types, variant options, applications).
    config : the monitor's window and thresholds (`MonitorConfig.from_settings`).
    silent_after_s : a worker not heard from this long is gone (it crashed or was stopped).
    """

    def __init__(self, catalogue: MachineCatalogue, *, config: MonitorConfig | None = None,
                 silent_after_s: float = 30.0) -> None:
        self.catalogue = catalogue
        self.monitor = InfaasMonitor(config)
        self.silent_after_s = silent_after_s
        self.workers: dict[str, _Worker] = {}
        self.demand_qps: dict[str, float] = {}
        #: (variant, device) -> the applications it may serve, in catalogue order
        self._serves = catalogue.applications_by_option(self.monitor.config.latency_budget)

    def use(self, catalogue: MachineCatalogue) -> None:
        """Track by ``catalogue`` from now on (its options' latencies changed)."""
        self.catalogue = catalogue
        self._serves = catalogue.applications_by_option(self.monitor.config.latency_budget)

    # -- inputs ---------------------------------------------------------------------------------
    def on_load_statistics(self, stats: LoadStatistics) -> None:
        """Demand in rows/s: the arrival rate times the mean rows per query of the window."""
        if stats.application not in self.catalogue.application:
            return
        rows = sum(stats.batch_sizes) / len(stats.batch_sizes) if stats.batch_sizes else 1.0
        self.demand_qps[stats.application] = stats.arrival_rate_qps * rows

    def on_worker_event(self, event: object, now_s: float) -> None:
        if isinstance(event, WorkerStopped):
            self._forget(event.worker_id, now_s)
            return
        worker = self.workers.get(getattr(event, "worker_id", ""))
        if isinstance(event, WorkerHeartbeat):
            if event.device not in self.catalogue.worker_type:
                return  # a machine kind this autoscaler does not manage
            if worker is None:
                if not any((v, event.device) in self._serves for v in event.variants):
                    return  # not started by it and serving none of its applications: another policy's worker
                worker = self.workers[event.worker_id] = _Worker(event.device, True, now_s)
            worker.ready, worker.last_seen_s = True, now_s
            self.monitor.worker_seen(event.worker_id, now_s, device=event.device, busy_fraction=event.busy_fraction)
            for variant in event.variants:
                self._ready(event.worker_id, worker, variant, now_s)
            for variant in [v for v, ready in worker.variants.items() if ready and v not in event.variants]:
                self._unload(event.worker_id, worker, variant, now_s)
        elif worker is None:
            return
        elif isinstance(event, BatchFinished):
            self.monitor.batch_finished((event.worker_id, event.variant), now_s, rows=event.rows,
                                        latency_ms=event.compute_ms)
        elif isinstance(event, VariantLoaded):
            self._ready(event.worker_id, worker, event.variant, now_s)
        elif isinstance(event, VariantUnloaded):
            self._unload(event.worker_id, worker, event.variant, now_s)

    def expect(self, actions: ScaleActions, now_s: float) -> None:
        """Count what was just asked for, so the next poll does not ask again."""
        for stop in actions.stop:
            self._forget(stop.worker_id, now_s)
        for unload in actions.unloads:
            if unload.worker_id in self.workers:
                self._unload(unload.worker_id, self.workers[unload.worker_id], unload.variant, now_s)
        for start in actions.start:
            self.workers[start.worker_id] = _Worker(start.device, False, now_s,
                                                    variants={i.variant: False for i in start.instances},
                                                    applications={i.variant: i.application for i in start.instances})
        for load in actions.loads:
            worker = self.workers.get(load.worker_id)
            if worker is not None and load.variant not in worker.variants:
                worker.variants[load.variant] = False
                worker.applications[load.variant] = load.application

    # -- the state ------------------------------------------------------------------------------
    def expire(self, now_s: float) -> list[str]:
        """Forget workers gone silent, and asked-for ones that never reported (they failed to start);
        the caller stops what may be left of them."""
        gone = [w for w, rec in self.workers.items() if now_s - rec.last_seen_s > self.silent_after_s
                + (0.0 if rec.ready else self.catalogue.worker_type[rec.device].startup_s)]
        for worker_id in gone:
            self._forget(worker_id, now_s)
        return gone

    def state(self, now_s: float) -> AutoscaleState:
        snapshot = self.monitor.snapshot(now_s)
        return AutoscaleState(at_s=now_s, workers=tuple(self._status(w, rec, snapshot)
                                                        for w, rec in sorted(self.workers.items())),
                              demand_qps=dict(self.demand_qps))

    def _status(self, worker_id: str, worker: _Worker, snapshot: MonitorSnapshot) -> WorkerStatus:
        instances = []
        for variant, ready in sorted(worker.variants.items()):
            application = self._application_of(worker, variant)
            if application is None:
                continue
            report = snapshot.instances.get((worker_id, variant)) if ready else None
            instances.append(InstanceStatus(variant, application, ready=ready,
                                            state=report.state if report else InstanceState.ACTIVE,
                                            load_qps=report.load_qps if report else 0.0))
        seen = snapshot.workers.get(worker_id)
        return WorkerStatus(worker_id, worker.device, ready=worker.ready,
                            utilization=seen.utilization if seen is not None else 0.0, instances=tuple(instances))

    # -- bookkeeping ----------------------------------------------------------------------------
    def _application_of(self, worker: _Worker, variant: str) -> str | None:
        asked = worker.applications.get(variant)
        if asked is not None:
            return asked
        serves = self._serves.get((variant, worker.device))
        return serves[0] if serves else None

    def _ready(self, worker_id: str, worker: _Worker, variant: str, now_s: float) -> None:
        """The worker holds `variant`: the monitor watches it from now on (once)."""
        if worker.variants.get(variant):
            return
        worker.variants[variant] = True
        option = self.catalogue.option.get((variant, worker.device))
        application = self._application_of(worker, variant)
        slo_ms = self.catalogue.application[application].slo_ms if application is not None else None
        self.monitor.instance_loaded((worker_id, variant), now_s, worker_id=worker_id, variant=variant,
                                     device=worker.device, profile=option.record if option else None,
                                     slo_ms=slo_ms, application=application)

    def _unload(self, worker_id: str, worker: _Worker, variant: str, now_s: float) -> None:
        worker.variants.pop(variant, None)
        worker.applications.pop(variant, None)
        self.monitor.instance_unloaded((worker_id, variant), now_s)

    def _forget(self, worker_id: str, now_s: float) -> None:
        self.workers.pop(worker_id, None)
        self.monitor.worker_lost(worker_id, now_s)
