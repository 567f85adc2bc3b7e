"""When to re-plan: periodically, and early when an application's demand moved away from the plan.

The paper re-solves its MILP every 30 s under stable demand and lets the load balancers call for a
re-plan when they see a burst, without a rule for what a burst is. Here (spec §8, item 7): demand per
application is an EWMA of per-interval rates over a sliding window (pandas ``ewm(com)`` weights, as the
authors' artifact: ``com`` 1.6, 20 one-second samples), and a burst is an EWMA more than
``burst_threshold`` (20 %) away from the rate the current plan was made for. Re-plans are at least
``min_gap_s`` apart, so a ramp re-plans a few times, not at every sample.

Use: feed `record` with arrival counts as they are tallied, ask `due` whether to plan now, and after
planning call `mark_planned` with the rates the plan was made for (`rates` at that time).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np


class ReplanMonitor:
    """Demand estimate and re-plan trigger for a set of applications.

    Parameters
    ----------
    period_s : re-plan at least this often (the paper's 30 s).
    burst_threshold : re-plan early when ``|EWMA - planned| / planned`` exceeds this for an application.
    ewma_com : centre of mass of the EWMA (``alpha = 1 / (1 + com)``).
    window : samples the EWMA looks back over.
    min_rate_qps : rates below this count as no demand for the burst test (an application waking up
        from zero with at least this rate is a burst).
    min_gap_s : least time between two re-plans.

    Examples
    --------
    >>> m = ReplanMonitor()
    >>> m.due(0.0)
    'initial'
    >>> for t in range(1, 11):
    ...     m.record(float(t), {"app": 100})
    >>> m.mark_planned(10.0, m.rates())
    >>> m.record(11.0, {"app": 100}); m.due(11.0) is None
    True
    >>> m.record(12.0, {"app": 300}); m.due(12.0)
    'burst: app 100 -> 177 qps'
    >>> m.mark_planned(12.0, m.rates()); m.due(42.0)
    'period'
    """

    def __init__(
        self,
        *,
        period_s: float = 30.0,
        burst_threshold: float = 0.2,
        ewma_com: float = 1.6,
        window: int = 20,
        min_rate_qps: float = 1.0,
        min_gap_s: float = 2.0,
    ) -> None:
        if not period_s > 0 or not burst_threshold > 0 or not ewma_com >= 0 or window < 1 or min_gap_s < 0:
            raise ValueError(
                f"need `period_s` > 0, `burst_threshold` > 0, `ewma_com` >= 0, `window` >= 1, `min_gap_s` >= 0; "
                f"got {period_s}, {burst_threshold}, {ewma_com}, {window}, {min_gap_s}"
            )
        self.period_s = period_s
        self.burst_threshold = burst_threshold
        self.min_rate_qps = min_rate_qps
        self.min_gap_s = min_gap_s
        self._window = window
        decay = 1.0 - 1.0 / (1.0 + ewma_com)
        self._weights = decay ** np.arange(window)  # newest sample first
        self._samples: dict[str, deque[float]] = {}
        self._planned_at: float | None = None
        self._planned: dict[str, float] = {}

    def record(self, now_s: float, counts: Mapping[str, float], *, interval_s: float = 1.0) -> None:
        """Arrivals per application over the ``interval_s`` ending at ``now_s`` (absent = 0)."""
        if not interval_s > 0:
            raise ValueError(f"`interval_s` must be > 0, got {interval_s}")
        for app in set(counts) | set(self._samples):
            samples = self._samples.setdefault(app, deque(maxlen=self._window))
            samples.appendleft(float(counts.get(app, 0.0)) / interval_s)

    def rates(self) -> dict[str, float]:
        """EWMA demand per application (queries per second)."""
        out = {}
        for app, samples in self._samples.items():
            weights = self._weights[: len(samples)]
            out[app] = float(np.dot(weights, np.fromiter(samples, float, len(samples))) / weights.sum())
        return out

    def due(self, now_s: float) -> str | None:
        """Why to re-plan now (``initial``, ``period``, ``burst: ...``), or None."""
        if self._planned_at is None:
            return "initial"
        elapsed = now_s - self._planned_at
        if elapsed >= self.period_s:
            return "period"
        if elapsed < self.min_gap_s:
            return None
        for app, rate in sorted(self.rates().items()):
            planned = self._planned.get(app, 0.0)
            if planned < self.min_rate_qps:
                if rate >= self.min_rate_qps:
                    return f"burst: {app} {planned:.0f} -> {rate:.0f} qps"
            elif abs(rate - planned) / planned > self.burst_threshold:
                return f"burst: {app} {planned:.0f} -> {rate:.0f} qps"
        return None

    def mark_planned(self, now_s: float, rates: Mapping[str, float]) -> None:
        self._planned_at = now_s
        self._planned = dict(rates)
