"""RAMSIS policy sets: load-grid refinement, lookup, JSON, the Redis store and the generation CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

from services.ramsis_generate import main as generate_main
from shared.adapters.ramsis_store import RedisPolicyStore
from shared.ramsis import PolicyGenerator, PolicySet, RamsisPolicy, generate_policy_set
from shared.ramsis.testing import FakeRedis, tiny_problem, tiny_profiles


@pytest.fixture(scope="module")
def generator() -> PolicyGenerator:
    return PolicyGenerator(tiny_problem(max_queue=6, delta=10))


@pytest.fixture(scope="module")
def policy_set(generator: PolicyGenerator) -> PolicySet:
    return generate_policy_set(generator, workers=[2, 3], rates_qps=[10.0, 400.0], threshold=0.01)


def test_adjacent_policies_differ_by_less_than_one_percent_accuracy(policy_set: PolicySet):
    for k in (2, 3):
        policies = policy_set.for_workers(k)
        assert len(policies) > 2  # the two-point grid had to be bisected
        accuracy = [p.expected_accuracy for p in policies]
        assert np.max(np.abs(np.diff(accuracy))) < 0.01
        assert policy_set.max_spacing(k) < 0.01
        assert [p.rate_qps for p in policies] == sorted(p.rate_qps for p in policies)


def test_refinement_stops_at_the_minimum_gap(generator: PolicyGenerator):
    seen = []
    coarse = generate_policy_set(generator, workers=[2], rates_qps=[10.0, 400.0], threshold=0.01,
                                 min_gap_qps=200.0, on_policy=lambda p, left: seen.append((p.rate_qps, left)))
    assert [p.rate_qps for p in coarse.policies] == [10.0, 205.0, 400.0]
    assert [left for _, left in seen] == [1, 0, 0]


def test_lookup_picks_the_lowest_load_policy_that_covers_the_load(policy_set: PolicySet):
    rates = [p.rate_qps for p in policy_set.for_workers(2)]
    between = (rates[1] + rates[2]) / 2
    assert policy_set.lookup(2, between).rate_qps == rates[2]
    assert policy_set.lookup(2, rates[1]).rate_qps == rates[1]  # exactly covered
    assert policy_set.lookup(2, 0.0).rate_qps == rates[0]
    assert policy_set.lookup(2, rates[-1] + 1) is None and policy_set.highest(2).rate_qps == rates[-1]
    assert policy_set.lookup(5, 10.0) is None and policy_set.workers == (2, 3)


def test_a_set_holds_one_application(generator: PolicyGenerator):
    other = PolicyGenerator(tiny_problem(slo_ms=50.0))(2, 10.0)
    with pytest.raises(ValueError, match="`policies`"):
        PolicySet([generator(2, 20.0), other])
    replaced = PolicySet([generator(2, 10.0)]).with_policy(generator(2, 10.0))
    assert len(replaced) == 1


def _same(a: RamsisPolicy, b: RamsisPolicy) -> bool:
    return a.to_dict() == b.to_dict() and np.array_equal(a.model, b.model) and np.array_equal(a.slack_ms, b.slack_ms)


def test_policy_json_round_trips_exactly(policy_set: PolicySet):
    policy = policy_set.policies[3]
    again = RamsisPolicy.from_json(policy.to_json())
    assert _same(policy, again)
    assert again.action(2, 55.0) == policy.action(2, 55.0)
    assert again.action(100, 0.0) == (policy.full_model, 100)
    with pytest.raises(ValueError, match="meridian.ramsis.policy"):
        RamsisPolicy.from_dict({**policy.to_dict(), "version": 99})
    whole = PolicySet.from_json(policy_set.to_json())
    assert all(_same(a, b) for a, b in zip(whole.policies, policy_set.policies))


def test_store_round_trip_and_live_additions(policy_set: PolicySet, generator: PolicyGenerator):
    client = FakeRedis()
    store = RedisPolicyStore(client, prefix="t:")
    store.save("tiny:100ms", policy_set)
    loaded = store.load("tiny:100ms")
    assert len(loaded) == len(policy_set)
    assert all(_same(a, b) for a, b in zip(loaded.policies, policy_set.policies))
    store.add("tiny:100ms", generator(4, 50.0))
    assert store.load("tiny:100ms").workers == (2, 3, 4)
    assert store.names() == ["tiny:100ms"] and set(client.data) == {"t:ramsis:sets", "t:ramsis:set:tiny:100ms"}
    raw = next(iter(client.data["t:ramsis:set:tiny:100ms"].values()))
    assert json.loads(raw)["format"] == "meridian.ramsis.policy"  # JSON on the wire, never pickle
    store.save("tiny:100ms", PolicySet())
    assert len(store.load("tiny:100ms")) == 0 and store.names() == []


def test_cli_generates_a_set_into_a_file(tmp_path, capsys):
    profiles = tmp_path / "tiny.json"
    tiny_profiles().save(profiles)
    out = tmp_path / "set.json"
    code = generate_main(["--profiles", str(profiles), "--family", "tiny", "--workers", "2", "--min-rate", "10",
                          "--max-rate", "300", "--num-rates", "3", "--delta", "10", "--max-queue", "6",
                          "--output", str(out)])
    assert code == 0
    loaded = PolicySet.from_json(out.read_text())
    assert loaded.workers == (2,) and loaded.max_spacing(2) < 0.01
    assert "K=2" in capsys.readouterr().out


def test_a_generator_can_extend_a_stored_set_consistently(policy_set: PolicySet):
    extend = PolicyGenerator.extending(policy_set, tiny_profiles())
    policy = extend(2, 1234.0)
    grown = policy_set.with_policy(policy)
    assert grown.lookup(2, 1000.0) is policy and np.array_equal(policy.slack_ms, policy_set.policies[0].slack_ms)
    with pytest.raises(ValueError, match="`policies`"):
        PolicyGenerator.extending(PolicySet(), tiny_profiles())
