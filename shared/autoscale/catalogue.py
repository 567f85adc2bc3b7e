"""What the autoscalers may run: worker (VM) types, model-variants with their resource needs, applications.

INFaaS (spec §2, §6.3) calls a variant on one hardware type ``v_ij`` (variant ``j`` of architecture ``i``).
Here that is a `VariantOption`: a `shared.infaas.records.VariantRecord` (profile on one device type) plus
what one loaded instance takes from its worker (``R^type_ij``) and what it costs (``C_ij``).

An instance's cost is its *dominant share* of the worker: ``price * max_t(need_t / capacity_t)``. A
one-vCPU instance on an 8-vCPU VM costs an eighth of the VM; an instance that needs the whole GPU costs
the whole VM. Summed over a full worker this is the worker's price, so the ILP's objective and the bill
agree when workers are packed.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property

from shared.infaas.records import Key, VariantRecord
from shared.profiles.format import ProfileSet, VariantProfile

__all__ = ["Application", "MachineCatalogue", "VariantOption", "WorkerType", "default_needs", "serving_catalogue",
           "whole_machine"]

#: the resource that measures a worker's compute utilization, per device kind
COMPUTE_RESOURCE = {"cpu": "vcpu", "gpu": "gpu"}


@dataclass(frozen=True, slots=True)
class WorkerType:
    """A machine type the VM-Autoscaler can start (one per `shared.profiles.format.DeviceType`)."""

    name: str
    kind: str
    price_per_hour: float
    #: resource totals of one machine, e.g. ``{"vcpu": 8, "memory_mb": 16384}``
    capacity: Mapping[str, float]
    #: seconds from the start request until the machine can load variants (paper §4.2.3: 20-30 s)
    startup_s: float = 25.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.price_per_hour) and self.price_per_hour >= 0):
            raise ValueError(f"`price_per_hour` of {self.name!r} must be finite and >= 0, got {self.price_per_hour}")
        if self.kind not in COMPUTE_RESOURCE:
            raise ValueError(f"`kind` of {self.name!r} must be one of {sorted(COMPUTE_RESOURCE)}, got {self.kind!r}")
        if self.capacity.get(self.compute, 0) <= 0:
            raise ValueError(f"`capacity` of {self.name!r} needs a positive {self.compute!r}")
        if not self.startup_s >= 0:
            raise ValueError(f"`startup_s` of {self.name!r} must be >= 0, got {self.startup_s}")
        object.__setattr__(self, "capacity", dict(self.capacity))

    @property
    def compute(self) -> str:
        """The resource whose busy share is the worker's utilization (``vcpu`` or ``gpu``)."""
        return COMPUTE_RESOURCE[self.kind]


@dataclass(frozen=True, slots=True)
class VariantOption:
    """``v_ij``: a variant's profile on one worker type, what an instance needs and costs."""

    record: VariantRecord
    #: the model architecture; upgrades and downgrades stay within it (paper §4.2.2)
    architecture: str
    #: ``R^type_ij``: resources one instance reserves on its worker
    needs: Mapping[str, float]
    #: ``C_ij`` in $/h: the instance's dominant share of its worker's price
    cost_per_hour: float

    @property
    def key(self) -> Key:
        return self.record.key

    @property
    def variant(self) -> str:
        return self.record.variant

    @property
    def device(self) -> str:
        return self.record.device

    @property
    def load_s(self) -> float:
        """``T^load_ij`` in seconds (0 when not profiled)."""
        return (self.record.load_latency_ms or 0.0) / 1000.0

    def batch_limit(self, slo_ms: float, latency_budget: float) -> int:
        """The largest profiled batch whose latency fits ``latency_budget * slo_ms`` (at least 1).

        A query may wait for the batch in service before its own runs, so a batch gets only part of the
        SLO; 0.5 lets a query wait out one full batch and still finish in time.
        """
        limit = 1
        for batch, ms in self.record.batch_latency_ms:
            if batch <= self.record.max_rows and ms <= latency_budget * slo_ms:
                limit = batch
        return limit

    def peak_qps(self, slo_ms: float, latency_budget: float) -> float:
        """``Q_ij``: rows/s one instance sustains with batches within the latency budget (spec §12.5)."""
        return self.record.peak_qps(latency_budget * slo_ms)

    def meets_slo(self, slo_ms: float, latency_budget: float) -> bool:
        """Constraint (2): a single query fits the budget (``T^inf(1) <= budget * S``)."""
        latency = self.record.latency_ms(1)
        return latency is not None and latency <= latency_budget * slo_ms


