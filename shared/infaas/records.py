"""The plain data INFaaS's metadata store holds (spec §7), shared by the stores, the selector and dispatch.

Static data is one `VariantRecord` per (variant, device): a variant's profile on one device type.
Dynamic data is one `InstanceRecord` per loaded (variant, worker) pair and one `WorkerRecord` per
worker. `MetadataSnapshot` is everything at once (what the scheduler reads every ~2 s); `FleetState` is
the small dynamic part getVariant needs per query.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from shared.infaas.state import InstanceState
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

__all__ = ["MAX_DISPATCH_UTILIZATION", "FleetState", "InstanceRecord", "Key", "MetadataSnapshot", "VariantRecord",
           "WorkerRecord"]

#: a variant on a device type: the unit selection picks (a "model-variant" includes its hardware)
Key = tuple[str, str]

#: workers busier than this take no query and no new variant: the authors' code blacklists workers above
#: 80% CPU or GPU utilization for dispatch (spec §12.15 [REF]), the VM-Autoscaler's threshold (§6.5)
MAX_DISPATCH_UTILIZATION = 0.8


@dataclass(frozen=True, slots=True)
class VariantRecord:
    """Static profile of one variant on one device type (INFaaS's ``<var>-info`` hash)."""

    variant: str
    family: str
    device: str
    device_kind: str = "cpu"
    #: price of the device type ($/h); ranks Active variants by cost (spec §12.2)
    price_per_hour: float = 0.0
    #: top-1 on the validation set; ``None`` counts as 0 (as the scheduler's catalogue does)
    accuracy: float | None = None
    #: ((batch size, ms), ...) ascending by batch size
    batch_latency_ms: tuple[tuple[int, float], ...] = ()
    load_latency_ms: float | None = None
    peak_memory_mb: float | None = None
    max_batch: int = 1

    def __post_init__(self) -> None:
        pairs = tuple(sorted((int(b), float(ms)) for b, ms in self.batch_latency_ms))
        if not pairs or any(b < 1 or not (ms > 0 and math.isfinite(ms)) for b, ms in pairs):
            raise ValueError(f"`batch_latency_ms` of {self.variant!r} needs batch sizes >= 1 and latencies > 0")
        if self.max_batch < 1:
            raise ValueError(f"`max_batch` of {self.variant!r} must be >= 1, got {self.max_batch}")
        object.__setattr__(self, "batch_latency_ms", pairs)

    @property
    def key(self) -> Key:
        return (self.variant, self.device)

    @property
    def max_rows(self) -> int:
        """The largest batch this variant may run: its max batch, within its profile."""
        return min(self.max_batch, self.batch_latency_ms[-1][0])

    @property
    def accuracy_or_zero(self) -> float:
        return 0.0 if self.accuracy is None else self.accuracy

    def latency_ms(self, rows: int) -> float | None:
        """Profiled latency of a batch of `rows` (smallest profiled batch >= rows); ``None`` past `max_rows`."""
        if rows > self.max_rows:
            return None
        for batch, ms in self.batch_latency_ms:
            if batch >= rows:
                return ms
        return None

    def peak_qps(self, slo_ms: float | None = None) -> float:
        """Saturation throughput in rows/s: ``max_b b * 1000 / T(b)`` over batches within `slo_ms` (§12.5)."""
        rates = [b * 1000.0 / ms for b, ms in self.batch_latency_ms
                 if b <= self.max_rows and (slo_ms is None or ms <= slo_ms)]
        return max(rates, default=0.0)

    @classmethod
    def from_profile(cls, profile: VariantProfile, device: DeviceType | None = None) -> "VariantRecord":
        return cls(
            variant=profile.variant, family=profile.family, device=profile.device,
            device_kind=device.kind if device else "cpu",
            price_per_hour=device.price_per_hour if device else 0.0, accuracy=profile.accuracy,
            batch_latency_ms=tuple(profile.batch_latency_ms.items()), load_latency_ms=profile.load_latency_ms,
            peak_memory_mb=profile.peak_memory_mb, max_batch=profile.max_batch)


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """Dynamic state of one loaded variant on one worker, written by the monitoring loop every ~2 s."""

    variant: str
    device: str
    worker_id: str
    state: InstanceState
    #: rows served per second over the last monitoring window
    qps: float = 0.0
    #: mean batch latency over the last window (ms); ``None`` when no batch finished
    avg_latency_ms: float | None = None
    load_latency_ms: float | None = None
    updated_s: float = 0.0

    @property
    def key(self) -> Key:
        return (self.variant, self.device)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    worker_id: str
    device: str
    device_kind: str
    #: fraction of the last heartbeat interval spent computing (0..1)
    utilization: float
    updated_s: float = 0.0


@dataclass(frozen=True, slots=True)
class FleetState:
    """What getVariant needs of the fleet: where each Active (variant, device) runs least loaded, and
    which worker of each device type is least utilized.

    Overloaded and Interfered instances are absent from `active` by construction, so selection can never
    return them while an Active instance matches; so are workers above `MAX_DISPATCH_UTILIZATION` (from
    `active` and `placement`) when built by `from_records`.
    """

    #: (variant, device) -> the least-loaded worker with an Active instance of it
    active: Mapping[Key, str] = field(default_factory=dict)
    #: device type -> the worker of that type with the lowest utilization
    placement: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_records(cls, instances: Iterable[InstanceRecord], workers: Iterable[WorkerRecord], *,
                     max_utilization: float = MAX_DISPATCH_UTILIZATION) -> "FleetState":
        """Least loaded = lowest QPS (ties: worker id); lowest utilization likewise (spec §12.6); workers
        above `max_utilization` are skipped (an instance on a worker without a record is kept)."""
        workers = list(workers)
        busy = {w.worker_id for w in workers if w.utilization > max_utilization}
        active: dict[Key, tuple[float, str]] = {}
        for inst in instances:
            if inst.state is InstanceState.ACTIVE and inst.worker_id not in busy:
                rank = (inst.qps, inst.worker_id)
                if inst.key not in active or rank < active[inst.key]:
                    active[inst.key] = rank
        placement: dict[str, tuple[float, str]] = {}
        for worker in workers:
            rank = (worker.utilization, worker.worker_id)
            if worker.worker_id in busy:
                continue
            if worker.device not in placement or rank < placement[worker.device]:
                placement[worker.device] = rank
        return cls(active={k: w for k, (_, w) in active.items()},
                   placement={d: w for d, (_, w) in placement.items()})


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """All metadata at one instant: what `InfaasDispatch.update_from_metadata` consumes."""

    variants: tuple[VariantRecord, ...] = ()
    #: application id -> model families registered under it
    applications: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    instances: tuple[InstanceRecord, ...] = ()
    workers: tuple[WorkerRecord, ...] = ()
    at_s: float = 0.0

    @classmethod
    def from_profiles(cls, profiles: ProfileSet, applications: Mapping[str, Iterable[str]] | None = None,
                      **dynamic: object) -> "MetadataSnapshot":
        """Static records from a `ProfileSet` (e.g. for the simulator), plus any dynamic fields."""
        devices = profiles.device_by_name
        records = tuple(VariantRecord.from_profile(p, devices.get(p.device)) for p in profiles.variants)
        apps = {app: tuple(families) for app, families in (applications or {}).items()}
        return cls(variants=records, applications=apps, **dynamic)

    def fleet(self, *, max_utilization: float = MAX_DISPATCH_UTILIZATION) -> FleetState:
        return FleetState.from_records(self.instances, self.workers, max_utilization=max_utilization)
