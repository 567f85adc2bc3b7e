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
