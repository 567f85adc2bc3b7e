"""What the demo shows: per application and per phase of the load, how well it was served, and one figure.

A phase is a stretch of send time (`Phase`); each is scored by the one scorecard live and simulated runs
share (`shared.sim.scorecard`), plus the variants that answered, so accuracy scaling is visible, and the
running fleet's $/h over it, from the workers' own events (`Tenure`), so a fleet that changes shows in it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from shared.serving.wording import reason_kind
from shared.sim.scorecard import Outcomes, Tenure, fleet_dollars_per_hour, over_time, score

#: seconds per point of the figure
BIN_S = 2.0


class Phase(NamedTuple):
    name: str
    start_s: float
    end_s: float


def phases(vision_qps: np.ndarray, capacity_qps: float) -> list[Phase]:
    """Low (before vision first exceeds ``capacity_qps``), peak (until it last does) and after."""
    over = np.flatnonzero(vision_qps > capacity_qps)
    if not len(over):
        return [Phase("whole run", 0.0, float(len(vision_qps)))]
    bounds = [0.0, float(over[0]), float(over[-1] + 1), float(len(vision_qps))]
    return [Phase(name, a, b) for name, a, b in zip(("low", "peak", "after"), bounds, bounds[1:]) if b > a]


def phase_table(outcomes: Outcomes, start_s: float, stages: Sequence[Phase], accuracy: Mapping[str, float],
                tenures: Sequence[Tenure], prices: Mapping[str, float]) -> list[dict[str, object]]:
    """One row per application and phase; ``tenures`` on the outcomes' clock."""
    rows = []
    offset = outcomes.sent_s - start_s
    for app in sorted(set(outcomes.application)):
        for phase in stages:
            mine = outcomes.only((outcomes.application == app) & (offset >= phase.start_s) & (offset < phase.end_s))
            if not len(mine.sent_s):
                continue
            card = score(mine, accuracy, 0.0)
            served = Counter(v for v in mine.variant if v)
            total = sum(served.values()) or 1
            rows.append({"application": app, "phase": phase.name, "queries": card.queries,
                         "qps": round(card.queries / (phase.end_s - phase.start_s), 1),
                         "slo_attainment": card.slo_attainment, "effective_accuracy": card.effective_accuracy,
                         "p50_ms": card.p50_ms, "p99_ms": card.p99_ms, "dropped": card.dropped,
                         "variants": {v: round(n / total, 3) for v, n in served.most_common()},
                         "fleet_per_hour": round(fleet_dollars_per_hour(tenures, prices, start_s + phase.start_s,
                                                                  start_s + phase.end_s), 4)})
    return rows


def format_rows(rows: Sequence[Mapping[str, object]]) -> str:
    header = (f"{'application':<12}{'phase':<7}{'q/s':>7}{'SLO met':>9}{'accuracy':>10}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'$/h':>7}  variants serving")
    lines = [header, "-" * len(header)]
    for r in rows:
        accuracy = "-" if r["effective_accuracy"] is None else f"{r['effective_accuracy']:.2f}"
        variants = ", ".join(f"{v} {share:.0%}" for v, share in r["variants"].items()) or "none"
        lines.append(f"{r['application']:<12}{r['phase']:<7}{r['qps']:>7}{r['slo_attainment']:>9.1%}{accuracy:>10}"
                     f"{_ms(r['p50_ms']):>9}{_ms(r['p99_ms']):>9}{r['fleet_per_hour']:>7.2f}  {variants}")
    return "\n".join(lines)


def unanswered(queries: Sequence, answers: Mapping[str, tuple]) -> dict[str, Counter]:
    """Per application, why queries got no ``ok`` answer: the result's reason (its first clause, numbers as
    ``n``), or never answered."""
    why: dict[str, Counter] = {}
    for query in queries:
        result = answers.get(query.query_id, (None,))[0]
        if result is None or result.status.value != "ok":
            reason = ("never answered" if result is None
                      else f"{result.status.value}: {reason_kind(result.reason or '')}")
            why.setdefault(query.application, Counter())[reason] += 1
    return why


def _ms(value: object) -> str:
    return "-" if value is None else f"{value:.0f}"


def plot(outcomes: Outcomes, start_s: float, stages: Sequence[Phase], accuracy: Mapping[str, float],
         best_accuracy: Mapping[str, float], tenures: Sequence[Tenure], prices: Mapping[str, float],
         path: Path) -> Path:
    """Load, effective accuracy (as a share of the application's most accurate variant, so applications of
    different accuracies share an axis), SLO attainment and the running fleet's $/h, over send time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    for app in sorted(set(outcomes.application)):
        series = over_time(outcomes.only(outcomes.application == app), accuracy, start_s=start_s, bin_s=BIN_S)
        t = np.asarray(series["t_s"]) + BIN_S / 2
        axes[0].plot(t, np.asarray(series["sent"]) / BIN_S, label=app)
        axes[1].plot(t, np.asarray(series["effective_accuracy"]) / best_accuracy[app], label=app)
        axes[2].plot(t, 100.0 * np.asarray(series["slo_attainment"]), label=app)
    end = max(p.end_s for p in stages)
    seconds = np.arange(0.0, end, 1.0)
    running = [fleet_dollars_per_hour(tenures, prices, start_s + t, start_s + t + 1.0) for t in seconds]
    axes[3].step(seconds, running, where="post", color="k", label="the running workers (from their events)")
    for ax, label in zip(axes, ("queries/s sent", "accuracy, % of best", "SLO attainment (%)", "fleet $/h")):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        for phase in stages[1:]:
            ax.axvline(phase.start_s, color="grey", linestyle=":")
        ax.legend(loc="lower left", fontsize=8)
    for phase in stages:
        axes[0].text((phase.start_s + phase.end_s) / 2, axes[0].get_ylim()[1] * 0.92, phase.name, ha="center")
    axes[3].set_ylim(0.0, max(running, default=0.0) * 1.5 or 1.0)
    axes[-1].set_xlabel("seconds since the first query")
    fig.suptitle("make demo: two applications on a mixed fleet, accuracy scaled as the load moves")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
