"""Control loops that turn arrival counts into plans: Proteus's, and a static one for Clipper.

They are `FleetController`s; the live planner service runs the same pieces (a `ReplanMonitor` fed
with load statistics, then `Planner.plan`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.policy.base import FleetController, FleetPlan, LoadSnapshot, Planner
from shared.proteus.monitor import ReplanMonitor


@dataclass
class PlanningController(FleetController):
    """Re-plan when the monitor says so (periodically, or on a burst), with its EWMA demand.

    ``initial_rates`` stands for the demand the previous plan was made for: the first call plans for
    it instead of waiting for measurements. ``log`` keeps ``(time, reason, plan)`` of every solve.
    ``applications``: the ones it plans (None: all); another application's arrivals are not its demand
    and never trigger a re-plan.
    """

    planner: Planner
    monitor: ReplanMonitor = field(default_factory=ReplanMonitor)
    interval_s: float = 1.0
    initial_rates: Mapping[str, float] | None = None
    applications: frozenset[str] | None = None
    log: list[tuple[float, str, FleetPlan]] = field(default_factory=list)

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        first = not self.log
        if self.applications is not None:
            arrivals = {app: n for app, n in arrivals.items() if app in self.applications}
        if arrivals or self.monitor.rates():
            self.monitor.record(now_s, arrivals, interval_s=self.interval_s)
        reason = self.monitor.due(now_s)
        rates = self.monitor.rates()
        if first and self.initial_rates is not None:
            rates = dict(self.initial_rates)
        elif reason is None or not any(r > 0 for r in rates.values()):
            return None
        plan = self.planner.plan(LoadSnapshot(at_s=now_s, arrival_rate_qps=rates))
        self.log.append((now_s, reason or "initial", plan))
        if plan.success:
            self.monitor.mark_planned(now_s, rates)
            return plan
        return None


@dataclass
class StaticController(FleetController):
    """Apply one plan at the start and never change it (Clipper)."""

    plan: FleetPlan
    _applied: bool = False

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        if self._applied:
            return None
        self._applied = True
        return self.plan
