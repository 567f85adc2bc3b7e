"""What can be served: applications, their model families, the variants' profiles.

The scheduler asks it to turn a ``Query`` into candidate variants, or a rejection with a reason.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.profiles import DeviceType, ProfileSet, VariantProfile

if TYPE_CHECKING:
    from schemas import MeasuredLatency
    from shared.settings import Settings


class QueryRejected(Exception):
    """The query cannot be served as asked; ``str(exc)`` is the reason the client sees."""


@dataclass(frozen=True, slots=True)
class Resolution:
    #: variants that may serve the query, most accurate first
    candidates: tuple[str, ...]
    #: set when the query's goals were relaxed (copied into its result)
    note: str | None = None


class Catalogue:
    def __init__(self, profiles: ProfileSet, applications: Mapping[str, list[str]]) -> None:
        #: every profile the catalogue knows, as one set (policies are built from it)
        self.profiles = profiles
        self._profiles: dict[str, list[VariantProfile]] = {}
        for profile in profiles.variants:
            self._profiles.setdefault(profile.variant, []).append(profile)
        self._families: dict[str, list[str]] = {}
        for variant, profiles in self._profiles.items():
            self._families.setdefault(profiles[0].family, []).append(variant)
        self.applications = {app: list(families) for app, families in applications.items()}

    @classmethod
    def from_settings(cls, settings: "Settings") -> "Catalogue":
        from shared.profiles.sources import load_profile_source, merge

        sets = [load_profile_source(name, settings) for name in settings.profile_sources]
        return cls(merge(sets, source=" + ".join(settings.profile_sources)), settings.applications)

    def with_measured(self, measured: Mapping[tuple[str, str], "MeasuredLatency"],
                      prices: Mapping[str, float]) -> "Catalogue":
        """The same catalogue with the latencies real workers measured on their machines: ``measured``
        maps (variant, device key) to what a worker of that device announced, ``prices`` a device key to
        the $/h its workers announced.

        A measured (variant, device) keeps its profile's other fields (accuracy, inputs, memory) and takes
        the measured batches; a larger batch its profile has and the measurement left out is that
        profile's latency scaled by measured / profiled at the largest batch measured. A device no profile
        names (a machine measured nowhere before) starts from the variant's profile on another device,
        scaled the same way. A variant the catalogue does not know is left out: its family and accuracy
        come from a profile, not from a measurement.
        """
        if not measured:
            return self
        replaced: dict[tuple[str, str], VariantProfile] = {}
        for (variant, device), latency in measured.items():
            profiles = self._profiles.get(variant)
            if not profiles:
                continue
            base = next((p for p in profiles if p.device == device), profiles[0])
            replaced[variant, device] = _measured_profile(base, device, latency)
        devices = {d.name: d for d in self.profiles.devices}
        for _, device in replaced:
            if device not in devices:
                kind = "gpu" if device.startswith("gpu-") else "cpu"
                devices[device] = DeviceType(name=device, kind=kind, price_per_hour=prices.get(device, 0.0))
        variants = [p for p in self.profiles.variants if (p.variant, p.device) not in replaced]
        profiles = ProfileSet(source=f"{self.profiles.source} + measured by workers", devices=list(devices.values()),
                              slo_ms=self.profiles.slo_ms, variants=[*variants, *replaced.values()])
        return Catalogue(profiles, self.applications)

    def profiles_of(self, variant: str) -> list[VariantProfile]:
        return self._profiles.get(variant, [])

    def profile(self, variant: str, device: str) -> VariantProfile | None:
        return next((p for p in self._profiles.get(variant, []) if p.device == device), None)

    def family_of(self, variant: str) -> str:
        return self._profiles[variant][0].family

    def variants_of(self, family: str) -> list[str]:
        return list(self._families.get(family, []))

    def accuracy(self, variant: str) -> float | None:
        return self._profiles[variant][0].accuracy

    def resolve(self, application: str, model: str | None, batch_size: int, slo_ms: float,
                accuracy_floor: float | None) -> "Resolution":
        """Candidate variants for a query, most accurate first; raises ``QueryRejected``.

        When no variant reaches the accuracy floor, the most accurate one is offered instead and the
        resolution says so (INFaaS suggests the closest variant rather than failing).
        """
        families = self.applications.get(application)
        if families is None:
            raise QueryRejected(f"unknown application {application!r}")
        if model is None:
            variants = [v for family in families for v in self._families.get(family, [])]
            if not variants:
                raise QueryRejected(f"application {application!r} has no model with a profile yet")
            model = f"application {application}"
        elif model in self._families:
            if model not in families:
                raise QueryRejected(f"model family {model!r} is not registered for application {application!r}")
            variants = self._families[model]
        elif model in self._profiles:
            if self.family_of(model) not in families:
                raise QueryRejected(f"variant {model!r} is not registered for application {application!r}")
            variants = [model]
        else:
            raise QueryRejected(f"unknown model {model!r}")
        by_accuracy = sorted(variants, key=lambda v: -(self.accuracy(v) or 0.0))
        note = None
        if accuracy_floor is not None:
            meeting = [v for v in by_accuracy if (self.accuracy(v) or 0.0) >= accuracy_floor]
            if not meeting:
                closest = by_accuracy[0]
                note = (f"no variant of {model!r} reaches accuracy {accuracy_floor:g}; served the closest, "
                        f"{closest!r} (accuracy {self.accuracy(closest) or 0.0:.4g})")
                meeting = [closest]
            by_accuracy = meeting
        fastest = self._fastest_ms(by_accuracy, batch_size)
        if fastest is None:
            raise QueryRejected(f"batch_size {batch_size} exceeds what any variant of {model!r} is profiled for")
        if fastest > slo_ms:
            raise QueryRejected(
                f"SLO {slo_ms:g} ms is below the fastest possible latency {fastest:.3g} ms of {model!r} "
                f"at batch {batch_size}"
            )
        return Resolution(tuple(by_accuracy), note)

    def _fastest_ms(self, variants: list[str], batch_size: int) -> float | None:
        latencies = [
            p.latency_ms(batch_size)
            for v in variants
            for p in self._profiles[v]
            if batch_size <= max(p.batch_latency_ms)
        ]
        return min(latencies, default=None)


def _measured_profile(base: VariantProfile, device: str, measured: "MeasuredLatency") -> VariantProfile:
    latencies = dict(measured.batch_latency_ms)
    largest = max(latencies)
    reference = base.batch_latency_ms.get(largest)
    if reference is None:  # the profile has no such batch: scale by its nearest batch at or above it
        reference = base.latency_ms(largest) if largest <= max(base.batch_latency_ms) else None
    if reference is not None:
        scale = latencies[largest] / reference
        latencies.update({b: ms * scale for b, ms in base.batch_latency_ms.items() if b > largest})
    return base.model_copy(update={
        "device": device, "batch_latency_ms": dict(sorted(latencies.items())), "latency_samples_ms": None,
        "measured": True,
        "load_latency_ms": measured.load_latency_ms if measured.load_latency_ms is not None else base.load_latency_ms,
        "image_prepare_ms": measured.image_prepare_ms if measured.image_prepare_ms is not None
        else base.image_prepare_ms})
