"""A worker answers ``dropped`` the rows whose deadline passed before their compute starts."""
from __future__ import annotations

from schemas import HopTimestamps, QueryWork
from shared.serving.expiry import expired_reason, split_by_deadline


def work(query_id: str, deadline_at: float | None) -> QueryWork:
    return QueryWork(query_id=query_id, application="app", batch_size=1, slo_ms=100.0, timestamps=HopTimestamps(),
                     deadline_at=deadline_at)


def test_rows_past_their_deadline_are_split_off_and_the_reason_says_by_how_much() -> None:
    live, expired = split_by_deadline([work("a", 10.0), work("b", 9.0), work("c", None)], now_s=9.5)
    assert [q.query_id for q in live] == ["a", "c"] and [q.query_id for q in expired] == ["b"]
    assert expired_reason(expired[0], 9.5, "w1") == \
        "its deadline passed 500 ms before worker 'w1' could start it (100 ms SLO)"
