"""Kairos sized for the load: the least-cost configuration whose upper bound holds the measured rate.

Meridian's extension [R]. Kairos (§5.2) spends its whole budget on the configuration with the highest upper
bound and re-plans only when the query-size mix shifts, so its fleet, and its bill, never follow the rate.
The upper bound needs no online evaluation, which is what lets Kairos "promptly respond to load changes"
(§5): it answers the dual question as fast, which configuration within the budget holds ``rate x headroom``
at the least cost. `LoadFollowing` asks it from each statistics window's arrivals:

- **Grow** when the rate one boot ahead times `headroom` exceeds the running configuration's upper bound:
  the cheapest configuration that holds it among those that keep every running machine (a superset), so a
  rise only starts machines and none is stopped while new ones boot. If none within the budget holds it,
  the superset with the highest bound (the budget is the cap). The rate one boot ahead is the rate of the
  last `rate_windows` windows plus, while the load rises, the trend of the last `trend_windows` times the
  longest boot: a machine asked for at the measured rate comes a boot later, and on ``make bench-cost``'s
  steepest rise (45 q/s in 10 s, 10 s boots) the fleet, 15% ahead of the measured rate, was a machine
  short for that long (98.8-99.7% within SLO in the simulator over three seeds; with the trend 99.7-99.95%,
  at 3-6% more cost: noise in the trend starts a machine now and then that a later window gives back).
- **Shrink** when every window for `hold_s` would have fitted the cheapest subset of the running machines
  with `scale_down_headroom` (more than `headroom`: a subset removed in a dip is not the one the next
  window's noise asks back), and no plan was made within `hold_s`. By default `hold_s` is the longest boot of
  the planner's machine types, as INFaaS' VM-Autoscaler gives back a machine idle for as long as one boots.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shared.kairos.planner import ConfigRanking

__all__ = ["SCALE_DOWN_HEADROOM", "ArrivalRate", "LoadFollowing", "cheapest_holding"]

#: the default headroom a smaller fleet must keep: INFaaS' scale-down threshold in ``make bench-cost``
SCALE_DOWN_HEADROOM = 1.25


@dataclass(frozen=True, slots=True)
class LoadFollowing:
    """Settings ``planner_kairos_headroom`` and ``planner_kairos_scale_down_headroom``."""

    #: the fleet's upper bound is kept at least this many times the rate (one boot ahead, when growing)
    headroom: float = 1.15
    #: a smaller fleet must hold this many times the rate of each window of the last `hold_s`
    scale_down_headroom: float = SCALE_DOWN_HEADROOM
    #: seconds the smaller fleet must have sufficed, and since the last plan; None: the longest boot
    hold_s: float | None = None
    #: statistics windows the rate a rise is judged on spans (a 2 s window at 100 q/s varies by 7%)
    rate_windows: int = 2
    #: statistics windows the rise's trend is fitted over (0: no look ahead)
    trend_windows: int = 8

    def __post_init__(self) -> None:
        if not 1.0 <= self.headroom <= self.scale_down_headroom:
            raise ValueError(f"need 1 <= `headroom` <= `scale_down_headroom`, got {self.headroom}, "
                             f"{self.scale_down_headroom}")
        if self.hold_s is not None and not self.hold_s >= 0:
            raise ValueError(f"`hold_s` must be >= 0, got {self.hold_s}")
        if self.rate_windows < 1 or self.trend_windows < 0:
            raise ValueError(f"need `rate_windows` >= 1 and `trend_windows` >= 0, got {self.rate_windows}, "
                             f"{self.trend_windows}")


class ArrivalRate:
    """Arrivals per statistics window, as rates over the time between windows.

    Examples
    --------
    >>> rate = ArrivalRate()
    >>> for t, n in ((0.0, 0), (2.0, 40), (4.0, 60)):
    ...     rate.add(t, n)
    >>> rate.recent(1), rate.recent(2), rate.windows_since(3.0), rate.slope(2)
    (30.0, 25.0, [30.0], 5.0)
    >>> rate.add(4.0, 10)  # the same time again: the last window's
    >>> rate.recent(1)
    35.0
    """

    def __init__(self, keep_s: float = 120.0) -> None:
        self.keep_s = keep_s
        #: (start, end, arrivals) of each window; the first call only starts the first window
        self._windows: deque[tuple[float, float, int]] = deque()
        self._last_s: float | None = None

    def add(self, now_s: float, arrivals: int) -> None:
        """A window ending at `now_s`; one that does not end after the last (a repeated time) adds its
        arrivals to the last window."""
        if self._last_s is not None and now_s > self._last_s:
            self._windows.append((self._last_s, now_s, arrivals))
            while self._windows[0][1] < now_s - self.keep_s:
                self._windows.popleft()
        elif self._windows:
            start, end, n = self._windows.pop()
            self._windows.append((start, end, n + arrivals))
        self._last_s = now_s if self._last_s is None else max(self._last_s, now_s)

    def recent(self, windows: int) -> float | None:
        """Arrivals per second over the last `windows` windows (fewer if fewer were seen; None before one)."""
        if not self._windows:
            return None
        last = list(self._windows)[-windows:]
        return sum(n for *_, n in last) / (last[-1][1] - last[0][0])

    def slope(self, windows: int) -> float | None:
        """The least-squares trend of the last `windows` windows' rates, (q/s)/s (None before two)."""
        last = list(self._windows)[-windows:]
        if len(last) < 2:
            return None
        mid = np.array([(start + end) / 2 for start, end, _ in last])
        rate = np.array([n / (end - start) for start, end, n in last])
        mid -= mid.mean()
        return float(mid @ (rate - rate.mean()) / (mid @ mid))

    def windows_since(self, since_s: float) -> list[float]:
        """The rate of every window that ended after `since_s`."""
        return [n / (end - start) for start, end, n in self._windows if end > since_s]

    def covers(self, since_s: float) -> bool:
        """Whether the windows reach back to `since_s`."""
        return bool(self._windows) and self._windows[0][0] <= since_s


def cheapest_holding(ranking: ConfigRanking, running: Mapping[str, int], target_qps: float, *,
                     grow: bool) -> int | None:
    """Index in `ranking` of the least-cost configuration whose upper bound holds `target_qps` among the
    supersets (`grow`) or subsets of the `running` counts; growing with none that holds it, the superset of the
    highest bound. None when there is no such configuration.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> ranking = SimpleNamespace(configs=np.array([[1, 0], [2, 0], [1, 1], [3, 0]]), devices=("a", "b"),
    ...                           upper_bounds=np.array([40.0, 80.0, 77.0, 120.0]),
    ...                           costs=np.array([0.15, 0.30, 0.32, 0.45]))
    >>> cheapest_holding(ranking, {"a": 1}, 70.0, grow=True)
    1
    >>> cheapest_holding(ranking, {"a": 1, "b": 1}, 200.0, grow=True)
    2
    >>> cheapest_holding(ranking, {"a": 3}, 35.0, grow=False)
    0
    """
    if any(n for d, n in running.items() if d not in ranking.devices):
        return None
    current = np.array([running.get(d, 0) for d in ranking.devices])
    configs, upper_bounds = ranking.configs, ranking.upper_bounds
    within = np.all(configs >= current, axis=1) if grow else np.all(configs <= current, axis=1)
    if not within.any():
        return None
    holds = within & (upper_bounds >= target_qps - 1e-9)
    if holds.any():  # least cost, then the higher bound
        return int(np.lexsort((-upper_bounds, np.where(holds, ranking.costs, math.inf)))[0])
    return int(np.argmax(np.where(within, upper_bounds, -math.inf))) if grow else None
