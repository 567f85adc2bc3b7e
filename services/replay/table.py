"""The comparison as text: one row per way of serving, the columns every bench and replay prints."""
from __future__ import annotations

from collections.abc import Mapping

from shared.sim.scorecard import Scorecard

COLUMNS = ("queries", "slo_attainment", "effective_accuracy", "p50_ms", "p99_ms", "dropped", "cost_dollars")


def format_table(rows: Mapping[str, Scorecard]) -> str:
    width = max([len(r) for r in rows] + [6])
    lines = [f"{'':{width}}  " + "  ".join(f"{c:>18}" for c in COLUMNS)]
    for label, card in rows.items():
        cells = []
        for column in COLUMNS:
            value = getattr(card, column)
            cells.append(f"{'-' if value is None else (f'{value:.4g}' if isinstance(value, float) else value):>18}")
        lines.append(f"{label:{width}}  " + "  ".join(cells))
    return "\n".join(lines)
