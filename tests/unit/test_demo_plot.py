"""The demo's figure (issue #25): absolute accuracy as the table prints it, axes from zero, and a break in a
line only where queries were sent and none was answered."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.demo.report import BIN_S, Phase, lines, phase_table, plot
from shared.sim.scorecard import Outcomes, Tenure

ACCURACY = {"big": 80.0, "small": 70.0}


def outcomes(sent_s: list[float], latency_s: list[float], variant: list[str], app: str = "v") -> Outcomes:
    """Queries of one application with a 100 ms SLO; NaN latency: never answered ok."""
    sent = np.asarray(sent_s, dtype=float)
    return Outcomes(np.array([app] * len(sent), dtype=object), np.full(len(sent), 100.0), sent,
                    sent + np.asarray(latency_s, dtype=float), np.array(variant, dtype=object))


def test_the_accuracy_drawn_is_the_tables_absolute_effective_accuracy() -> None:
    run = outcomes([0.5, 1.5, 2.5, 3.5], [0.05, 0.05, 0.05, 0.05], ["big", "small", "small", "small"])
    bins = [Phase(f"bin {k}", k * BIN_S, (k + 1) * BIN_S) for k in range(2)]
    table = [row["effective_accuracy"] for row in phase_table(run, 0.0, bins, ACCURACY, [], {})]
    drawn = lines(run, 0.0, ACCURACY)
    assert table == [75.0, 70.0]
    assert drawn.effective_accuracy.tolist() == table


def test_a_bin_with_no_query_sent_joins_the_line_and_one_with_none_answered_breaks_it() -> None:
    # bin 0 answered, bin 1 nothing sent, bin 2 sent and nothing answered, bin 3 answered
    run = outcomes([0.5, 4.5, 6.5], [0.05, np.nan, 0.05], ["big", "", "big"])
    drawn = lines(run, 0.0, ACCURACY)
    assert drawn.t_s.tolist() == [1.0, 3.0, 5.0, 7.0]
    assert drawn.sent_qps.tolist() == [0.5, 0.0, 0.5, 0.5]
    assert drawn.asked_t_s.tolist() == [1.0, 5.0, 7.0]
    assert drawn.slo_attainment_pct.tolist() == [100.0, 0.0, 100.0]
    assert drawn.effective_accuracy[[0, 2]].tolist() == [80.0, 80.0]
    assert np.isnan(drawn.effective_accuracy[1])


def test_the_figure_draws_from_zero_with_the_best_variant_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    import matplotlib.figure

    saved: list[matplotlib.figure.Figure] = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *_a, **_k: saved.append(fig))
    run = outcomes([0.5, 2.5], [0.05, 0.05], ["small", "small"])
    plot(run, 0.0, [Phase("whole run", 0.0, 4.0)], ACCURACY, {"v": 80.0}, [Tenure("cpu", 0.0, None)], {"cpu": 0.1},
         tmp_path / "demo.png")
    load, accuracy, attainment, cost = saved[0].axes
    assert all(ax.get_ylim()[0] == 0.0 for ax in (load, accuracy, attainment, cost))
    assert accuracy.get_ylim()[1] >= 100.0 and attainment.get_ylim()[1] >= 100.0
    effective, best = accuracy.get_lines()[:2]
    assert effective.get_ydata().tolist() == [70.0, 70.0]
    assert list(best.get_ydata()) == [80.0, 80.0]
