"""Cost accounting and the plan view of a fleet.

Every worker is a machine of a `WorkerType` with a price per hour, billed from its start request (boot
time included, as a cloud bills) until it stops. Decisions report the fleet's $/h; `period_cost` turns
worker lifetimes into $ and $ per 1,000 queries over a period; `to_fleet_plan` publishes the fleet as
the project's `FleetPlan` (one placement per worker).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.state import AutoscaleState, ScaleActions
from shared.policy.base import FleetPlan, Placement, PlanStatus

__all__ = ["CostReport", "WorkerInterval", "fleet_cost_per_hour", "period_cost", "to_fleet_plan"]


@dataclass(frozen=True, slots=True)
class WorkerInterval:
    """One machine's billed lifetime; `stop_s` ``None`` while it runs."""

    price_per_hour: float
    start_s: float
    stop_s: float | None = None


@dataclass(frozen=True, slots=True)
class CostReport:
    dollars: float
    worker_hours: float
    num_queries: int
    period_s: float

    @property
    def dollars_per_hour(self) -> float:
        return self.dollars / (self.period_s / 3600.0) if self.period_s > 0 else 0.0

    @property
    def dollars_per_1k_queries(self) -> float | None:
        return 1000.0 * self.dollars / self.num_queries if self.num_queries else None


def period_cost(intervals: Iterable[WorkerInterval], *, start_s: float, end_s: float, num_queries: int) -> CostReport:
    """$ spent on machines between `start_s` and `end_s`, and per 1,000 of the `num_queries` served.

    Examples
    --------
    Two hours of a $0.526/h GPU and the second hour of a $0.308/h CPU machine, 7,200 queries:

    >>> r = period_cost([WorkerInterval(0.526, 0.0), WorkerInterval(0.308, 3600.0, 7200.0)],
    ...                 start_s=0.0, end_s=7200.0, num_queries=7200)
    >>> round(r.dollars, 3), round(r.dollars_per_1k_queries, 4), r.worker_hours
    (1.36, 0.1889, 3.0)
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s) and end_s >= start_s):
        raise ValueError(f"need finite `start_s` <= `end_s`, got {start_s}, {end_s}")
    if num_queries < 0:
        raise ValueError(f"`num_queries` must be >= 0, got {num_queries}")
    dollars = hours = 0.0
    for interval in intervals:
        stop = end_s if interval.stop_s is None else min(interval.stop_s, end_s)
        billed = max(0.0, stop - max(interval.start_s, start_s)) / 3600.0
        dollars += interval.price_per_hour * billed
        hours += billed
    return CostReport(dollars, hours, num_queries, end_s - start_s)


def fleet_cost_per_hour(state: AutoscaleState, catalogue: MachineCatalogue, actions: ScaleActions | None = None) -> float:
    """$/h of the fleet in `state` once `actions` are applied (booting workers included)."""
    stopped = {s.worker_id for s in actions.stop} if actions else set()
    cost = sum(catalogue.worker_type[w.device].price_per_hour for w in state.workers if w.worker_id not in stopped)
    if actions:
        cost += sum(catalogue.worker_type[s.device].price_per_hour for s in actions.start)
    return cost


def to_fleet_plan(state: AutoscaleState, catalogue: MachineCatalogue, actions: ScaleActions | None = None, *,
                  latency_budget: float = 0.5) -> FleetPlan:
    """The desired fleet (`state` with `actions` applied) as a `FleetPlan`.

    One `Placement` per worker (its device type and loaded variants, loading ones included); routing
    splits each application over its variants in proportion to their capacity ``N_v Q_v``;
    ``cost_per_hour`` is the fleet's price, also used as the objective.
    """
    fleet: dict[str, tuple[str, list[tuple[str, str]]]] = {
        w.worker_id: (w.device, [(i.variant, i.application) for i in w.instances]) for w in state.workers}
    if actions:
        for stop in actions.stop:
            fleet.pop(stop.worker_id, None)
        for unload in actions.unloads:
            hosted = fleet.get(unload.worker_id)
            if hosted and (unload.variant, unload.application) in hosted[1]:
                hosted[1].remove((unload.variant, unload.application))
        for start in actions.start:
            fleet[start.worker_id] = (start.device, [(s.variant, s.application) for s in start.instances])
        for load in actions.loads:
            if load.worker_id in fleet:
                fleet[load.worker_id][1].append((load.variant, load.application))
    placements, capacity = [], {}
    for _, (device, hosted) in sorted(fleet.items()):
        placements.append(Placement(device, tuple(sorted({v for v, _ in hosted}))))
        for variant, application in hosted:
            option = catalogue.option.get((variant, device))
            app = catalogue.application.get(application)
            if option is not None and app is not None:
                shares = capacity.setdefault(application, {})
                shares[variant] = shares.get(variant, 0.0) + option.peak_qps(app.slo_ms, latency_budget)
    routing = {a: {v: q / sum(s.values()) for v, q in sorted(s.items())}
               for a, s in sorted(capacity.items()) if sum(s.values()) > 0}
    cost = sum(catalogue.worker_type[device].price_per_hour for device, _ in fleet.values())
    missing = sorted(a for a, q in state.demand_qps.items() if q > 0 and a not in routing)
    status = PlanStatus.DEGRADED if missing else PlanStatus.FEASIBLE
    message = (f"{len(placements)} workers, ${cost:.3f}/h" +
               (f"; no capacity for {', '.join(missing)}" if missing else ""))
    return FleetPlan(status, message, tuple(placements), routing, objective=cost, cost_per_hour=cost)
