"""The monitoring daemon of INFaaS (spec §4, checklist 9): worker events in, metadata store out.

Workers here publish events instead of writing the metadata store themselves, so the registry service
(live) and the simulator's INFaaS scenarios (virtual time) turn them into calls on the one INFaaS
monitor (`shared.infaas.monitor.InfaasMonitor`): heartbeats say which variants each worker holds and
how busy it is, finished batches their rows and compute time. Every
`flush` (every ~2 s) writes the monitor's snapshot, per-instance QPS, mean latency and Fig. 4 state and
per-worker utilization, to the metadata store, and forgets workers stopped or silent. Time comes in as
``now_s``; nothing here reads a clock or Kafka.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas import BatchFinished, VariantLoaded, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.infaas.metadata import InMemoryMetadataStore, MetadataStore
from shared.infaas.monitor import InfaasMonitor, MonitorConfig
from shared.profiles.format import ProfileSet

__all__ = ["InstanceMonitor"]


@dataclass
class _Worker:
    device: str
    loaded: set[str]
    last_seen_s: float


@dataclass
class InstanceMonitor:
    """Feeds worker events to an `InfaasMonitor` and writes its snapshots to the metadata store."""

    store: MetadataStore
    #: device type -> kind (``cpu``, ``gpu``), from the profile sets; unknown types are ``unknown``
    device_kinds: Mapping[str, str]
    #: a worker silent this long is gone (its instances become Inactive)
    worker_timeout_s: float
    last_flush_s: float
    config: MonitorConfig = field(default_factory=MonitorConfig)
    #: model family -> its default SLO (ms), for the instances' peak rate; the registry adds new models'
    family_slo_ms: dict[str, float] = field(default_factory=dict)
    monitor: InfaasMonitor = field(init=False)
    _workers: dict[str, _Worker] = field(default_factory=dict)
    _load_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    _stopped: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.monitor = InfaasMonitor(self.config, start_s=self.last_flush_s)

    @classmethod
    def in_memory(cls, profiles: ProfileSet, *, worker_timeout_s: float, start_s: float,
                  config: MonitorConfig) -> "InstanceMonitor":
        """A daemon over an in-memory store seeded with ``profiles``: the simulator's, or a dispatch policy's
        own where no registry process runs."""
        store = InMemoryMetadataStore()
        store.put_profiles(profiles)
        return cls(store, {d.name: d.kind for d in profiles.devices}, worker_timeout_s, start_s, config=config,
                   family_slo_ms=dict(profiles.slo_ms))

    def profiles_changed(self, profiles: ProfileSet) -> None:
        """A real worker measured its machine: the store holds those profiles from now on, and the monitor
        judges its instances by them from the next `flush`."""
        self.store.put_profiles(profiles)
        self.device_kinds = {**self.device_kinds, **{d.name: d.kind for d in profiles.devices}}

    def observe(self, event: object, now_s: float) -> None:
        handler = _EVENT_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, now_s)

    def _heartbeat(self, event: WorkerHeartbeat, now_s: float) -> None:
        worker_id = event.worker_id
        old = self._workers.get(worker_id)
        previous = old.loaded if old is not None and old.device == event.device else set()
        self._workers[worker_id] = _Worker(event.device, set(event.variants), now_s)
        self._stopped.discard(worker_id)
        self.monitor.worker_seen(worker_id, now_s, device=event.device,
                                 device_kind=self.device_kinds.get(event.device, "unknown"),
                                 busy_fraction=event.busy_fraction)
        for variant in previous - set(event.variants):
            self.monitor.instance_unloaded((worker_id, variant), now_s)
        for variant in set(event.variants) - previous:
            self._load(worker_id, variant, now_s)

    def _batch_finished(self, event: BatchFinished, now_s: float) -> None:
        self.monitor.batch_finished((event.worker_id, event.variant), now_s, rows=event.rows,
                                    latency_ms=event.compute_ms)

    def _loaded(self, event: VariantLoaded, now_s: float) -> None:
        self._load_ms[(event.variant, event.worker_id)] = event.load_ms
        worker = self._workers.get(event.worker_id)
        if worker is not None:
            worker.loaded.add(event.variant)
            self._load(event.worker_id, event.variant, now_s)

    def _unloaded(self, event: VariantUnloaded, now_s: float) -> None:
        worker = self._workers.get(event.worker_id)
        if worker is not None:
            worker.loaded.discard(event.variant)
            self.monitor.instance_unloaded((event.worker_id, event.variant), now_s)

    def _worker_stopped(self, event: WorkerStopped, now_s: float) -> None:
        self._stopped.add(event.worker_id)

    def _load(self, worker_id: str, variant: str, now_s: float, *, read_profile: bool = False) -> None:
        """Tell the monitor the instance serves. Its profile is read from the store only at `flush` (the
        monitor needs it only for snapshots), where a failing store is retried the next window."""
        device = self._workers[worker_id].device
        profile = self.store.get_variant(variant, device) if read_profile else None
        slo_ms = self.family_slo_ms.get(profile.family) if profile is not None else None
        self.monitor.instance_loaded((worker_id, variant), now_s, worker_id=worker_id, variant=variant,
                                     device=device, profile=profile, slo_ms=slo_ms,
                                     load_latency_ms=self._load_ms.get((variant, worker_id)))

    def flush(self, now_s: float) -> None:
        """Write the window's worker and instance state to the store and start a new window."""
        gone = [w for w, seen in self._workers.items()
                if w in self._stopped or now_s - seen.last_seen_s > self.worker_timeout_s]
        for worker_id in gone:
            self.store.remove_worker(worker_id)
            self.monitor.worker_lost(worker_id, now_s)
            del self._workers[worker_id]
            self._stopped.discard(worker_id)
        for worker_id, seen in self._workers.items():
            for variant in seen.loaded:
                self._load(worker_id, variant, now_s, read_profile=True)
        snapshot = self.monitor.snapshot(now_s)
        for worker in snapshot.workers.values():
            self.store.put_worker(worker)
        for record in snapshot.records():
            self.store.put_instance(record)  # an Inactive one is removed
        self.last_flush_s = now_s


_EVENT_HANDLERS = {
    WorkerHeartbeat: InstanceMonitor._heartbeat,
    BatchFinished: InstanceMonitor._batch_finished,
    VariantLoaded: InstanceMonitor._loaded,
    VariantUnloaded: InstanceMonitor._unloaded,
    WorkerStopped: InstanceMonitor._worker_stopped,
}
