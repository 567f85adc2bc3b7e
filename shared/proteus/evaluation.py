"""The paper's metrics (§6.1.4) from a simulated run, computed as the authors' artifact does.

A query is *successful* when it was served, late or not; *violations* are dropped, never-served and
late queries. Effective accuracy is the mean normalized accuracy (in %) of successful queries; the
maximum accuracy drop is 100 minus the lowest effective accuracy over ``window_s`` windows (by
completion time); throughput is successful queries per second over the trace.

The run is anything shaped like `ServedRun` (the simulator's per-query outcomes): this module reads
results, it does not depend on the simulator that produces them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np


class ServedRun(Protocol):
    """Per-query outcomes of one run, in arrival order; unserved queries have NaN times."""

    @property
    def arrival_s(self) -> np.ndarray: ...

    @property
    def finish_s(self) -> np.ndarray: ...

    @property
    def variant(self) -> np.ndarray:
        """The variant that served each query."""

    @property
    def dropped(self) -> Mapping[int, str]:
        """Query index -> reason, for queries dropped or never dispatched."""

    @property
    def served(self) -> np.ndarray:
        """Served, late or not."""

    @property
    def late(self) -> np.ndarray:
        """Served, but after the SLO."""

    @property
    def violated(self) -> np.ndarray:
        """Dropped, never served, or late."""


def serving_metrics(result: ServedRun, accuracy: Mapping[str, float], *, window_s: float = 10.0) -> dict[str, float]:
    """``effective_accuracy``, ``max_accuracy_drop`` (%), ``slo_violation_ratio``, ``throughput_qps`` and counts.

    ``accuracy`` maps each variant to its normalized accuracy in (0, 1].
    """
    if not window_s > 0:
        raise ValueError(f"`window_s` must be > 0, got {window_s}")
    served = result.served
    num = len(result.arrival_s)
    duration = float(result.arrival_s[-1] - result.arrival_s[0]) if num > 1 else 1.0
    acc = np.array([accuracy[v] for v in result.variant[served]], dtype=float) * 100.0
    finish = result.finish_s[served]
    windows = np.floor((finish - result.arrival_s[0]) / window_s).astype(int) if len(finish) else np.array([], int)
    per_window = [acc[windows == k].mean() for k in np.unique(windows)] if len(acc) else []
    late = int(result.late.sum())
    return {
        "effective_accuracy": round(float(acc.mean()), 3) if len(acc) else None,
        "max_accuracy_drop": round(100.0 - float(min(per_window)), 3) if per_window else None,
        "slo_violation_ratio": round(float(result.violated.sum()) / num, 5) if num else None,
        "throughput_qps": round(float(served.sum()) / duration, 2),
        "goodput_qps": round(float(served.sum() - late) / duration, 2),
        "num_queries": num,
        "dropped": len(result.dropped),
        "late": late,
    }
