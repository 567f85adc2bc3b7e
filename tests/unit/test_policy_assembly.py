"""A new policy with a planner is its own module plus one registry entry: nothing in ``services/`` changes.

This file is that module: a round-robin dispatch and a planner that routes each application uniformly
over its variants, registered only here. The live scheduler's core, a switch, the planner service's
loops and the replay then build it as they build the papers' policies.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from schemas import LoadStatistics, Query, SwitchPolicy
from services.planner.app import PlannerContext, handle_load_statistics
from services.replay.comparison import sim_policy, simulate_record
from services.scheduler.app import build_context, make_core
from services.scheduler.switching import PolicySwitcher
from shared.catalogue import Catalogue
from shared.policy.base import (Assignment, DispatchDecision, DispatchPolicy, FleetController, FleetPlan,
                                LoadSnapshot, PendingQuery, Planner, PlanStatus, WorkerView)
from shared.policy.registry import Planning, PolicyEntry, dispatch_names, planner_names, register, unregister
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.settings import Settings
from shared.sim.workers import SimWorker

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 100.0},
    variants=[VariantProfile(variant=v, family="fam", device="cpu", accuracy=a, batch_latency_ms={1: 2.0}, max_batch=1)
              for v, a in (("small", 0.8), ("large", 0.9))])
CATALOGUE = Catalogue(PROFILES, {"alpha": ["fam"], "beta": ["fam"]})


# -- the policy's module ------------------------------------------------------------------------------
class RoundRobinDispatch(DispatchPolicy):
    """The queue head to the next idle worker in turn, one query per batch, on the variants the plan routes
    its application to, in turn (before a plan: its most accurate candidate)."""

    name = "round-robin"

    def __init__(self, profiles: ProfileSet, *, turns: int = 1) -> None:
        self._turn = itertools.count()
        self.turns = turns
        self._routes: dict[str, Iterator[str]] = {}

    def on_plan(self, plan: FleetPlan) -> None:
        self._routes = {app: itertools.cycle(sorted(shares)) for app, shares in plan.routing.items()}

    def decide(self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]) -> DispatchDecision:
        idle = [w for w in workers if w.idle]
        if not idle or not queue:
            return DispatchDecision.make_empty()
        worker, head = idle[next(self._turn) % len(idle)], queue[0]
        route = self._routes.get(head.application)
        variant = next(route) if route is not None else head.candidate_variants[0]
        return DispatchDecision(assignments=(Assignment(worker.worker_id, variant, (head.query_id,)),))


class UniformPlanner(Planner):
    name = "round-robin"

    def __init__(self, profiles: ProfileSet, *, applications: Mapping[str, str]) -> None:
        self._variants = {app: [p.variant for p in profiles.variants if p.family == family]
                          for app, family in applications.items()}

    def plan(self, load: LoadSnapshot) -> FleetPlan:
        return FleetPlan(PlanStatus.FEASIBLE, "uniform", routing={
            app: {v: 1.0 / len(variants) for v in variants} for app, variants in self._variants.items()})


@dataclass
class PlanOnce(FleetController):
    planner: UniformPlanner
    log: list[tuple[float, str, FleetPlan]] = field(default_factory=list)

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        if self.log or not arrivals:
            return None
        plan = self.planner.plan(LoadSnapshot(at_s=now_s, arrival_rate_qps={}))
        self.log.append((now_s, "first arrivals", plan))
        return plan


def plan_once(settings: Settings, catalogue: Catalogue) -> dict[str, FleetController]:
    applications = {app: families[0] for app, families in settings.applications.items()}
    return {"fleet": PlanOnce(UniformPlanner(catalogue.profiles, applications=applications))}


ENTRY = PolicyEntry("round-robin", dispatch=RoundRobinDispatch, options=lambda context: {"turns": 2},
                    planner=UniformPlanner, planning=Planning(plan_once, fleet_wide=True))


# -- what the services do with it ---------------------------------------------------------------------
@pytest.fixture
def registered() -> Iterator[Settings]:
    register(ENTRY)
    try:
        yield Settings(scheduler_policy="round-robin", planner="round-robin",
                       applications={"alpha": ["fam"], "beta": ["fam"]})
    finally:
        unregister("round-robin")
    assert "round-robin" not in dispatch_names()


def test_the_scheduler_serves_with_it_and_switches_to_it(registered: Settings) -> None:
    assert "round-robin" in dispatch_names() and "round-robin" in planner_names()
    core = make_core(registered, CATALOGUE)
    assert core.policy.policy_of("alpha") == "round-robin"
    assert core.policy.running("round-robin")[0].turns == 2, "built with the options its entry gives"
    other = make_core(registered.model_copy(update={"scheduler_policy": "fcfs"}), CATALOGUE)
    switcher = PolicySwitcher(other, feeds=set(), context=build_context(registered))
    switch = SwitchPolicy(application="beta", policy="round-robin", requested_by="test", at=time.time())
    assert asyncio.run(switcher.apply(switch)) is None and other.policy.policy_of("beta") == "round-robin"


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None) -> None:
        self.sent.append(value)


def test_the_planner_service_plans_with_its_loop(registered: Settings) -> None:
    from shared.policy.registry import build_planning

    entry, loops = build_planning(registered, CATALOGUE)
    assert entry is ENTRY
    ctx = PlannerContext(settings=registered.model_copy(update={"load_stats_interval_s": 1.0}),
                         producer=RecordingProducer(), fleet=loops["fleet"])
    for tick in range(2):
        handle_load_statistics(ctx, LoadStatistics(application="alpha", window_s=1.0, arrival_rate_qps=10.0,
                                                   queue_depth=0, at=100.0 + tick), 100.0 + tick)
    assert len(ctx.producer.sent) == 1 and b'"planner":"round-robin"' in ctx.producer.sent[0]


def test_the_replay_serves_a_record_with_it_and_its_planner(registered: Settings) -> None:
    policy, controller = sim_policy("round-robin", registered, CATALOGUE)
    assert isinstance(controller, PlanOnce)
    queries = [Query(query_id=f"q{i}", application="alpha", slo_ms=100.0, batch_size=1,
                     sent_at=1000.0 + i * 0.5)
               for i in range(20)]
    workers = [SimWorker(f"w{i}", "cpu", ("small", "large"), 1) for i in range(2)]
    result = simulate_record("round-robin", queries, workers, registered, CATALOGUE, start_s=1000.0, transport=None)
    assert not result.dropped and len(result.variant) == 20
    assert set(result.variant) == {"small", "large"}, "routed as the uniform plan says"
