"""Priority classes in the serving core (`shared.serving.priorities`): a lower class waits behind the gate while
a higher one is about, is shed when it can no longer start in time, and one class alone is never held; and,
simulated with every policy that plans without a store, the high class keeps its SLO at 1x-3x capacity."""
from __future__ import annotations

import math

import pytest

from schemas import BatchFinished
from services.demo import priorities as act
from shared.catalogue import Catalogue
from shared.serving.priorities import PriorityGate
from shared.settings import Settings
from shared.sim.scenarios.priorities import ClassMix
from tests.unit.test_serving_core import Harness, heartbeat, make_query


def test_a_query_naming_no_class_is_its_applications_default() -> None:
    gate = PriorityGate(hold_share=0.35, memory_s=60.0, defaults={"vip": 2})
    assert (gate.class_of("vip", None), gate.class_of("other", None), gate.class_of("vip", 7)) == (2, 5, 7)


def test_a_class_is_bounded_only_while_a_higher_class_is_about() -> None:
    gate = PriorityGate(hold_share=0.5, memory_s=10.0, defaults={})
    gate.seen("app", 5, 100.0, now_s=0.0)
    assert gate.bound_s("app", 5, 0.0) == math.inf, "one class alone is never held"
    gate.seen("app", 1, 40.0, now_s=1.0)
    gate.seen("app", 3, 80.0, now_s=1.0)
    assert gate.bound_s("app", 5, 2.0) == pytest.approx(0.02), "half the tightest SLO above it"
    assert gate.bound_s("app", 1, 2.0) == math.inf and gate.bound_s("other", 9, 2.0) == math.inf
    assert gate.higher_about("app", 5, 2.0) == [1, 3]
    assert gate.bound_s("app", 5, 11.5) == math.inf, "the higher classes went quiet"


def busy_with_a_high_query() -> Harness:
    """One worker of the 'large' variant (5 ms a row, 400 rows/s at best), busy with a class-1 query."""
    core = Harness(drop=1.0)
    core.event(heartbeat("w1", variants=("large",)), 0.0)
    core.admit(make_query("high", model="large", priority=1), 0.0)
    assert [d.items[0].pending.query_id for d in core.step(0.0).dispatches] == ["high"]
    return core


def test_a_lower_class_waits_behind_the_gate_and_is_shown_as_the_work_drains() -> None:
    core = busy_with_a_high_query()
    for k in range(12):
        core.admit(make_query(f"low{k}", model="large", priority=9), 0.001)
    core.step(0.001)
    # 35% of the high class's 50 ms: 17.5 ms of work, of which the batch in flight holds 4 ms
    assert len(core.core.queue.items) < 12 and core.core.queue.held, "some wait behind the gate"
    shown_first = set(core.core.queue.items)
    assert "low11" in shown_first and "low0" not in shown_first, "the newest are shown first"
    core.event(BatchFinished(worker_id="w1", batch_id="b-0", variant="large", device="cpu", rows=1, compute_ms=5.0,
                             ok=True, at=0.0), 0.005)
    step = core.step(0.005)
    assert step.dispatches and not set(core.core.queue.held) & {i.pending.query_id for d in step.dispatches
                                                                 for i in d.items}


def test_a_held_query_that_can_no_longer_start_in_time_is_shed_with_why() -> None:
    core = busy_with_a_high_query()
    for k in range(12):
        core.admit(make_query(f"low{k}", model="large", priority=9), 0.001)
    core.step(0.001)
    held = set(core.core.queue.held)
    shed = {item.pending.query_id: reason for item, reason in core.step(0.06).dropped}
    assert held <= set(shed)
    reason = shed[min(held)]
    assert reason.startswith("shed for higher priorities: held back") and "class 9 while class 1 of 'app'" in reason


def test_one_class_alone_is_never_held() -> None:
    core = Harness(drop=1.0)
    core.event(heartbeat("w1", variants=("large",)), 0.0)
    for k in range(12):
        core.admit(make_query(f"q{k}", model="large"), 0.0)
    [batch] = core.step(0.0).dispatches
    assert not core.core.queue.held and len(batch.items) + len(core.core.queue.items) == 12


def test_a_released_partitions_held_queries_go_with_it() -> None:
    core = busy_with_a_high_query()
    for k in range(12):
        core.admit(make_query(f"low{k}", model="large", priority=9), 0.001, token=k)
    core.step(0.001)
    assert core.core.queue.held
    assert core.core.release(lambda delivery: True) == 12
    assert not core.core.queue.held and not core.core.queue.items


# -- simulated: the scenario, with the policies as the live scheduler builds them ----------------------

DURATION_S = 30.0


@pytest.fixture(scope="module")
def vision():
    """The demo's fourth act: one worker emulating cpu-1t with EfficientNet-Lite0, and its capacity at one row
    a batch (what it serves while a deadline keeps its batches small)."""
    catalogue = Catalogue.from_settings(Settings().model_copy(update=act.policy_settings("fcfs")))
    return catalogue, 1000.0 / catalogue.profile(act.VARIANT, act.DEVICE).latency_ms(1)


def served_by_class(vision, policy_name: str, load: float, *, gate: bool = True):
    catalogue, capacity = vision
    mix = ClassMix(capacity, load)
    return mix, act.simulated(policy_name, catalogue, mix, DURATION_S, seed=1, gate=gate)


@pytest.mark.parametrize("load", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("policy", ["fcfs", "kairos", "infaas", "proteus"])
def test_the_high_class_keeps_its_slo_and_the_low_class_gets_most_of_what_is_left(vision, policy, load) -> None:
    mix, outcome = served_by_class(vision, policy, load)
    high, low = outcome[mix.high], outcome[mix.low]
    assert high.attainment >= 0.99, (policy, load, outcome)
    left_qps = mix.capacity_qps - mix.high_qps
    assert low.goodput_qps >= 0.75 * min(left_qps, mix.low_qps), (policy, load, outcome)


@pytest.mark.parametrize("policy", ["fcfs", "infaas", "proteus"])
def test_without_the_gate_the_same_queries_lose_the_high_class(vision, policy) -> None:
    mix, outcome = served_by_class(vision, policy, 2.0, gate=False)
    assert outcome[mix.high].attainment < 0.7, outcome
