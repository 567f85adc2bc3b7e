"""The systems Proteus is compared with (ASPLOS'24 §6.1.1, §6.5), as planners for the simulator.

- **Clipper-HA / Clipper-HT**: one static plan, made by Proteus's MILP with only the most (HA) or
  least (HT) accurate variant of each family, never changed; AIMD batching (`clipper_plan`).
- **Sommelier** (= Proteus without model placement): the first plan places families on devices; later
  plans may only swap variants within the family a device was given (`SommelierPlanner`).
- **INFaaS-Accuracy**: INFaaS's greedy autoscaler with objective and constraint swapped: the cost of
  an instance is its accuracy drop, the fleet size the budget (`InfaasAccuracyPlanner`); it routes
  each query to the least-loaded worker of the most accurate variant with room
  (``ProteusDispatch(routing="least_loaded")``) and batches on a fixed size with a timeout.

The ablations w/o model selection (only the most accurate variants) and w/o query assignment (uniform
routing) and w/o adaptive batching (batch size 1) are options of `ProteusPlanner` and `ProteusDispatch`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np

from shared.policy.base import FleetPlan, LoadSnapshot, Placement, Planner, PlanStatus
from shared.profiles.format import ProfileSet
from shared.proteus.apps import resolve_applications
from shared.proteus.planner import ProteusPlanner, family_counts, planning_model


def clipper_plan(
    profiles: ProfileSet,
    demand: Mapping[str, float],
    *,
    which: Literal["ha", "ht"],
    applications: Mapping[str, str] | None = None,
    slo_ms: Mapping[str, float] | None = None,
    **options: Any,
) -> FleetPlan:
    """Clipper's static plan for ``demand``: Proteus's MILP over one variant per family.

    ``ha`` keeps each family's most accurate variant, ``ht`` its least accurate one. Demand beyond
    what they can serve degrades the plan, as for Proteus; idle devices are filled.
    """
    if which not in ("ha", "ht"):
        raise ValueError(f"`which` must be 'ha' or 'ht', got {which!r}")
    apps = resolve_applications(profiles, applications, slo_ms)
    chosen = {name: (app.variants[0] if which == "ha" else app.variants[-1],) for name, app in apps.items()}
    planner = ProteusPlanner(profiles, applications=applications, slo_ms=slo_ms, variants=chosen, **options)
    return planner.plan(LoadSnapshot(at_s=0.0, arrival_rate_qps=dict(demand)))


class SommelierPlanner(Planner):
    """Proteus's planner, but after the first plan every device keeps the family it was given.

    Options are those of `ProteusPlanner`; the artifact runs Sommelier with ``headroom=1.5``.
    """

    name = "sommelier"

    def __init__(self, profiles: ProfileSet, **options: Any) -> None:
        if "pinned" in options:
            raise ValueError("`pinned` is set by the first plan")
        self._profiles = profiles
        self._options = options
        self.planner = ProteusPlanner(profiles, **{**options, "fill_idle": True})

    def plan(self, load: LoadSnapshot) -> FleetPlan:
        plan = self.planner.plan(load)
        if plan.success and self.planner.pinned is None:
            self.planner = ProteusPlanner(self._profiles, **{**self._options, "fill_idle": True},
                                          pinned=family_counts(plan, self._profiles))
        return plan


class InfaasAccuracyPlanner(Planner):
    """INFaaS's greedy autoscaling with accuracy drop as the cost and the fixed fleet as the budget.

    Per application, each call (the artifact: every 10 s) compares its instances' capacity with its
    demand. Overloaded (``capacity * slack < demand``): add the most accurate feasible variant on a
    free device (replication, accuracy cost 0) while free devices remain, else downgrade the instance
    whose next less accurate variant adds capacity at the least accuracy lost per query per second.
    Underloaded (``capacity * downscale_slack > demand``): release the least accurate instances, then
    upgrade instances to more accurate variants, while ``capacity * slack`` still covers demand. An
    approximation of the artifact's ``infaas_v2`` (spec §5.2).

    Parameters
    ----------
    profiles, fleet, applications, slo_ms, batch_sizes, memory_mb : as for `ProteusPlanner`.
    slack : usable fraction of the profiled capacity (0.95).
    downscale_slack : scale down only below this fraction of capacity (0.6).
    """

    name = "infaas_accuracy"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        fleet: Mapping[str, int],
        applications: Mapping[str, str] | None = None,
        slo_ms: Mapping[str, float] | None = None,
        slack: float = 0.95,
        downscale_slack: float = 0.6,
        batch_sizes: Iterable[int] | None = None,
        memory_mb: Mapping[str, float] | None = None,
    ) -> None:
        if not 0 < downscale_slack < slack <= 1:
            raise ValueError(f"need 0 < `downscale_slack` < `slack` <= 1, got {downscale_slack}, {slack}")
        self.model = planning_model(profiles, dict(fleet), resolve_applications(profiles, applications, slo_ms),
                                    batch_sizes=batch_sizes, memory_mb=memory_mb)
        self._slack, self._down = slack, downscale_slack
        self._prices = {d.name: d.price_per_hour for d in profiles.devices}
        #: device type index of each device, and the (variant, application) it hosts
        self.device_type = [t for t, c in enumerate(self.model.counts) for _ in range(c)]
        self.hosted: list[tuple[int, int] | None] = [None] * len(self.device_type)

    def plan(self, load: LoadSnapshot) -> FleetPlan:
        model = self.model
        demand = np.array([max(0.0, float(load.arrival_rate_qps.get(a.name, 0.0))) for a in model.applications])
        for q in np.argsort(-demand, kind="stable"):
            self._scale(int(q), float(demand[q]))
        placements = tuple(Placement(model.devices[self.device_type[d]], (model.variants[h[0]],))
                           for d, h in enumerate(self.hosted) if h is not None)
        routing: dict[str, dict[str, float]] = {}
        for q, app in enumerate(model.applications):
            caps: dict[str, float] = {}
            for d, h in enumerate(self.hosted):
                if h is not None and h[1] == q:
                    v = model.variants[h[0]]
                    caps[v] = caps.get(v, 0.0) + self._cap(d, *h)
            if caps:
                routing[app.name] = {v: c / sum(caps.values()) for v, c in caps.items()}
        covered = ", ".join(f"{a.name} {self._capacity(q):.0f}/{demand[q]:.0f} qps" for q, a in enumerate(model.applications))
        return FleetPlan(PlanStatus.FEASIBLE, f"greedy: capacity/demand {covered}", placements, routing,
                         None, float(sum(self._prices[p.device] for p in placements)))

    def _cap(self, d: int, m: int, q: int) -> float:
        return float(self.model.capacity[self.device_type[d], m, q])

    def _capacity(self, q: int) -> float:
        return sum(self._cap(d, *h) for d, h in enumerate(self.hosted) if h is not None and h[1] == q)

    def _scale(self, q: int, demand: float) -> None:
        acc = self.model.accuracy
        if self._capacity(q) * self._down > demand:  # release the least accurate, then upgrade
            for d in sorted(self._instances(q), key=lambda d: (acc[self.hosted[d][0]], self._cap(d, *self.hosted[d]))):
                if (self._capacity(q) - self._cap(d, *self.hosted[d])) * self._slack >= demand:
                    self.hosted[d] = None
            for d in sorted(self._instances(q), key=lambda d: acc[self.hosted[d][0]]):
                m = self.hosted[d][0]
                for better in self._variants(d, q):
                    if acc[better] > acc[m] and (self._capacity(q) - self._cap(d, m, q) + self._cap(d, better, q)) * self._slack >= demand:
                        self.hosted[d] = (better, q)
                        break
        while self._capacity(q) * self._slack < demand:
            free = [d for d, h in enumerate(self.hosted) if h is None and self._variants(d, q)]
            if free:  # replicate the most accurate variant on the free device where it serves most
                d, m = max(((d, self._variants(d, q)[0]) for d in free), key=lambda dm: self._cap(dm[0], dm[1], q))
                self.hosted[d] = (m, q)
                continue
            steps = []
            for d in self._instances(q):
                m = self.hosted[d][0]
                for worse in self._variants(d, q):
                    gain = self._cap(d, worse, q) - self._cap(d, m, q)
                    if acc[worse] < acc[m] and gain > 0:
                        steps.append(((acc[m] - acc[worse]) / gain, d, worse))
            if not steps:
                return
            _, d, worse = min(steps)
            self.hosted[d] = (worse, q)

    def _instances(self, q: int) -> list[int]:
        return [d for d, h in enumerate(self.hosted) if h is not None and h[1] == q]

    def _variants(self, d: int, q: int) -> list[int]:
        """Variants of application ``q`` feasible on device ``d``, most accurate first."""
        t = self.device_type[d]
        feasible = [m for m in range(len(self.model.variants)) if self.model.capacity[t, m, q] > 0]
        return sorted(feasible, key=lambda m: -self.model.accuracy[m])
