"""RAMSIS online: round-robin, deadline order, policy lookup and generation, load monitor, baselines."""
from __future__ import annotations

import logging
import weakref

import numpy as np
import pytest

from shared.policy.base import PendingQuery, WorkerView
from shared.ramsis import (
    ArrivalProcess,
    LoadMonitor,
    PolicyGenerator,
    PolicyRequest,
    PolicySet,
    RamsisDispatch,
    fill_missing,
)
from shared.ramsis.baselines import JellyfishDispatch, ModelSwitchingDispatch, jellyfish_choice
from shared.ramsis.testing import tiny_problem, tiny_profiles
from shared.sim.scenarios.model_switching import profile_model_switching
from shared.sim.scenarios.ramsis import (
    constant_arrivals,
    piecewise_poisson_arrivals,
    run_fleet,
    serving_metrics,
    single_query_workload,
)

MODELS = ("fast", "mid", "slow")


def query(i: int, at: float, slo_ms: float = 100.0, candidates: tuple[str, ...] = MODELS) -> PendingQuery:
    return PendingQuery(str(i), "tiny", 1, at, slo_ms, candidates)


def worker(name: str, *, busy: bool = False, device: str = "cpu", variants: tuple[str, ...] = MODELS) -> WorkerView:
    return WorkerView(name, device, variants, int(busy), 5.0 if busy else 0.0, 0.0, 16)


_told: "weakref.WeakKeyDictionary[RamsisDispatch, set[str]]" = weakref.WeakKeyDictionary()


def decide(dispatch, now_s, queue, workers):
    """Tell the dispatch of queries it has not seen (as the serving core does on admission), then ask it."""
    told = _told.setdefault(dispatch, set())
    for q in queue:
        if q.query_id not in told:
            told.add(q.query_id)
            dispatch.on_query_added(q)
    return dispatch.decide(now_s, queue, workers)


@pytest.fixture(scope="module")
def generator() -> PolicyGenerator:
    return PolicyGenerator(tiny_problem(max_queue=6, delta=10))


@pytest.fixture(scope="module")
def policies(generator: PolicyGenerator) -> PolicySet:
    return PolicySet([generator(k, rate) for k in (2, 3) for rate in (20.0, 100.0, 400.0)])


def test_round_robin_deals_every_kth_query_busy_or_not_and_serves_in_deadline_order(policies):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=50.0)
    queue = [query(0, 0.000), query(1, 0.001), query(2, 0.002, slo_ms=20.0), query(3, 0.003, slo_ms=30.0),
             query(4, 0.004)]
    busy = [worker("a", busy=True), worker("b", busy=True)]
    assert not decide(dispatch, 0.005, queue, busy)  # dealt, nothing idle
    decision = decide(dispatch, 0.006, queue, [worker("a", busy=True), worker("b")])
    (assignment,) = decision.assignments
    assert assignment.worker_id == "b" and assignment.query_ids == ("3", "1")  # b got 1 and 3; 3 is due first
    rest = [q for q in queue if q.query_id not in assignment.query_ids]
    (served_a,) = decide(dispatch, 0.007, rest, [worker("a"), worker("b", busy=True)]).assignments
    assert served_a.query_ids == ("2", "0", "4")  # maximal batching: the whole queue, by deadline


def test_the_policy_picks_the_model_from_queue_length_and_slack(policies):
    policy = policies.lookup(2, 50.0)
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=50.0)
    (assignment,) = decide(dispatch, 0.010, [query(0, 0.0)], [worker("a"), worker("b")]).assignments
    model, batch = policy.action(1, 90.0)
    assert assignment.variant == MODELS[model] and batch == 1


def test_lowest_covering_policy_from_the_monitored_load(policies):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, window_s=0.5)
    queue = [query(i, i * 0.01) for i in range(30)]  # 30 queries in 0.3 s: 60 QPS
    decide(dispatch, 0.3, queue, [worker("a", busy=True), worker("b", busy=True)])
    assert dispatch._policy(2, dispatch._monitor.rate(0.3)).rate_qps == 100.0
    assert dispatch.missing_load() is None


def test_load_monitor_is_a_moving_average_over_the_window():
    monitor = LoadMonitor(window_s=0.5)
    for t in np.arange(0.0, 2.0, 0.01):
        monitor.record(float(t))
    assert monitor.rate(1.99) == pytest.approx(100.0)
    assert monitor.rate(3.0) == 0.0
    with pytest.raises(ValueError, match="`window_s`"):
        LoadMonitor(window_s=0)


def test_uncovered_load_is_requested_and_served_by_the_highest_policy_meanwhile(policies, generator):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=1000.0, headroom=0.1)
    assert decide(dispatch, 0.01, [query(0, 0.0)], [worker("a"), worker("b")]).assignments
    assert dispatch.missing_load() == PolicyRequest(2, pytest.approx(1100.0))
    added = fill_missing(dispatch, generator)
    assert added.rate_qps == pytest.approx(1100.0) and dispatch.policy_set.lookup(2, 1000.0) is added
    decide(dispatch, 0.02, [query(1, 0.015)], [worker("a"), worker("b")])
    assert dispatch.missing_load() is None and fill_missing(dispatch, generator) is None


