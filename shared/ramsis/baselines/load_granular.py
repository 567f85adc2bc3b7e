"""What the paper's baselines share (spec §5.4): one model and max batch per anticipated load.

Queries wait in the central FIFO (= deadline) queue; at every event each idle worker, in fleet order,
eagerly takes up to the max batch of the oldest queries and runs them on the load's model. Model choice
changes only when the load estimate (the same 500 ms monitor as RAMSIS, or a known load) does.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.ramsis.monitor import LoadMonitor


class LoadGranularDispatch(DispatchPolicy):
    """Central queue, eager workers, ``choose(K, load) -> (variant, max batch)``."""

    def __init__(self, *, rate_qps: float | None = None, window_s: float = 0.5) -> None:
        if rate_qps is not None and not rate_qps > 0:
            raise ValueError(f"`rate_qps` must be > 0, got {rate_qps}")
        self._known_rate = rate_qps
        self._monitor = LoadMonitor(window_s=window_s)
        self._seen: set[str] = set()

    @abstractmethod
    def choose(self, workers: int, rate_qps: float | None) -> tuple[str, int]:
        """The variant and the max batch for K workers at this load (None: not known yet)."""

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        ids = set()
        for q in queue:
            ids.add(q.query_id)
            if q.query_id not in self._seen:
                self._monitor.record(q.arrival_s)
        self._seen = ids
        idle = [w for w in workers if w.idle]
        if not idle or not queue:
            return DispatchDecision.make_empty()
        rate = self._known_rate if self._known_rate is not None else self._monitor.rate(now_s)
        variant, max_batch = self.choose(len(workers), rate)
        waiting = [q for q in queue if variant in q.candidate_variants]
        assignments, start = [], 0
        for worker in idle:
            if start >= len(waiting) or variant not in worker.variants:
                continue
            limit = min(max_batch, worker.max_batch)
            batch, rows = [], 0
            while start < len(waiting) and rows + waiting[start].batch_size <= limit:
                rows += waiting[start].batch_size
                batch.append(waiting[start].query_id)
                start += 1
            if batch:
                assignments.append(Assignment(worker.worker_id, variant, tuple(batch)))
        return DispatchDecision(assignments=tuple(assignments))
