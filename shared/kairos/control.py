"""Kairos' planning loop for one application, as a `FleetController` (HPDC'23 §5.2), and the loops of a
fleet's applications as the settings make them.

It plans once ``min_queries`` query sizes were seen, then again whenever their distribution shifts
(`BatchSizeMonitor`), with no online evaluation. In the paper the load's rate never re-plans Kairos: the
budget buys the configuration of the highest upper bound. Given `LoadFollowing` (Meridian's extension,
`shared.kairos.sizing`) it plans the least-cost configuration within the budget that holds the measured rate,
and re-plans as the rate rises and falls. The planner service feeds it each statistics window's sizes and
arrivals and the simulator each control interval's, so that replaying a run plans as the live planner did.
"""
from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from schemas import WorkerEvent
from shared.kairos.monitor import BatchSizeMonitor
from shared.kairos.planner import ConfigRanking, KairosPlanner
from shared.kairos.sizing import SCALE_DOWN_HEADROOM, ArrivalRate, LoadFollowing, cheapest_holding
from shared.policy.base import FleetController, FleetPlan, LoadSnapshot, PlanStatus
from shared.profiles.measured import AnnouncedMeasurements

if TYPE_CHECKING:
    from shared.catalogue import Catalogue
    from shared.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class KairosPlanningLoop(FleetController):
    """``log`` keeps ``(time, reason, plan)`` of every plan made, also an infeasible one (which is not applied)."""

    planner: KairosPlanner
    min_queries: int = 1000
    monitor: BatchSizeMonitor = field(default_factory=BatchSizeMonitor)
    #: None: the paper (the budget's best configuration, re-planned on size shifts only)
    following: LoadFollowing | None = None
    log: list[tuple[float, str, FleetPlan]] = field(default_factory=list)
    seen: int = 0
    planned: bool = False
    shifted: bool = False
    rate: ArrivalRate = field(default_factory=ArrivalRate)
    #: following the load: the ranking of the latest size window, and the latest plan's configuration in it
    ranking: ConfigRanking | None = None
    running: dict[str, int] = field(default_factory=dict)
    planned_s: float = -math.inf
    #: what real workers announced they measured on their machines: the planner ranks by it
    announced: AnnouncedMeasurements = field(default_factory=AnnouncedMeasurements)
    #: a worker's measurement arrived after the latest plan
    remeasured: bool = False

    @property
    def application(self) -> str:
        return self.planner.application

    def on_worker_event(self, event: WorkerEvent) -> None:
        """A real worker's measurements replace its device's profile; a plan made before is made again."""
        if self.announced.heard_in(event):
            self.planner.update_profiles(self.announced.applied_to(self.planner.configured))
            self.remeasured |= self.planned

    def on_query_sizes(self, application: str, sizes: Sequence[int]) -> None:
        if application != self.application or not len(sizes):
            return
        self.shifted |= self.monitor.add_sizes(sizes)
        self.seen += len(sizes)

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        self.rate.add(now_s, arrivals.get(self.application, 0))
        if self.planned and self.shifted:
            reason = "the query-size distribution shifted"
        elif self.planned and self.remeasured:
            reason = "a worker measured its machine"
        elif not self.planned and self.seen >= self.min_queries:
            reason = f"{self.seen} query sizes seen"
        elif self.planned and self.following is not None:
            return self._follow(now_s)
        else:
            return None
        sizes = tuple(self.monitor.window())
        if self.following is None:
            plan = self.planner.plan(LoadSnapshot(at_s=now_s, arrival_rate_qps={},
                                                  batch_sizes={self.application: sizes}))
        else:
            rate = self.rate.recent(self.following.rate_windows)
            if rate is None:
                return None  # the first window's arrivals are not in yet
            plan = self._rank_and_size(sizes, rate)
        self.shifted = self.remeasured = False
        made = self._made(now_s, reason, plan)
        if made is not None:
            self.monitor.mark_planned(self.planner.qos_limits())
        return made

    def _rank_and_size(self, sizes: Sequence[int], rate_qps: float) -> FleetPlan:
        """A new size window: rank anew, and take the cheapest configuration for the rate, any machines."""
        assert self.following is not None
        try:
            ranking = self.planner.rank(sizes)
        except ValueError as exc:
            return FleetPlan(PlanStatus.INFEASIBLE, str(exc))
        target = rate_qps * self.following.headroom
        k = cheapest_holding(ranking, {}, target, grow=True)
        assert k is not None  # every configuration is a superset of none
        self.ranking = ranking
        return self.planner.plan_of(ranking, k, f"{self._holds(ranking, k, target)} {target:.4g} q/s")

    def _follow(self, now_s: float) -> FleetPlan | None:
        """Grow for a rise, shrink after a fall (`shared.kairos.sizing`)."""
        cfg, ranking = self.following, self.ranking
        assert cfg is not None and ranking is not None
        rate = self.rate.recent(cfg.rate_windows)
        if rate is None:
            return None
        current = self._current(ranking)
        bound = ranking.upper_bounds[current] if current is not None else 0.0
        slope = self.rate.slope(cfg.trend_windows) if cfg.trend_windows else None
        ahead = slope is not None and slope > 0 and self.planner.startup_s > 0
        if ahead:  # the rate a machine asked for now will meet when it has booted
            rate += slope * self.planner.startup_s
        target = rate * cfg.headroom
        if target > bound + 1e-9:
            k = cheapest_holding(ranking, self.running, target, grow=True)
            if k is None or ranking.upper_bounds[k] <= bound:
                return None  # the budget holds no more
            rule = (f"{self._holds(ranking, k, target)} {rate:.4g} q/s{' (one boot ahead)' if ahead else ''} x "
                    f"{cfg.headroom:g}: grown, no machine stopped")
            return self._made(now_s, "the arrival rate rose", self.planner.plan_of(ranking, k, rule))
        hold_s = self.planner.startup_s if cfg.hold_s is None else cfg.hold_s
        since = now_s - hold_s
        if now_s - self.planned_s < hold_s or not self.rate.covers(since):
            return None
        peak = max(self.rate.windows_since(since), default=rate)
        target = peak * cfg.scale_down_headroom
        k = cheapest_holding(ranking, self.running, target, grow=False)
        if k is None or (current is not None and ranking.costs[k] >= ranking.costs[current] - 1e-9):
            return None
        rule = (f"holds every window of the last {hold_s:g} s (up to {peak:.4g} q/s) x {cfg.scale_down_headroom:g}: "
                "shrunk, no machine started")
        return self._made(now_s, "the arrival rate fell", self.planner.plan_of(ranking, k, rule))

    def _made(self, now_s: float, reason: str, plan: FleetPlan) -> FleetPlan | None:
        self.log.append((now_s, reason, plan))
        if not plan.success:
            return None
        self.planned, self.planned_s = True, now_s
        self.running = dict(Counter(p.device for p in plan.placements))
        return plan

    def _current(self, ranking: ConfigRanking) -> int | None:
        """The running configuration's index in `ranking` (None if the budget no longer has it)."""
        counts = [self.running.get(d, 0) for d in ranking.devices]
        match = np.flatnonzero((ranking.configs == counts).all(axis=1))
        return int(match[0]) if len(match) else None

    @staticmethod
    def _holds(ranking: ConfigRanking, k: int, target: float) -> str:
        return "the least cost holding" if ranking.upper_bounds[k] >= target - 1e-9 else "the budget's most toward"


