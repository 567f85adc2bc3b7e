from __future__ import annotations

from shared.policy.base import PendingQuery, WorkerView
from shared.policy.fcfs import FcfsDispatch


def query(qid: str, rows: int = 1, candidates: tuple[str, ...] = ("v1",), at: float = 0.0) -> PendingQuery:
    return PendingQuery(qid, "app", rows, at, 100.0, candidates)


def worker(wid: str, *, inflight: int = 0, available_at: float = 0.0, variants=("v1",), max_batch: int = 8) -> WorkerView:
    return WorkerView(wid, "cpu", tuple(variants), inflight, 0.0, available_at, max_batch)


def test_head_goes_to_the_worker_free_longest() -> None:
    decision = FcfsDispatch().decide(1.0, [query("a")], [worker("late", available_at=0.9), worker("early", available_at=0.1)])
    assert [(a.worker_id, a.query_ids) for a in decision.assignments] == [("early", ("a",))]


def test_busy_workers_get_nothing() -> None:
    assert not FcfsDispatch().decide(1.0, [query("a")], [worker("w", inflight=1)])


def test_batches_fill_up_to_max_rows_in_arrival_order() -> None:
    queue = [query("a", 3), query("b", 4), query("c", 2), query("d", 1)]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w", max_batch=8)])
    assert decision.assignments[0].query_ids == ("a", "b")


def test_a_query_larger_than_max_batch_still_goes_alone() -> None:
    decision = FcfsDispatch().decide(1.0, [query("big", 20), query("b")], [worker("w", max_batch=8)])
    assert decision.assignments[0].query_ids == ("big",)


def test_a_query_no_idle_worker_serves_does_not_block_the_rest() -> None:
    queue = [query("needs-v2", candidates=("v2",)), query("ok")]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w", variants=("v1",))])
    assert decision.assignments[0].query_ids == ("ok",)


def test_two_idle_workers_split_the_queue() -> None:
    queue = [query(str(i), 4) for i in range(4)]
    decision = FcfsDispatch().decide(1.0, queue, [worker("w1", max_batch=8), worker("w2", available_at=0.5, max_batch=8)])
    assert [a.query_ids for a in decision.assignments] == [("0", "1"), ("2", "3")]


def _deadline_batching(batch_latency_ms: dict[int, float], samples: dict[int, list[float]] | None = None):
    from shared.policy.fcfs import DeadlineBatching
    from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

    return DeadlineBatching(ProfileSet(source="t", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)],
                                       variants=[VariantProfile(variant="v", family="f", device="cpu",
                                                                batch_latency_ms=batch_latency_ms,
                                                                latency_samples_ms=samples, max_batch=8)]))


IDLE = WorkerView("w", "cpu", ("v",), 0, 0.0, 0.0, 64)


def fresh(n: int, at: float = 0.0, first: int = 0) -> list[PendingQuery]:
    return [PendingQuery(str(i), "a", 1, at, 100.0, ("v",)) for i in range(first, first + n)]


def ids(batch: list[PendingQuery]) -> list[str]:
    return [q.query_id for q in batch]


def test_with_profiles_a_batch_finishes_the_most_queries_in_time_per_second() -> None:
    batching = _deadline_batching({1: 10.0, 4: 20.0, 8: 80.0})
    # 4 in 20 ms serve 0.2 queries/ms; 8 in 80 ms, all in time, only 0.1
    assert batching.batch_rows(0.0, fresh(8), IDLE, "v") == 4
    assert _deadline_batching({1: 10.0, 4: 30.0, 8: 50.0}).batch_rows(0.0, fresh(8), IDLE, "v") == 8
    # at 60 ms none of the 8 would finish in time in a batch of 8: 4 do in one of 4
    assert _deadline_batching({1: 10.0, 4: 30.0, 8: 50.0}).batch_rows(0.06, fresh(8), IDLE, "v") == 4


def test_with_profiles_a_batch_leaves_out_the_queries_it_would_finish_late() -> None:
    batching = _deadline_batching({1: 10.0, 4: 20.0, 8: 80.0})
    # the head's deadline is 5 ms away: no batch finishes it, so the 4 behind it go and it waits
    queue = fresh(1, at=-0.095) + fresh(7, first=1)
    assert ids(batching.batch(0.0, queue, IDLE, "v")) == ["1", "2", "3", "4"]


def test_with_profiles_a_head_no_batch_finishes_in_time_goes_alone() -> None:
    batching = _deadline_batching({1: 10.0, 4: 20.0, 8: 80.0})
    assert ids(batching.batch(0.0, fresh(3, at=-0.2), IDLE, "v")) == ["0"]


def test_with_profiles_in_time_is_judged_at_the_measured_tail() -> None:
    # a batch of 4 takes 20 ms at the median but 90 ms one time in three: 30 ms into a 100 ms SLO it would
    # finish in time at the median, not at the 95th percentile; single queries then serve the most in time
    batching = _deadline_batching({1: 10.0, 4: 20.0, 8: 80.0}, samples={4: [20.0, 20.0, 90.0]})
    assert batching.batch_rows(0.0, fresh(8), IDLE, "v") == 4
    assert batching.batch_rows(0.03, fresh(8), IDLE, "v") == 1
