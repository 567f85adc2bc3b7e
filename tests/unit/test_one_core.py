"""The simulator runs the very scheduler that serves: same class, and the same decisions from the same events."""
from __future__ import annotations

import numpy as np
import pytest

from schemas import Query
from services.scheduler.app import make_core
from shared.catalogue import Catalogue
from shared.policy.registry import make_dispatch
from shared.profiles.kairos import load_kairos_profiles
from shared.serving import CoreConfig, SchedulerCore
from shared.settings import Settings
from shared.sim import Workload, deeprecsys_sizes, make_fleet, poisson_arrivals
from shared.sim.engine import Simulation

MODEL = "rm2"


class Recorder:
    """Stands in for the core inside the simulator: passes every call on and writes down what the
    transport would have carried (inputs with their times, and each step's decisions)."""

    def __init__(self, core: SchedulerCore, clock) -> None:
        self.core, self.clock, self.log = core, clock, []

    def __getattr__(self, name: str):
        return getattr(self.core, name)

    def admit(self, query, **kwargs):
        self.log.append(("query", self.clock(), query))
        return self.core.admit(query, **kwargs)

    def on_worker_event(self, event):
        self.log.append(("event", self.clock(), event))
        return self.core.on_worker_event(event)

    def step(self):
        out = self.core.step()
        self.log.append(("step", self.clock(), decisions(out)))
        return out


def decisions(step) -> tuple:
    return (tuple((d.batch_id, d.worker_id, d.variant, tuple(i.pending.query_id for i in d.items), d.at_s)
                  for d in step.dispatches),
            tuple((item.pending.query_id, reason) for item, reason in step.dropped))


@pytest.fixture(scope="module")
def profiles():
    return load_kairos_profiles(Settings().kairos_data_dir)


def short_workload(profiles, n: int = 300) -> Workload:
    rng = np.random.default_rng(7)
    sizes = deeprecsys_sizes(n, rng)
    return Workload(poisson_arrivals(40.0, n, rng), sizes, MODEL, profiles.slo_ms[MODEL], (MODEL,))


def test_the_live_scheduler_and_the_simulator_build_the_same_core_class(profiles) -> None:
    live = make_core(Settings(scheduler_policy="kairos"), Catalogue(profiles, {MODEL: [MODEL]}))
    simulated = Simulation(short_workload(profiles, 5), make_fleet({"g4dn.xlarge": 1}, [MODEL], max_batch=1000),
                           make_dispatch("kairos", profiles), profiles)
    assert type(live) is type(simulated.core) is SchedulerCore


def test_replaying_the_simulators_events_as_messages_gives_the_same_decisions(profiles) -> None:
    fleet = make_fleet({"g4dn.xlarge": 1, "r5n.large": 1}, [MODEL], max_batch=1000)
    sim = Simulation(short_workload(profiles), fleet, make_dispatch("kairos", profiles), profiles, seed=1)
    recorder = sim.core = Recorder(sim.core, lambda: sim.now)
    result = sim.run()
    steps = [entry[2] for entry in recorder.log if entry[0] == "step"]
    assert result.num_served > 150 and result.dropped and sum(len(d) for d, _ in steps) > 100, \
        "a workload that exercises the core: dispatches and drops"

    # the fake transport: the same events, in the same order, as the messages the live scheduler consumes
    now = [0.0]
    live = SchedulerCore(make_dispatch("kairos", profiles), Catalogue(profiles, {MODEL: [MODEL]}), CoreConfig(),
                         clock=lambda: now[0])
    replayed = []
    for kind, at, payload in recorder.log:
        now[0] = at
        if kind == "query":
            message = Query(query_id=payload.query_id, application=payload.application, model=payload.model,
                            batch_size=payload.batch_size, slo_ms=payload.slo_ms, sent_at=at)
            live.admit(message, payload=message)
        elif kind == "event":  # the event as a validated message, as the live scheduler reads it
            live.on_worker_event(type(payload).model_validate_json(payload.model_dump_json()))
        else:
            replayed.append(decisions(live.step()))
    assert replayed == steps


def test_the_developers_guides_example_policy_serves_in_the_simulator(profiles) -> None:
    """docs/developing.md shows how to add a policy; the example must run as shown."""
    from pathlib import Path

    from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy
    from shared.sim import simulate

    guide = (Path(__file__).resolve().parents[2] / "docs" / "developing.md").read_text()
    code = guide.split("# shared/policy/shortest_first.py\n", 1)[1].split("\n# shared/policy/registry.py", 1)[0]
    namespace = {"Assignment": Assignment, "DispatchDecision": DispatchDecision, "DispatchPolicy": DispatchPolicy}
    exec(code, namespace)
    result = simulate(short_workload(profiles, 100), make_fleet({"g4dn.xlarge": 2}, [MODEL], max_batch=1000),
                      namespace["ShortestFirst"](), profiles)
    assert result.num_served > 50 and result.num_served + len(result.dropped) == 100
