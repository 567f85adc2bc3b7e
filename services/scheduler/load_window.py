"""What the scheduler saw arrive since its last load statistics, per application (bounded)."""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from schemas import LoadStatistics

MAX_SIZES_PER_WINDOW = 20_000


class LoadWindow:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._sizes: dict[str, deque[int]] = {}

    def record(self, application: str, rows: int) -> None:
        self._sizes.setdefault(application, deque(maxlen=MAX_SIZES_PER_WINDOW)).append(rows)

    def close(self, queue_depth: Mapping[str, int], now_s: float) -> list[LoadStatistics]:
        """The window's statistics for every application seen or queued; the next window starts empty."""
        sizes, self._sizes = self._sizes, {}
        return [LoadStatistics(application=app, window_s=self.window_s,
                               arrival_rate_qps=len(sizes.get(app, ())) / self.window_s,
                               queue_depth=queue_depth.get(app, 0), batch_sizes=list(sizes.get(app, ())), at=now_s)
                for app in sorted(set(sizes) | set(queue_depth))]
