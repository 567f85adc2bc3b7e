"""What can be served: applications, their model families, the variants' profiles.

The scheduler asks it to turn a ``Query`` into candidate variants, or a rejection with a reason.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.profiles import ProfileSet, VariantProfile
from shared.profiles.measured import with_measured

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
        """The same catalogue with the latencies real workers measured on their machines
        (`shared.profiles.measured.with_measured`)."""
        profiles = with_measured(self.profiles, measured, prices)
        return self if profiles is self.profiles else Catalogue(profiles, self.applications)

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
