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

from shared.catalogue import Catalogue
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


def format_unanswered(queries: Sequence, answers: Mapping[str, tuple]) -> str:
    """`unanswered` as lines: per application, how many and its three commonest reasons."""
    return "\n".join(f"{app}: {sum(reasons.values())} not answered ok" + "".join(
        f"\n  {n:>6}  {reason}" for reason, n in reasons.most_common(3))
        for app, reasons in sorted(unanswered(queries, answers).items()))


def most_accurate(catalogue: Catalogue, applications: Mapping[str, Sequence[str]],
                  accuracy: Mapping[str, float]) -> dict[str, float]:
    """Each application's most accurate variant's accuracy (``accuracy``'s units), the figure's dashed line."""
    return {app: max(accuracy[v] for family in families for v in catalogue.variants_of(family) if v in accuracy)
            for app, families in applications.items()}


def _ms(value: object) -> str:
    return "-" if value is None else f"{value:.0f}"


class Lines(NamedTuple):
    """One application's lines in the figure. Load is over every bin (sending nothing is a real zero); SLO
    attainment and effective accuracy only over the bins where it sent queries, so a bin it sent nothing in
    is skipped and the line joins across it: nothing was asked, nothing failed, and a break there would read
    as an outage."""

    t_s: np.ndarray
    sent_qps: np.ndarray
    asked_t_s: np.ndarray
    #: percent of the queries sent in the bin; 0 where none was answered within its SLO
    slo_attainment_pct: np.ndarray
    #: percent points, what the phase table prints; NaN (a gap) where queries were sent and none answered ok
    effective_accuracy: np.ndarray


def lines(outcomes: Outcomes, start_s: float, accuracy: Mapping[str, float]) -> Lines:
    """``outcomes`` of one application, scored per `BIN_S` of send time by the scorecard `phase_table` uses,
    in its units, so the figure and the table agree."""
    series = {k: np.asarray(v, dtype=float) for k, v in over_time(outcomes, accuracy, start_s=start_s,
                                                                   bin_s=BIN_S).items()}
    t_s = series["t_s"] + BIN_S / 2
    asked = series["sent"] > 0
    return Lines(t_s=t_s, sent_qps=series["sent"] / BIN_S, asked_t_s=t_s[asked],
                 slo_attainment_pct=100.0 * series["slo_attainment"][asked],
                 effective_accuracy=series["effective_accuracy"][asked])


def plot(outcomes: Outcomes, start_s: float, stages: Sequence[Phase], accuracy: Mapping[str, float],
         best_accuracy: Mapping[str, float], tenures: Sequence[Tenure], prices: Mapping[str, float],
         path: Path, *, title: str = "make demo: two applications on a mixed fleet, accuracy scaled as the load moves",
         fixed_fleet: tuple[str, float] | None = None) -> Path:
    """Load, effective accuracy beside the application's most accurate variant (``best_accuracy``, percent
    as ``accuracy``), SLO attainment and the running fleet's $/h, over send time, beside a fixed fleet's
    (``fixed_fleet``: its label and $/h) if given. Every axis starts at zero, so a dip of a point looks like
    one, and accuracy is absolute, the number the table prints."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 10), sharex=True)
    for app in sorted(set(outcomes.application)):
        drawn = lines(outcomes.only(outcomes.application == app), start_s, accuracy)
        colour = axes[0].plot(drawn.t_s, drawn.sent_qps, label=app)[0].get_color()
        axes[1].plot(drawn.asked_t_s, drawn.effective_accuracy, color=colour, label=f"{app}: effective")
        axes[1].axhline(best_accuracy[app], color=colour, linestyle="--", linewidth=1,
                        label=f"{app}: its most accurate variant ({best_accuracy[app]:.1f})")
        axes[2].plot(drawn.asked_t_s, drawn.slo_attainment_pct, color=colour, label=app)
    end = max(p.end_s for p in stages)
    seconds = np.arange(0.0, end, 1.0)
    running = [fleet_dollars_per_hour(tenures, prices, start_s + t, start_s + t + 1.0) for t in seconds]
    axes[3].step(seconds, running, where="post", color="k", label="the running workers (from their events)")
    if fixed_fleet is not None:
        axes[3].axhline(fixed_fleet[1], color="grey", linestyle="--", label=fixed_fleet[0])
    labels = ("queries/s sent", "effective accuracy (%)", "SLO attainment (%)", "fleet $/h")
    for ax, label in zip(axes, labels):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        for phase in stages[1:]:
            ax.axvline(phase.start_s, color="grey", linestyle=":")
        ax.legend(loc="lower left", fontsize=8)
    axes[0].set_ylim(bottom=0.0)
    for ax in axes[1:3]:
        ax.set_ylim(0.0, 102.0)
    for phase in stages:
        axes[0].text((phase.start_s + phase.end_s) / 2, axes[0].get_ylim()[1] * 0.92, phase.name, ha="center")
    axes[3].set_ylim(0.0, max([*running, fixed_fleet[1] if fixed_fleet else 0.0]) * 1.5 or 1.0)
    axes[-1].set_xlabel("seconds since the first query")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