def application_planning(settings: Settings, catalogue: Catalogue) -> dict[str, KairosPlanningLoop]:
    """A planning loop per application whose model family Kairos can place, with the settings' budget,
    the application's SLO and ``planner_min_queries``, following the load if ``planner_kairos_headroom`` is set.

    Kairos places one variant: a family of one is that variant. An application it cannot plan (a family of
    several) is skipped with a message, so that the others are still planned.
    """
    planning: dict[str, KairosPlanningLoop] = {}
    for application, families in settings.applications.items():
        for family in families:
            variants = catalogue.variants_of(family)
            if not variants:
                continue
            variant = variants[0] if len(variants) == 1 else family
            try:
                planner = KairosPlanner(catalogue.profiles, application=application, variant=variant,
                                        budget_per_hour=settings.planner_budget_per_hour,
                                        qos_ms=settings.application_slo_ms.get(application))
            except ValueError as exc:
                logger.warning("not planning %r (%r) with Kairos: %s", application, family, exc)
                continue
            planning[application] = KairosPlanningLoop(planner, min_queries=settings.planner_min_queries,
                                                       following=load_following(settings))
    return planning


def load_following(settings: Settings) -> LoadFollowing | None:
    if settings.planner_kairos_headroom is None:
        return None
    headroom, down = settings.planner_kairos_headroom, settings.planner_kairos_scale_down_headroom
    return LoadFollowing(headroom=headroom,
                         scale_down_headroom=max(headroom, SCALE_DOWN_HEADROOM) if down is None else down)
