"""The serving core: admission, drops, workers, re-queueing, and the scheduler messages made from it."""
from __future__ import annotations

import numpy as np
import pytest

from schemas import BatchFinished, Query, WorkerHeartbeat, WorkerStopped
from services.scheduler.messages import dispatch_batch, dropped
from shared.catalogue import Catalogue
from shared.policy.fcfs import FcfsDispatch
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.serving import CoreConfig, SchedulerCore
from shared.tensors import encode

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 50.0},
    variants=[
        VariantProfile(variant="small", family="fam", device="cpu", accuracy=0.9,
                       batch_latency_ms={1: 1.0, 8: 4.0}, max_batch=8),
        VariantProfile(variant="large", family="fam", device="cpu", accuracy=0.97,
                       batch_latency_ms={1: 5.0, 8: 20.0}, max_batch=8),
    ])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A core on a hand-moved clock, spoken to as the live scheduler speaks to it."""

    def __init__(self, **options: float) -> None:
        self.clock = Clock()
        self.core = SchedulerCore(FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}),
                                  CoreConfig(drop_after_slo_multiple=options.get("drop", 5.0),
                                             worker_timeout_s=options.get("timeout", 3.0)), clock=self.clock)

    def at(self, now: float) -> "Harness":
        self.clock.now = now
        return self

    def admit(self, query: Query, now: float, token=None) -> str | None:
        return self.at(now).core.admit(query, payload=query, ack_token=token)

    def event(self, event, now: float) -> None:
        self.at(now).core.on_worker_event(event)

    def step(self, now: float):
        return self.at(now).core.step()

    def batches(self, now: float):
        return [(dispatch_batch(d, self.core.note_of), [i.ack_token for i in d.items])
                for d in self.step(now).dispatches]


def make_query(qid: str, **fields: object) -> Query:
    base = dict(query_id=qid, application="app", model="fam", slo_ms=50.0, batch_size=1,
                inputs=encode(np.zeros((1, 4), np.float32)), sent_at=0.0)
    base.update(fields)
    return Query(**base)


def heartbeat(wid: str, variants=("small",), emulated: bool = False) -> WorkerHeartbeat:
    return WorkerHeartbeat(worker_id=wid, device="cpu", emulated=emulated, variants=list(variants), max_batch=8,
                           inflight=0, busy_fraction=0.0, price_per_hour=0.1, at=0.0)


@pytest.mark.parametrize("fields, reason", [
    ({"application": "other"}, "unknown application"),
    ({"model": "nope"}, "unknown model"),
    ({"slo_ms": 0.5}, "below the fastest"),
    ({"batch_size": 9, "inputs": encode(np.zeros((9, 4), np.float32))}, "exceeds what any variant"),
])
def test_unservable_queries_are_rejected_with_a_reason(fields, reason) -> None:
    assert reason in Harness().admit(make_query("q", **fields), 1.0)


def test_queries_wait_until_a_worker_appears_then_dispatch_with_stamps() -> None:
    core = Harness()
    assert core.admit(make_query("q1"), 1.0, "t1") is None
    assert not core.batches(1.0)
    core.event(heartbeat("w1"), 1.1)
    [(batch, tokens)] = core.batches(1.1)
    assert batch.worker_id == "w1" and batch.variant == "small" and tokens == ["t1"]
    assert batch.queries[0].timestamps.dispatched == 1.1
    assert batch.queries[0].timestamps.scheduler_received == 1.0


def test_accuracy_floor_narrows_the_candidates() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    core.admit(make_query("q1", accuracy_floor=0.95), 1.0, None)
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large"


def test_an_unreachable_accuracy_floor_serves_the_closest_variant_and_says_so() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    assert core.admit(make_query("q1", accuracy_floor=0.99), 1.0, None) is None
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large"
    assert "served the closest, 'large'" in batch.queries[0].note


def test_worker_is_busy_until_its_batch_finishes() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1"), 1.0, None)
    [(batch, _)] = core.batches(1.0)
    core.admit(make_query("q2"), 1.001, None)
    assert not core.step(1.001).dispatches
    core.event(BatchFinished(worker_id="w1", batch_id=batch.batch_id, variant="small", device="cpu",
                             rows=1, compute_ms=1.0, ok=True, at=1.002), 1.002)
    assert [b.queries[0].query_id for b, _ in core.batches(1.002)] == ["q2"]


def test_stale_queries_are_dropped_explicitly() -> None:
    core = Harness(drop=2.0)
    core.admit(make_query("q1"), 1.0, "t")
    assert not core.step(1.0 + 0.098).dropped, "99 ms in 2x 50 ms with 1 ms of work left: still in time"
    [(item, reason)] = core.step(1.0 + 0.0995).dropped
    result = dropped(item, reason, 1.0995)
    assert result.status.value == "dropped" and item.ack_token == "t" and "2x its 50 ms SLO" in result.reason
    assert "1 ms" in result.reason and not core.core.queue and result.timestamps.scheduler_received == 1.0


def test_a_lost_workers_batches_are_requeued_first() -> None:
    core = Harness(timeout=3.0)
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1", slo_ms=2000.0), 0.5, "t1")
    core.batches(0.5)
    core.admit(make_query("q2", slo_ms=2000.0), 0.6, "t2")
    core.event(heartbeat("w2"), 3.4)
    core.event(WorkerStopped(worker_id="w1", at=3.5), 3.5)
    assert list(core.core.queue.items) == ["q1", "q2"]
    batches = core.batches(3.5)
    assert [q.query_id for b, _ in batches for q in b.queries] == ["q1", "q2"]
    assert batches[0][1] == [None, "t2"], "q1 was acknowledged at its first dispatch"


def test_silent_workers_expire() -> None:
    core = Harness(timeout=3.0)
    core.event(heartbeat("w1"), 0.0)
    core.step(3.01)
    assert "w1" not in core.core.workers


def test_queries_without_inputs_need_emulated_workers() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    assert "inputs" in core.admit(make_query("q1", inputs=None), 1.0)
    emulated = Harness()
    emulated.event(heartbeat("e1", emulated=True), 0.0)
    assert emulated.admit(make_query("q1", inputs=None), 1.0) is None


def test_a_redelivered_query_is_queued_once() -> None:
    core = Harness()
    core.admit(make_query("q1"), 1.0, "a")
    core.admit(make_query("q1"), 1.1, "b")
    assert len(core.core.queue) == 1


def test_a_model_less_query_may_use_any_model_of_its_application() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    assert core.admit(make_query("q1", model=None, accuracy_floor=0.95), 1.0, None) is None
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large" and batch.queries[0].note is None


def test_a_restarted_worker_is_a_new_incarnation_and_its_old_batches_are_requeued() -> None:
    core = Harness()
    core.event(heartbeat("w1").model_copy(update={"incarnation": "life1"}), 0.0)
    core.admit(make_query("q1", slo_ms=2000.0), 0.5, "t1")
    (batch, _), = core.batches(0.5)
    assert batch.incarnation == "life1", "a batch names the process it is meant for"
    core.event(heartbeat("w1").model_copy(update={"incarnation": "life2"}), 1.0)
    (again, _), = core.batches(1.0)
    assert [q.query_id for q in again.queries] == ["q1"] and again.incarnation == "life2"


def test_the_load_window_reports_each_application_once_then_starts_empty() -> None:
    from services.scheduler.load_window import LoadWindow

    window = LoadWindow(2.0)
    for rows in (1, 3, 2):
        window.record("a", rows)
    first = window.close({"a": 4, "b": 1}, 10.0)
    assert [(s.application, s.arrival_rate_qps, s.queue_depth, s.batch_sizes) for s in first] == [
        ("a", 1.5, 4, [1, 3, 2]), ("b", 0.0, 1, [])]
    assert [(s.application, s.arrival_rate_qps) for s in window.close({}, 12.0)] == []