@dataclass(frozen=True, slots=True)
class Application:
    """An application's queries: their family, SLO and accuracy floor, and which options may serve them.

    `options` pins the (variant, device) pairs allowed (the static-variant baselines); ``None`` allows
    every option of `family` that meets the accuracy floor.
    """

    name: str
    family: str
    slo_ms: float
    accuracy_floor: float | None = None
    options: tuple[Key, ...] | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slo_ms) and self.slo_ms > 0):
            raise ValueError(f"`slo_ms` of {self.name!r} must be finite and > 0, got {self.slo_ms}")
        if self.accuracy_floor is not None and not 0.0 <= self.accuracy_floor <= 1.0:
            raise ValueError(f"`accuracy_floor` of {self.name!r} must be in [0, 1], got {self.accuracy_floor}")
        if self.options is not None:
            object.__setattr__(self, "options", tuple(tuple(k) for k in self.options))


def default_needs(profile: VariantProfile, worker: WorkerType) -> dict[str, float]:
    """One unit of the worker's compute resource (a vCPU or the GPU) plus the profiled peak memory."""
    needs = {worker.compute: 1.0}
    if profile.peak_memory_mb and "memory_mb" in worker.capacity:
        needs["memory_mb"] = float(profile.peak_memory_mb)
    return needs


def whole_machine(profile: VariantProfile, worker: WorkerType) -> dict[str, float]:
    """An instance is the machine's worker process, which runs one batch at a time: all of its compute.

    Several one-vCPU instances on one serial process would promise capacity the process cannot give, and
    the autoscaler would chase it with loads and unloads (the churn ``make bench-autoscale`` measured)."""
    return {worker.compute: float(worker.capacity[worker.compute])}


def serving_catalogue(profiles: ProfileSet, applications: Iterable[Application], *,
                      startup_s: float = 0.0) -> MachineCatalogue:
    """What the autoscaler service runs and ``make bench-cost`` simulates: every profiled device type as a
    machine whose one worker process is one instance (`whole_machine`), booting in its profile's
    ``startup_s`` (`startup_s` where the profile does not say).

    >>> from shared.profiles.format import DeviceType
    >>> vm = DeviceType(name="cpu-vm", kind="cpu", price_per_hour=0.3, startup_s=10.0)
    >>> lite = VariantProfile(variant="m", family="f", device="cpu-vm", batch_latency_ms={1: 10.0}, max_batch=1)
    >>> profiles = ProfileSet(source="doc", devices=[vm], variants=[lite])
    >>> cat = serving_catalogue(profiles, [Application("app", "f", 100.0)])
    >>> cat.worker_types[0].startup_s, cat.options[0].cost_per_hour
    (10.0, 0.3)
    """
    workers = [WorkerType(d.name, d.kind, d.price_per_hour, {"vcpu": 1.0} if d.kind == "cpu" else {"gpu": 1.0},
                          startup_s if d.startup_s is None else d.startup_s) for d in profiles.devices]
    return MachineCatalogue.from_profiles(profiles, workers, applications, needs=whole_machine)