def test_a_synchronous_generator_fills_gaps_on_the_spot(policies, generator):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, generator=generator, rate_qps=1000.0)
    decide(dispatch, 0.01, [query(0, 0.0)], [worker("a"), worker("b")])
    assert dispatch.missing_load() is None and dispatch.policy_set.lookup(2, 1000.0) is not None


def test_without_a_policy_set_it_builds_one_from_the_profiles():
    dispatch = RamsisDispatch(tiny_profiles(), family="tiny", delta=5, max_queue=4, rate_qps=40.0)
    (assignment,) = decide(dispatch, 0.0, [query(0, 0.0)], [worker("a")]).assignments
    assert assignment.variant == "slow" and dispatch.policy_set.workers == (1,)
    with pytest.raises(ValueError, match="`family`"):
        RamsisDispatch(tiny_profiles())


def test_workers_coming_and_going_change_k_and_redeal_queues(policies, caplog):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=50.0)
    queue = [query(i, i * 0.001) for i in range(4)]
    decide(dispatch, 0.005, queue, [worker("a", busy=True), worker("b", busy=True)])
    # b leaves; a new worker c joins: b's queries (1, 3) are dealt to the ring [a, c] from its pointer
    decision = decide(dispatch, 0.006, queue, [worker("a", busy=True), worker("c")])
    assert [a.query_ids for a in decision.assignments] == [("3",)]
    with caplog.at_level(logging.WARNING):
        lonely = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=50.0)
        assert decide(lonely, 0.0, [query(0, 0.0)], [worker("a")]).assignments  # served with no K=1 policy
    assert "no RAMSIS policy for 1 workers" in caplog.text and lonely.missing_load().workers == 1


def test_foreign_devices_and_queries_are_left_alone(policies):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=50.0)
    decision = decide(dispatch, 0.0, [query(0, 0.0), query(1, 0.0, candidates=("other",))],
                               [worker("a"), worker("g", device="gpu")])
    assert [a.worker_id for a in decision.assignments] == ["a"] and decision.dropped[0][0] == "1"


def test_a_model_the_worker_lacks_is_replaced_by_the_best_hosted_one(policies):
    dispatch = RamsisDispatch(tiny_profiles(), policy_set=policies, rate_qps=20.0)
    (assignment,) = decide(dispatch, 0.0, [query(0, 0.0)], [worker("a", variants=("fast", "mid"))]).assignments
    assert assignment.variant == "mid"


# -- baselines ----------------------------------------------------------------------------------
def test_jellyfish_takes_the_most_accurate_model_that_keeps_up_within_half_the_slo():
    problem = tiny_problem()
    assert jellyfish_choice(problem, 1, 5.0) == (2, 2)
    assert jellyfish_choice(problem, 1, 100.0) == (1, 6)
    dispatch = JellyfishDispatch(problem, rate_qps=100.0)
    decision = decide(dispatch, 0.0, [query(i, 0.0) for i in range(8)], [worker("a"), worker("b", busy=True)])
    (assignment,) = decision.assignments
    assert assignment.variant == "mid" and assignment.query_ids == tuple(str(i) for i in range(6))  # FIFO, max 6


def test_model_switching_profiles_by_simulation_and_switches_down_with_load():
    problem = tiny_problem()
    table = profile_model_switching(problem, tiny_profiles(), workers=2, rates_qps=[10.0, 150.0, 600.0],
                                    num_queries=800)
    assert list(table.model) == sorted(table.model, reverse=True) and table.model[0] == 2
    assert table.choice(5.0) == (table.model[0], table.max_batch[0])
    assert table.choice(10_000.0)[0] == table.model[-1]
    dispatch = ModelSwitchingDispatch(problem, [table], rate_qps=10.0)
    assert dispatch.choose(2, 10.0)[0] == "slow"
    with pytest.raises(ValueError, match="no ModelSwitching table"):
        dispatch.choose(3, 10.0)


def test_ramsis_beats_the_load_granular_baselines_in_simulation(policies, generator):
    profiles, problem = tiny_profiles(), generator.problem
    arrivals = constant_arrivals(100.0, 3000, np.random.default_rng(1), arrivals=ArrivalProcess())
    workload = single_query_workload(arrivals, slo_ms=100.0, variants=MODELS)
    accuracy = dict(zip(problem.models, problem.accuracy))

    def run(policy):
        return serving_metrics(run_fleet(policy, workload, profiles=profiles, device="cpu", workers=2, max_batch=16),
                               accuracy)

    ramsis = run(RamsisDispatch(profiles, policy_set=policies, rate_qps=100.0))
    jellyfish = run(JellyfishDispatch(problem, rate_qps=100.0))
    assert ramsis.accuracy > jellyfish.accuracy and ramsis.slo_violation_ratio < 0.02


def test_trace_arrivals_follow_the_rate_profile():
    times = piecewise_poisson_arrivals([1.0, 3.0], mean_rate_qps=1000.0, bin_s=1.0, rng=np.random.default_rng(0))
    first, second = np.sum(times < 1.0), np.sum(times >= 1.0)
    assert second / first == pytest.approx(3.0, rel=0.1) and np.all(np.diff(times) >= 0)
