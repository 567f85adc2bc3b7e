"""The load monitor: arrivals in a trailing window over the window length (spec §8.10; 500 ms in the paper).

It keeps no clock: callers record each query's arrival time and ask for the rate at ``now_s``, both on
their own clock (the simulator's or the scheduler's).
"""
from __future__ import annotations

from collections import deque


class LoadMonitor:
    """Moving-average query load.

    Examples
    --------
    >>> monitor = LoadMonitor(window_s=0.5)
    >>> monitor.rate(0.0) is None
    True
    >>> for t in (0.1, 0.2, 0.3, 0.9):
    ...     monitor.record(t)
    >>> monitor.rate(0.9)  # only 0.9 lies in (0.4, 0.9]
    2.0
    """

    def __init__(self, *, window_s: float = 0.5) -> None:
        if not window_s > 0:
            raise ValueError(f"`window_s` must be > 0, got {window_s}")
        self.window_s = window_s
        self._times: deque[float] = deque()
        self._seen_any = False

    def record(self, arrival_s: float) -> None:
        self._times.append(arrival_s)
        self._seen_any = True

    def rate(self, now_s: float) -> float | None:
        """Queries per second over ``(now_s - window_s, now_s]``; None before the first arrival."""
        if not self._seen_any:
            return None
        horizon = now_s - self.window_s
        while self._times and self._times[0] <= horizon:
            self._times.popleft()
        return len(self._times) / self.window_s