@dataclass(frozen=True)
class MachineCatalogue:
    """Machine (worker) types with their prices, the variant options that run on them, and the applications
    served: what an autoscaler may start and load (the serving `shared.catalogue.Catalogue` resolves queries)."""

    worker_types: tuple[WorkerType, ...]
    options: tuple[VariantOption, ...]
    applications: tuple[Application, ...]
    #: where the numbers come from, for reports
    source: str = ""

    def __post_init__(self) -> None:
        _catalogue_iv(self)

    @cached_property
    def worker_type(self) -> dict[str, WorkerType]:
        return {w.name: w for w in self.worker_types}

    @cached_property
    def option(self) -> dict[Key, VariantOption]:
        return {o.key: o for o in self.options}

    @cached_property
    def application(self) -> dict[str, Application]:
        return {a.name: a for a in self.applications}

    @cached_property
    def _eligible(self) -> dict[str, tuple[VariantOption, ...]]:
        out = {}
        for app in self.applications:
            floor = -math.inf if app.accuracy_floor is None else app.accuracy_floor
            out[app.name] = tuple(
                o for o in self.options
                if o.record.family == app.family and o.record.accuracy_or_zero >= floor
                and (app.options is None or o.key in app.options))
        return out

    def eligible(self, application: str, latency_budget: float) -> tuple[VariantOption, ...]:
        """Options that may serve `application` and meet its SLO (constraints (2) and accuracy)."""
        app = self.application[application]
        return tuple(o for o in self._eligible[application] if o.meets_slo(app.slo_ms, latency_budget))

    def applications_by_option(self, latency_budget: float) -> dict[tuple[str, str], list[str]]:
        """``(variant, device)`` -> the applications it may serve within their SLO, in catalogue order: whom an
        instance loaded without being asked for serves."""
        serves: dict[tuple[str, str], list[str]] = {}
        for app in self.applications:
            for option in self.eligible(app.name, latency_budget):
                serves.setdefault(option.key, []).append(app.name)
        return serves

    def with_latencies_of(self, profiles: ProfileSet) -> MachineCatalogue:
        """The same machines and options, each option's latencies as ``profiles`` give them for its variant
        and worker type (real workers announced what they measured, `shared.profiles.measured`); an option
        they do not profile stays as it was."""
        options = []
        for option in self.options:
            profile = profiles.find(option.variant, option.device)
            latencies = tuple(profile.batch_latency_ms.items()) if profile is not None else None
            if latencies is None or latencies == option.record.batch_latency_ms:
                options.append(option)
                continue
            record = replace(option.record, batch_latency_ms=latencies, load_latency_ms=profile.load_latency_ms)
            options.append(replace(option, record=record))
        return MachineCatalogue(self.worker_types, tuple(options), self.applications, self.source)

    def with_applications(self, applications: Iterable[Application]) -> MachineCatalogue:
        """The same hardware and variants serving other applications (e.g. pinned baselines)."""
        return MachineCatalogue(self.worker_types, self.options, tuple(applications), self.source)

    @classmethod
    def from_profiles(
        cls,
        profiles: ProfileSet,
        worker_types: Iterable[WorkerType],
        applications: Iterable[Application],
        *,
        architecture: Callable[[VariantProfile], str] | None = None,
        needs: Callable[[VariantProfile, WorkerType], Mapping[str, float]] | None = None,
    ) -> MachineCatalogue:
        """Options for every profile whose device is one of `worker_types`.

        Parameters
        ----------
        profiles : ProfileSet
            The one profile format; each profile's ``device`` names a worker type.
        worker_types, applications
        architecture : callable, optional
            Profile -> architecture name; default the variant name (the same model on two devices is
            one architecture, so moving between them is an upgrade or downgrade).
        needs : callable, optional
            Profile, worker type -> resources per instance; default `default_needs`.
        """
        types = {w.name: w for w in worker_types}
        architecture = architecture or (lambda p: p.variant)
        needs = needs or default_needs
        devices = profiles.device_by_name
        options = []
        for profile in profiles.variants:
            worker = types.get(profile.device)
            if worker is None:
                continue
            record = VariantRecord.from_profile(profile, devices.get(profile.device))
            need = dict(needs(profile, worker))
            share = max(need.get(r, 0.0) / worker.capacity[r] for r in need) if need else 0.0
            options.append(VariantOption(record, architecture(profile), need, worker.price_per_hour * share))
        return cls(tuple(types.values()), tuple(options), tuple(applications), profiles.source)


def _catalogue_iv(catalogue: MachineCatalogue) -> None:
    types = {w.name: w for w in catalogue.worker_types}
    if len(types) != len(catalogue.worker_types):
        raise ValueError("`worker_types` must have unique names")
    keys = set()
    for option in catalogue.options:
        worker = types.get(option.device)
        if worker is None:
            raise ValueError(f"`options`: {option.key} runs on an unknown worker type")
        for resource, amount in option.needs.items():
            if amount < 0 or amount > worker.capacity.get(resource, 0.0):
                raise ValueError(f"`options`: {option.key} needs {amount} {resource}; {worker.name!r} has "
                                 f"{worker.capacity.get(resource, 0.0)}")
        if option.key in keys:
            raise ValueError(f"`options`: {option.key} appears twice")
        keys.add(option.key)
    names = [a.name for a in catalogue.applications]
    if len(set(names)) != len(names):
        raise ValueError("`applications` must have unique names")
