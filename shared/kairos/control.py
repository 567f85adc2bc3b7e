"""Kairos' planning loop for one application, as a `FleetController` (HPDC'23 §5.2), and the loops of a
fleet's applications as the settings make them.

It plans once ``min_queries`` query sizes were seen, then again whenever their distribution shifts
(`BatchSizeMonitor`): the load's rate never re-plans Kairos, its size mix does, with no online evaluation.
The planner service feeds it each statistics window's sizes and the simulator each control interval's, so
that replaying a run plans as the live planner did.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.kairos.monitor import BatchSizeMonitor
from shared.kairos.planner import KairosPlanner
from shared.policy.base import FleetController, FleetPlan, LoadSnapshot

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
    log: list[tuple[float, str, FleetPlan]] = field(default_factory=list)
    seen: int = 0
    planned: bool = False
    shifted: bool = False

    @property
    def application(self) -> str:
        return self.planner.application

    def on_query_sizes(self, application: str, sizes: Sequence[int]) -> None:
        if application != self.application or not len(sizes):
            return
        self.shifted |= self.monitor.add_sizes(sizes)
        self.seen += len(sizes)

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        if self.planned and self.shifted:
            reason = "the query-size distribution shifted"
        elif not self.planned and self.seen >= self.min_queries:
            reason = f"{self.seen} query sizes seen"
        else:
            return None
        self.shifted = False
        plan = self.planner.plan(LoadSnapshot(at_s=now_s, arrival_rate_qps={},
                                              batch_sizes={self.application: tuple(self.monitor.window())}))
        self.log.append((now_s, reason, plan))
        if not plan.success:
            return None
        self.planned = True
        self.monitor.mark_planned(self.planner.qos_limits())
        return plan


def application_planning(settings: Settings, catalogue: Catalogue) -> dict[str, KairosPlanningLoop]:
    """A planning loop per application whose model family Kairos can place, with the settings' budget,
    the application's SLO and ``planner_min_queries``.

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
            planning[application] = KairosPlanningLoop(planner, min_queries=settings.planner_min_queries)
    return planning

