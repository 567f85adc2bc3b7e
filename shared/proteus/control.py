"""Control loops that turn arrival counts into plans: Proteus's, and a static one for Clipper.

They are `FleetController`s; the live planner service runs the one `fleet_planning` makes, as the
simulator and the replay do.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schemas import BatchFinished, WorkerEvent
from shared.policy.base import FleetController, FleetPlan, LoadSnapshot, Planner
from shared.profiles.learned import LearnedProfiles
from shared.profiles.measured import AnnouncedMeasurements
from shared.proteus.monitor import ReplanMonitor
from shared.proteus.planner import ProteusPlanner

if TYPE_CHECKING:
    from shared.catalogue import Catalogue
    from shared.settings import Settings


@dataclass
class PlanningController(FleetController):
    """Re-plan when the monitor says so (periodically, or on a burst), with its EWMA demand.

    ``initial_rates`` stands for the demand the previous plan was made for: the first call plans for
    it instead of waiting for measurements. ``log`` keeps ``(time, reason, plan)`` of every solve.
    ``applications``: the ones it plans (None: all); another application's arrivals are not its demand
    and never trigger a re-plan. ``learned``: profiles corrected by the batches the workers report
    (`LearnedProfiles`); a planner that can take them (``update_profiles``) plans with them from its next
    solve on, so that no plan routes more to a device than it serves through the transport. With it, the
    latencies real workers announce they measured on their machines (`announced`) replace their devices'
    profiles, and the next control re-plans.
    """

    planner: Planner
    monitor: ReplanMonitor = field(default_factory=ReplanMonitor)
    interval_s: float = 1.0
    initial_rates: Mapping[str, float] | None = None
    applications: frozenset[str] | None = None
    learned: LearnedProfiles | None = None
    log: list[tuple[float, str, FleetPlan]] = field(default_factory=list)
    #: what real workers announced they measured (with ``learned``): the planner plans by it
    announced: AnnouncedMeasurements = field(default_factory=AnnouncedMeasurements)
    _planned_version: int = 0
    _remeasured: bool = False

    def on_worker_event(self, event: WorkerEvent) -> None:
        if self.learned is None:
            return
        if isinstance(event, BatchFinished):
            self.learned.observe_event(event)
        elif self.announced.heard_in(event):
            self.learned.rebase(self.announced.applied_to(self.learned.configured))
            self._remeasured = True

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        first = not self.log
        if self.applications is not None:
            arrivals = {app: n for app, n in arrivals.items() if app in self.applications}
        if arrivals or self.monitor.rates():
            self.monitor.record(now_s, arrivals, interval_s=self.interval_s)
        reason = self.monitor.due(now_s) or ("a worker measured its machine" if self._remeasured else None)
        rates = self.monitor.rates()
        if first and self.initial_rates is not None:
            rates = dict(self.initial_rates)
        elif reason is None or not any(r > 0 for r in rates.values()):
            return None
        if self.learned is not None and self.learned.version != self._planned_version:
            self._planned_version = self.learned.version
            self.planner.update_profiles(self.learned.profiles())
        self._remeasured = False
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


def planned_applications(settings: Settings) -> dict[str, str]:
    """Application -> the model family the fleet planner plans it with: the applications its own dispatch
    policy serves (``application_policies`` may give one another policy and workers of its own, outside
    ``planner_fleet``), or every application when none is."""
    families = {app: families[0] for app, families in settings.applications.items()}
    served = {app: family for app, family in families.items()
              if settings.application_policies.get(app, settings.scheduler_policy) == settings.planner}
    return served or families


def fleet_planning(settings: Settings, catalogue: Catalogue) -> PlanningController:
    """Proteus' MILP over `planned_applications` (each with its first model family), re-planned by its
    monitor and with the profiles the workers' batches teach it."""
    applications = planned_applications(settings)
    planner = ProteusPlanner(catalogue.profiles, fleet=settings.planner_fleet or None, applications=applications,
                             slo_ms={app: slo for app, slo in settings.application_slo_ms.items() if app in applications},
                             headroom=settings.proteus_headroom)
    return PlanningController(planner, ReplanMonitor(period_s=settings.replan_period_s),
                              interval_s=settings.load_stats_interval_s, applications=frozenset(applications),
                              learned=LearnedProfiles(catalogue.profiles))
