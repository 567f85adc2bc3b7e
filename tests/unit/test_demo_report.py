"""The demo's report: phases of the load, one scored row per application and phase, why queries failed."""
from __future__ import annotations

import numpy as np

from schemas import HopTimestamps, Query, Result, ResultStatus
from services.demo.report import Phase, format_rows, format_unanswered, phase_table, phases, unanswered
from shared.sim.scorecard import Outcomes, Tenure


def test_phases_split_at_the_first_and_last_second_over_capacity() -> None:
    rates = np.array([50, 80, 120, 90, 130, 60, 40], dtype=float)
    assert phases(rates, 100.0) == [Phase("low", 0, 2), Phase("peak", 2, 5), Phase("after", 5, 7)]
    assert phases(np.array([10.0, 20.0]), 100.0) == [Phase("whole run", 0, 2)]


def test_each_phase_is_scored_with_the_variants_that_served_it() -> None:
    sent = np.array([0.5, 1.5, 2.5, 2.6])
    outcomes = Outcomes(np.array(["v"] * 4, dtype=object), np.full(4, 100.0), sent,
                        sent + np.array([0.05, 0.2, 0.05, np.nan]), np.array(["big", "big", "small", ""], dtype=object))
    fleet = [Tenure("cpu", 0.0, None), Tenure("gpu", 1.0, 2.5)]  # a gpu for the second half of low, half of peak
    rows = phase_table(outcomes, 0.0, [Phase("low", 0, 2), Phase("peak", 2, 3)], {"big": 80.0, "small": 70.0}, fleet,
                       {"cpu": 0.1, "gpu": 1.0})
    low, peak = rows
    assert (low["fleet_per_hour"], peak["fleet_per_hour"]) == (0.6, 0.6)
    assert (low["phase"], low["queries"], low["slo_attainment"], low["variants"]) == ("low", 2, 0.5, {"big": 1.0})
    assert (peak["queries"], peak["slo_attainment"], peak["dropped"], peak["variants"]) == (2, 0.5, 1, {"small": 1.0})
    assert "big 100%" in format_rows(rows) and "small 100%" in format_rows(rows)


def test_unanswered_queries_are_counted_by_kind_of_reason() -> None:
    queries = [Query(query_id=f"q{k}", application="v", slo_ms=100.0, batch_size=1, sent_at=0.0) for k in range(4)]

    def dropped(reason: str) -> tuple[Result, float]:
        return Result(query_id="x", status=ResultStatus.DROPPED, reason=reason, timestamps=HopTimestamps()), 1.0

    answers = {"q0": dropped("would miss its deadline by 1.81 ms: sent 76.8 ms ago"),
               "q1": dropped("would miss its deadline by 2.5 ms: sent 70 ms ago"),
               "q2": (Result(query_id="q2", status=ResultStatus.OK, variant="big", timestamps=HopTimestamps()), 0.1)}
    assert unanswered(queries, answers) == {"v": {"dropped: would miss its deadline by n ms": 2, "never answered": 1}}
    assert format_unanswered(queries, answers) == ("v: 3 not answered ok"
                                                  "\n       2  dropped: would miss its deadline by n ms"
                                                  "\n       1  never answered")
    assert format_unanswered(queries[2:3], answers) == ""
