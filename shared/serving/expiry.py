"""The worker's share of the deadline rule: a row whose deadline passed before its compute starts is
answered ``dropped`` instead of computed (computing it would only delay the rows behind it)."""
from __future__ import annotations

from collections.abc import Sequence

from schemas import QueryWork
from shared.serving.wording import duration


def split_by_deadline(queries: Sequence[QueryWork], now_s: float) -> tuple[list[QueryWork], list[QueryWork]]:
    """(still in time, expired) at ``now_s``; a query without a deadline is always in time."""
    live, expired = [], []
    for query in queries:
        (expired if query.deadline_at is not None and now_s > query.deadline_at else live).append(query)
    return live, expired


def expired_reason(query: QueryWork, now_s: float, worker_id: str) -> str:
    return (f"its deadline passed {duration(now_s - query.deadline_at)} before worker {worker_id!r} could start "
            f"it ({query.slo_ms:g} ms SLO)")
