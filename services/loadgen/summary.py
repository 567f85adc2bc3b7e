"""The loadgen's report: what was sent, what came back, how fast, how many within SLO."""
from __future__ import annotations

from collections import Counter

import numpy as np
from pydantic import BaseModel

from schemas import Result, ResultStatus


class LoadSummary(BaseModel):
    sent: int
    answered: int
    lost: int
    by_status: dict[str, int]
    duplicates_suppressed: int
    duration_s: float
    throughput_qps: float
    latency_ms_p50: float | None
    latency_ms_p95: float | None
    latency_ms_p99: float | None
    slo_attainment: float
    emulated_results: int
    variants: dict[str, int]


def summarize(sent: dict[str, tuple[float, float]], results: dict[str, tuple[Result, float]],
              duplicates: int, duration_s: float) -> LoadSummary:
    """``sent`` maps query id -> (send time, SLO ms); ``results`` query id -> (result, receive time)."""
    mine = {qid: results[qid] for qid in sent if qid in results}
    ok = [(r, at) for r, at in mine.values() if r.status is ResultStatus.OK]
    latencies = np.array([(at - sent[r.query_id][0]) * 1000.0 for r, at in ok])
    within = sum(1 for (r, at), lat in zip(ok, latencies) if lat <= sent[r.query_id][1])

    def pct(q: float) -> float | None:
        return round(float(np.percentile(latencies, q)), 3) if len(latencies) else None

    return LoadSummary(
        sent=len(sent), answered=len(mine), lost=len(sent) - len(mine),
        by_status=dict(Counter(r.status.value for r, _ in mine.values())),
        duplicates_suppressed=duplicates, duration_s=round(duration_s, 3),
        throughput_qps=round(len(ok) / duration_s, 2) if duration_s > 0 else 0.0,
        latency_ms_p50=pct(50), latency_ms_p95=pct(95), latency_ms_p99=pct(99),
        slo_attainment=round(within / len(sent), 4) if sent else 0.0,
        emulated_results=sum(1 for r, _ in mine.values() if r.emulated),
        variants=dict(Counter(r.variant for r, _ in ok if r.variant)))
