"""`ProteusPlanner`: model selection, placement and query assignment for a fixed fleet (Proteus §4).

Each call builds the MILP of `shared.proteus.milp` from the profiles and the demand it is given, and
turns the solution into a `FleetPlan`: one `Placement` per device that hosts a variant, and per
application the share of its queries each variant gets. Within a variant, the router splits that
share over the devices hosting it in proportion to their capacity (`ProteusDispatch`), which is one
of the MILP's optimal per-device assignments.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.policy.base import FleetPlan, LoadSnapshot, Placement, Planner, PlanStatus
from shared.profiles.format import ProfileSet
from shared.proteus.apps import Application, resolve_applications
from shared.proteus.capacity import device_memory, peak_throughput
from shared.proteus.milp import Allocation, AllocationProblem, solve_allocation

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, eq=False)
class PlanningModel:
    """The fixed part of the MILP: device types and counts, variants, capacities ``P[t, m, q]``."""

    devices: tuple[str, ...]
    counts: np.ndarray
    variants: tuple[str, ...]
    accuracy: np.ndarray
    family: tuple[str, ...]
    applications: tuple[Application, ...]
    capacity: np.ndarray

    def problem(self, demand: np.ndarray, *, pinned: Mapping[str, Mapping[str, int]] | None = None) -> AllocationProblem:
        if pinned is None:
            return AllocationProblem(self.counts, self.accuracy, self.capacity, demand)
        families = sorted(set(self.family))
        group = np.array([families.index(f) for f in self.family])
        caps = np.array([[pinned.get(d, {}).get(f, 0) for f in families] for d in self.devices])
        return AllocationProblem(self.counts, self.accuracy, self.capacity, demand, group, caps)


def planning_model(
    profiles: ProfileSet,
    fleet: Mapping[str, int],
    applications: Mapping[str, Application],
    *,
    variants: Mapping[str, Sequence[str]] | None = None,
    batch_sizes: Iterable[int] | None = None,
    memory_mb: Mapping[str, float] | None = None,
) -> PlanningModel:
    """Capacities of every (device type, variant, application), from the SLO/2 rule.

    ``variants`` optionally restricts an application to some of its family's variants. A device type of
    ``fleet`` that no profile names (a real machine whose workers will announce what they measured,
    `shared.profiles.measured`) has no capacity until a profile set that names it.
    """
    if any(c < 0 for c in fleet.values()):
        raise ValueError(f"`fleet` counts must be >= 0, got {dict(fleet)}")
    sizes = None if batch_sizes is None else tuple(batch_sizes)
    names: list[str] = []
    accuracy: list[float] = []
    family: list[str] = []
    for app in applications.values():
        allowed = set(app.variants if variants is None or app.name not in variants else variants[app.name])
        if not allowed <= set(app.variants):
            raise ValueError(f"`variants` of {app.name!r} are not all in family {app.family!r}: {sorted(allowed)}")
        for v, a in zip(app.variants, app.accuracy):
            if v in allowed and v not in names:
                names.append(v)
                accuracy.append(a)
                family.append(app.family)
    devices = tuple(fleet)
    apps = tuple(applications.values())
    capacity = np.zeros((len(devices), len(names), len(apps)))
    profiled = {(p.variant, p.device): p for p in profiles.variants}
    for t, device in enumerate(devices):
        for m, v in enumerate(names):
            profile = profiled.get((v, device))
            if profile is None:
                continue
            for q, app in enumerate(apps):
                if app.family == family[m] and (variants is None or app.name not in variants or v in variants[app.name]):
                    capacity[t, m, q] = peak_throughput(profile, app.slo_ms, batch_sizes=sizes,
                                                        memory_mb=device_memory(memory_mb, device))
    return PlanningModel(devices, np.array([fleet[d] for d in devices], dtype=int), tuple(names),
                         np.array(accuracy), tuple(family), apps, capacity)


class ProteusPlanner(Planner):
    """Maximize effective accuracy while serving every application's demand (Eq. 1-7).

    Parameters
    ----------
    profiles : latency, accuracy and device prices.
    fleet : device type -> number of devices (default: one device of every profiled type).
    applications : application -> model family (default: one application per profiled family,
        named after it).
    slo_ms : application -> latency SLO (default: the family's ``profiles.slo_ms``, else twice the
        fastest variant's batch-1 latency on a CPU, the paper's rule).
    variants : application -> the variants it may use (default: the whole family); Clipper-HA/HT use
        one each.
    headroom : plan for ``headroom x`` demand (the paper's artifact uses 1.05; 1 = Eq. 6 exactly).
    degrade_step : when infeasible, demand is lowered by this fraction per step (status DEGRADED).
    fill_idle : give devices the MILP leaves idle the most accurate variant already routed for the
        application that is most loaded relative to its planned capacity (the artifact's "upgrade idle
        devices", restricted to routed variants so the extra capacity receives traffic).
    batch_sizes, memory_mb : allowed batch sizes and per-device-type memory for the capacity rule.
    time_limit_s, mip_rel_gap : HiGHS settings per solve. A relative gap of 1e-3 (0.1 % of the
        effective accuracy; the authors' artifact used 0.5) keeps solves well under a second where
        proving 1e-4 can take seconds on the paper's problem size.
    pinned : device type -> family -> devices of that type that may host that family (Sommelier).

    Examples
    --------
    >>> ps = ProfileSet.load("profiles/efficientnet-lite.json")
    >>> planner = ProteusPlanner(ps, fleet={"cpu-1t": 4}, slo_ms={"efficientnet-lite": 200.0})
    >>> plan = planner.plan(LoadSnapshot(at_s=0.0, arrival_rate_qps={"efficientnet-lite": 220.0}))
    >>> plan.status.value, len(plan.placements), sorted(plan.routing["efficientnet-lite"])
    ('optimal', 4, ['efficientnet-lite1', 'efficientnet-lite2'])
    """

    name = "proteus"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        fleet: Mapping[str, int] | None = None,
        applications: Mapping[str, str] | None = None,
        slo_ms: Mapping[str, float] | None = None,
        variants: Mapping[str, Sequence[str]] | None = None,
        headroom: float = 1.05,
        degrade_step: float = 0.05,
        fill_idle: bool = True,
        batch_sizes: Iterable[int] | None = None,
        memory_mb: Mapping[str, float] | None = None,
        time_limit_s: float | None = 30.0,
        mip_rel_gap: float = 1e-3,
        pinned: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.profiles = profiles
        self.fleet = dict(fleet) if fleet is not None else {d.name: 1 for d in profiles.devices}
        self.applications = resolve_applications(profiles, applications, slo_ms)
        self._model_options = {"variants": variants, "batch_sizes": batch_sizes, "memory_mb": memory_mb}
        self.model = planning_model(profiles, self.fleet, self.applications, **self._model_options)
        unprofiled = sorted(set(self.fleet) - set(profiles.device_by_name))
        if unprofiled:
            logger.warning("the fleet's %s have no profile: planned with no capacity until their workers "
                           "announce what they measured", ", ".join(unprofiled))
        self._solve = {"headroom": headroom, "degrade_step": degrade_step, "time_limit_s": time_limit_s,
                           "mip_rel_gap": mip_rel_gap}
        self._fill_idle = fill_idle
        self.pinned = None if pinned is None else {d: dict(f) for d, f in pinned.items()}
        #: the last solution, for diagnostics (solve time, demand scale, counts)
        self.last_allocation: Allocation | None = None

    def update_profiles(self, profiles: ProfileSet) -> None:
        """Plan from now on with ``profiles`` (the devices' service times as learnt while serving)."""
        self.profiles = profiles
        self.model = planning_model(profiles, self.fleet, self.applications, **self._model_options)

    def plan(self, load: LoadSnapshot) -> FleetPlan:
        demand = np.array([max(0.0, float(load.arrival_rate_qps.get(a.name, 0.0))) for a in self.model.applications])
        allocation = solve_allocation(self.model.problem(demand, pinned=self.pinned), **self._solve)
        self.last_allocation = allocation
        if not allocation.success:
            return FleetPlan(PlanStatus.INFEASIBLE, allocation.message)
        return self.to_plan(allocation, demand)

    def to_plan(self, allocation: Allocation, demand: np.ndarray) -> FleetPlan:
        """Placements (one per hosting device, type by type) and per-application variant shares."""
        model = self.model
        counts = allocation.counts.copy()
        routed = allocation.served.sum(axis=0)  # (M, Q)
        if self._fill_idle:
            self._fill(counts, routed)
        placements = tuple(Placement(model.devices[t], (model.variants[m],))
                           for t in range(len(model.devices)) for m in range(len(model.variants))
                           for _ in range(counts[t, m]))
        routing: dict[str, dict[str, float]] = {}
        for q, app in enumerate(model.applications):
            total = routed[:, q].sum()
            if total > 0:
                routing[app.name] = {model.variants[m]: float(routed[m, q] / total)
                                     for m in range(len(model.variants)) if routed[m, q] > 0}
        prices = {d.name: d.price_per_hour for d in self.profiles.devices}
        served = ", ".join(f"{a.name} {routed[:, q].sum():.1f}/{demand[q]:.1f} qps"
                           for q, a in enumerate(model.applications))
        return FleetPlan(
            status=allocation.status,
            message=f"{allocation.message}; served {served}; {allocation.num_solves} solve(s) in {allocation.solve_s:.3f} s",
            placements=placements,
            routing=routing,
            objective=allocation.objective,
            cost_per_hour=float(sum(prices.get(p.device, 0.0) for p in placements)),
        )

    def _fill(self, counts: np.ndarray, routed: np.ndarray) -> None:
        """Host routed variants on idle devices, where the planned utilization is highest."""
        model = self.model
        cap = model.capacity
        load = routed.sum(axis=0)  # per application
        for t in range(len(model.devices)):
            for _ in range(int(model.counts[t] - counts[t].sum())):
                best = None
                for q in range(len(model.applications)):
                    options = [m for m in range(len(model.variants)) if routed[m, q] > 0 and cap[t, m, q] > 0
                               and self._may_host(t, m, counts)]
                    if not options or load[q] <= 0:
                        continue
                    planned = (counts * cap[:, :, q]).sum(axis=0)
                    utilization = load[q] / max(1e-9, planned[routed[:, q] > 0].sum())
                    m = max(options, key=lambda m: (model.accuracy[m], cap[t, m, q]))
                    if best is None or utilization > best[0]:
                        best = (utilization, m)
                if best is None:
                    break
                counts[t, best[1]] += 1

    def _may_host(self, t: int, m: int, counts: np.ndarray) -> bool:
        if self.pinned is None:
            return True
        family = self.model.family[m]
        used = sum(counts[t, k] for k in range(len(self.model.variants)) if self.model.family[k] == family)
        return used < self.pinned.get(self.model.devices[t], {}).get(family, 0)


def family_counts(plan: FleetPlan, profiles: ProfileSet) -> dict[str, dict[str, int]]:
    """Device type -> family -> devices hosting it in ``plan`` (Sommelier pins devices to these)."""
    family_of = {p.variant: p.family for p in profiles.variants}
    out: dict[str, dict[str, int]] = {}
    for placement in plan.placements:
        for variant in placement.variants[:1]:
            per_family = out.setdefault(placement.device, {})
            per_family[family_of[variant]] = per_family.get(family_of[variant], 0) + 1
    return out
