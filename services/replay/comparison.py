"""Serve a record of real arrivals in the simulator with each policy, and score it as live is scored.

Each policy is built as the live services build it from the same settings (`shared.policy.registry`):
its dispatch options, and for a policy that plans (Kairos, Proteus) its planning loop as the planner
service runs it.
The fleet stays the given one: plans route queries (no fleet service applies their placements here).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from schemas import Query
from shared.adapters.ramsis_store import policy_set_reader
from shared.catalogue import Catalogue
from shared.policy.base import DispatchPolicy, FleetController
from shared.policy.registry import BuildContext, build_policy, dispatch_names, planner_names, planning_controller
from shared.serving import STEP_INTERVAL_S, CoreConfig
from shared.serving.service_time import ProfileServiceTime
from shared.settings import Settings
from shared.sim.engine import SimResult, simulate
from shared.sim.replay import sim_outcomes, workloads_from
from shared.sim.scorecard import Outcomes, Scorecard, Tenure, accuracies, fleet_cost, over_time, score
from shared.sim.transport import TransportModel
from shared.sim.workers import SimWorker

#: seconds per point of the over-time series
BIN_S = 5.0
#: a simulated run is one draw of its service times and Kafka hops, and on a short overloaded stretch
#: draws differ by several points of SLO attainment: the prediction pools this many seeds
SIM_DRAWS = 8


class Served(NamedTuple):
    """One way the record was served (live, or a policy in the simulator): its score and its course."""

    card: Scorecard
    series: dict[str, list[float]]
    outcomes: Outcomes
    #: how many draws of the record ``outcomes`` pools
    draws: int = 1


def check_policies(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [n for n in names if n not in dispatch_names()]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(map(repr, unknown))}; valid: {', '.join(dispatch_names())}")
    return names


def sim_policy(name: str, settings: Settings, catalogue: Catalogue) -> tuple[DispatchPolicy, FleetController | None]:
    """The policy as the live scheduler builds it (``name`` for every application the settings do not
    give another), and the planner's loop where the policy has one."""
    settings = settings.model_copy(update={"scheduler_policy": name})
    policy = build_policy(catalogue.profiles, BuildContext(settings, STEP_INTERVAL_S,
                                                           policy_sets=policy_set_reader(settings.redis_url)))
    controller = None
    if name in planner_names():
        controller = planning_controller(settings.model_copy(update={"planner": name}), catalogue)
    return policy, controller


def sim_config(settings: Settings, *, ideal: bool = False) -> CoreConfig:
    """The live scheduler's core settings; workers never go silent in the simulator (no heartbeats). An
    ideal machine (no transport) reserves nothing for it from the start."""
    config = CoreConfig.from_settings(settings, batch_id_prefix="sim")
    return dataclasses.replace(config, worker_timeout_s=math.inf,
                               transport_prior_s=0.0 if ideal else config.transport_prior_s)


def simulate_record(name: str, queries: Sequence[Query], workers: Sequence[SimWorker], settings: Settings,
                    catalogue: Catalogue, *, start_s: float, transport: TransportModel | None,
                    seed: int = 0) -> SimResult:
    policy, controller = sim_policy(name, settings, catalogue)
    # a batch takes a measured sample, as on an emulating worker (`services.worker.executors`)
    return simulate(workloads_from(queries, catalogue, start_s), workers, policy, catalogue.profiles,
                    service=ProfileServiceTime(catalogue.profiles, sampled=True), controller=controller,
                    control_interval_s=settings.load_stats_interval_s,
                    heartbeat_interval_s=settings.heartbeat_interval_s,
                    config=sim_config(settings, ideal=transport is None), transport=transport,
                    fleet_follows_plans=False, seed=seed)


def simulate_draws(name: str, queries: Sequence[Query], workers: Sequence[SimWorker], settings: Settings,
                   catalogue: Catalogue, *, start_s: float, transport: TransportModel | None,
                   draws: int = SIM_DRAWS) -> list[SimResult]:
    """The record simulated ``draws`` times, seeds 0 to ``draws - 1``."""
    return [simulate_record(name, queries, workers, settings, catalogue, start_s=start_s, transport=transport,
                            seed=seed) for seed in range(draws)]


def judge(outcomes: Outcomes, tenures: Sequence[Tenure], catalogue: Catalogue, *, start_s: float,
          end_s: float, draws: int = 1) -> Served:
    """Score ``outcomes`` (``draws`` pooled draws of the record) and the fleet's cost over the window."""
    accuracy = accuracies(catalogue.profiles)
    prices = {d.name: d.price_per_hour for d in catalogue.profiles.devices}
    card = score(outcomes, accuracy, fleet_cost(tenures, prices, start_s, end_s), draws=draws)
    return Served(card, over_time(outcomes, accuracy, start_s=start_s, bin_s=BIN_S, draws=draws), outcomes, draws)


def judge_draws(results: Sequence[SimResult], tenures: Sequence[Tenure], catalogue: Catalogue, *, start_s: float,
                end_s: float) -> Served:
    return judge(Outcomes.pooled([sim_outcomes(r, start_s) for r in results]), tenures, catalogue,
                 start_s=start_s, end_s=end_s, draws=len(results))


def replay(names: Sequence[str], queries: Sequence[Query], workers: Sequence[SimWorker], settings: Settings,
           catalogue: Catalogue, *, start_s: float, end_s: float, transport: TransportModel | None,
           done: Callable[[str], object] = lambda name: None) -> dict[str, Served]:
    """Every policy of ``names``, simulated on ``queries`` (send times on the wall clock) and ``workers``."""
    served = {}
    tenures = [Tenure(w.device, start_s, None) for w in workers]
    for name in names:
        results = simulate_draws(name, queries, workers, settings, catalogue, start_s=start_s, transport=transport)
        served[name] = judge_draws(results, tenures, catalogue, start_s=start_s, end_s=end_s)
        done(name)
    return served
