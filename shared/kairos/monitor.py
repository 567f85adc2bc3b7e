"""The batch-size monitor: a sliding window of recent query sizes, and when to re-plan (spec §8.15).

Kairos learns the size distribution from "a number of most recent queries (e.g., 10000)" and re-runs the
allocator when it changes. Every ``check_every`` sizes the window is compared with the one the last plan
used: a re-plan is due when some auxiliary type's small-query share f moved by more than ``f_threshold``
or the two-sample Kolmogorov-Smirnov statistic exceeds ``ks_threshold``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.kairos.distribution import DistributionStats, distribution_stats
from shared.kairos.predictor import DEFAULT_GRID
from shared.kairos.table import LatencyTable


@dataclass(frozen=True, slots=True)
class ShiftReport:
    ks_statistic: float
    #: largest |f_now - f_planned| over the auxiliary types
    max_f_change: float
    shifted: bool


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance: the largest gap between the two empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, points, side="right") / len(a)
    cdf_b = np.searchsorted(b, points, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


class BatchSizeMonitor:
    """Recent query sizes, the Eq. 9-15 inputs they imply, and a shift detector.

    Parameters
    ----------
    window : how many recent sizes to keep.
    check_every : sizes between two shift checks.
    f_threshold, ks_threshold : shift triggers.
    grid : batch buckets; a size counts as small for ``s`` when its bucket is below ``s``.
    """

    def __init__(
        self,
        *,
        window: int = 10_000,
        check_every: int = 1_000,
        f_threshold: float = 0.02,
        ks_threshold: float = 0.05,
        grid: Sequence[int] = DEFAULT_GRID,
    ) -> None:
        if window < 1 or check_every < 1:
            raise ValueError(f"`window` and `check_every` must be >= 1; got {window}, {check_every}")
        self._buffer = np.zeros(window, dtype=np.int64)
        self._count = 0
        self._limits: dict[str, int] = {}
        self._check_every = check_every
        self._f_threshold = f_threshold
        self._ks_threshold = ks_threshold
        self._since_check = 0
        self._reference: np.ndarray | None = None
        self._grid = np.asarray(grid, dtype=np.int64)

    def add_sizes(self, sizes: Iterable[int]) -> bool:
        """Record sizes; True when a due check finds the distribution shifted since the last plan."""
        values = np.fromiter(sizes, dtype=np.int64)
        capacity = len(self._buffer)
        for start in range(0, len(values), capacity):
            chunk = values[start : start + capacity]
            positions = (self._count + np.arange(len(chunk))) % capacity
            self._buffer[positions] = chunk
            self._count += len(chunk)
        self._since_check += len(values)
        if self._since_check < self._check_every or self._reference is None:
            return False
        self._since_check = 0
        return self.shift().shifted

    def window(self) -> np.ndarray:
        """The kept sizes, oldest first."""
        capacity = len(self._buffer)
        if self._count <= capacity:
            return self._buffer[: self._count].copy()
        start = self._count % capacity
        return np.concatenate([self._buffer[start:], self._buffer[:start]])

    def stats(
        self, table: LatencyTable, *, qos_ms: float, base: str, auxiliaries: Sequence[str]
    ) -> DistributionStats:
        """f, s, Q_b, Q_a^i, Q_b^{s+} and tau of the current window."""
        return distribution_stats(self.window(), table, qos_ms=qos_ms, base=base, auxiliaries=auxiliaries)

    def mark_planned(self, limits: Mapping[str, int]) -> None:
        """The current window is what the new plan used; later checks compare against it.

        ``limits`` are the plan's QoS limits ``s`` per auxiliary type (`DistributionStats.limit`); the
        shift check compares each type's small-query share f at them.
        """
        self._reference = self.window()
        self._limits = dict(limits)
        self._since_check = 0

    def shift(self) -> ShiftReport:
        """Compare the current window with the planned one."""
        if self._reference is None or len(self._reference) == 0 or self._count == 0:
            return ShiftReport(0.0, 0.0, False)
        now = self.window()
        ks = ks_statistic(self._reference, now)
        df = max(
            (abs(self._small_share(now, s) - self._small_share(self._reference, s)) for s in self._limits.values()),
            default=0.0,
        )
        return ShiftReport(ks, df, ks > self._ks_threshold or df > self._f_threshold)

    def _small_share(self, sizes: np.ndarray, limit: int) -> float:
        buckets = self._grid[np.minimum(np.searchsorted(self._grid, sizes), len(self._grid) - 1)]
        return float(np.mean(buckets < limit))
