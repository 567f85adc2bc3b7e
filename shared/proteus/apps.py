"""Query types (applications), their model family, SLO and variants, as planner and router see them.

Proteus has one query type per application; each is served by the variants of one model family, and
accuracy is normalized by the family's most accurate variant (the paper's 80-100 % scale).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.profiles.format import ProfileSet

#: the paper's SLO rule: this multiple of the fastest variant's batch-1 latency on a CPU
SLO_MULTIPLE = 2.0


@dataclass(frozen=True, slots=True)
class Application:
    """One query type: its family's variants (most accurate first) and their normalized accuracy."""

    name: str
    family: str
    slo_ms: float
    variants: tuple[str, ...]
    #: accuracy / the family's best, in (0, 1]; 1 for every variant when none has an accuracy
    accuracy: tuple[float, ...]


def family_accuracy(profiles: ProfileSet, family: str) -> dict[str, float]:
    """Normalized accuracy of each variant of ``family``, most accurate first.

    Variants without an accuracy are left out when others have one (an accuracy-scaling planner
    cannot rank them); when none has one, all count as 1.

    Examples
    --------
    >>> from shared.profiles.format import ProfileSet
    >>> ps = ProfileSet.load("profiles/efficientnet-lite.json")
    >>> {v: round(a, 4) for v, a in family_accuracy(ps, "efficientnet-lite").items()}
    {'efficientnet-lite2': 1.0, 'efficientnet-lite1': 0.9884, 'efficientnet-lite0': 0.9678}
    """
    raw: dict[str, float | None] = {}
    for p in profiles.variants_of(family):
        raw.setdefault(p.variant, p.accuracy)
    if not raw:
        raise ValueError(f"no profiled variant of family {family!r}")
    known = {v: a for v, a in raw.items() if a is not None}
    if not known:
        return {v: 1.0 for v in sorted(raw)}
    best = max(known.values())
    return {v: a / best for v, a in sorted(known.items(), key=lambda kv: (-kv[1], kv[0]))}


def default_slo_ms(profiles: ProfileSet, family: str) -> float:
    """``profiles.slo_ms[family]``, else the paper's rule: 2 x the fastest batch-1 CPU latency."""
    if family in profiles.slo_ms:
        return float(profiles.slo_ms[family])
    kinds = {d.name: d.kind for d in profiles.devices}
    variants = profiles.variants_of(family)
    cpu = [p for p in variants if kinds.get(p.device) == "cpu"] or variants
    return SLO_MULTIPLE * min(p.latency_ms(1) for p in cpu)


def resolve_applications(
    profiles: ProfileSet,
    applications: Mapping[str, str] | None = None,
    slo_ms: Mapping[str, float] | None = None,
) -> dict[str, Application]:
    """``applications`` (app -> family; default one app per profiled family, named after it) resolved.

    ``slo_ms`` gives an app's SLO; default `default_slo_ms` of its family.
    """
    if applications is None:
        applications = {f: f for f in dict.fromkeys(p.family for p in profiles.variants)}
    if not applications:
        raise ValueError("`applications` must name at least one application")
    unknown = set(slo_ms or {}) - set(applications)
    if unknown:
        raise ValueError(f"`slo_ms` names unknown applications {sorted(unknown)}")
    out = {}
    for name, family in applications.items():
        accuracy = family_accuracy(profiles, family)
        slo = float((slo_ms or {}).get(name, default_slo_ms(profiles, family)))
        if not slo > 0:
            raise ValueError(f"`slo_ms` of {name!r} must be > 0, got {slo}")
        out[name] = Application(name, family, slo, tuple(accuracy), tuple(accuracy.values()))
    return out
