"""First-come-first-served dispatch to the earliest-available idle worker (the foundation's default)."""
from __future__ import annotations

from collections.abc import Sequence

from shared.policy.base import (
    Assignment,
    BatchingPolicy,
    DispatchDecision,
    DispatchPolicy,
    PendingQuery,
    WorkerView,
    oldest,
)
from shared.policy.deadlines import most_in_time_per_second
from shared.profiles.format import ProfileSet
from shared.profiles.tail import at_quantile


class GreedyBatching(BatchingPolicy):
    """Work-conserving: fill the batch with as many waiting rows as the worker takes."""

    name = "greedy"

    def batch_rows(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> int:
        return worker.max_batch


class DeadlineBatching(BatchingPolicy):
    """Work-conserving, sized and filled by deadlines (`most_in_time_per_second`): of the profiled batch sizes,
    the one that finishes the most queries in time per second of the worker's time, filled with the oldest
    queries it finishes in time; when none, the head alone.

    The rate is the profiles' (their median: what the worker serves); whether a query finishes in time is
    judged at ``latency_quantile`` of the measured samples (what a deadline can count on,
    `shared.profiles.tail`). Queries left out stay queued for a faster worker or the core's drop.
    """

    name = "deadline"

    def __init__(self, profiles: ProfileSet, *, latency_quantile: float = 0.95) -> None:
        self._quantile = latency_quantile
        self.on_profiles(profiles)

    def on_profiles(self, profiles: ProfileSet) -> None:
        self._profiles = profiles
        self._tail = at_quantile(profiles, self._quantile)

    def batch_rows(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> int:
        return sum(query.batch_size for query in self.batch(now_s, queue, worker, variant))

    def batch(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> list[PendingQuery]:
        profile, tail = self._profiles.find(variant, worker.device), self._tail.find(variant, worker.device)
        if profile is None or tail is None or not queue:
            return oldest(queue, worker.max_batch)
        start = max(now_s, worker.available_at_s)
        sizes = [(rows, ms, tail.batch_latency_ms[rows]) for rows, ms in profile.batch_latency_ms.items()
                 if rows <= worker.max_batch]
        chosen = most_in_time_per_second([q.batch_size for q in queue],
                                         [(q.deadline_s - start) * 1000.0 for q in queue], sizes)
        return [queue[i] for i in chosen] or [queue[0]]


class FcfsDispatch(DispatchPolicy):
    """The queue head goes to the idle worker that has been free longest and can serve it.

    Queries the head's variant can also serve follow it into the same batch, in arrival order, as the
    batching policy chooses them: with profiles, by default, the size that finishes the most of them by
    their compute deadlines per second, leaving out those it would finish late (`DeadlineBatching`);
    without, as many as the worker takes. A query no worker can serve now waits; one that no *idle* worker
    could serve does not block those behind it.
    """

    name = "fcfs"

    def __init__(self, profiles: ProfileSet | None = None, *, batching: BatchingPolicy | None = None) -> None:
        self._batching = batching or (GreedyBatching() if profiles is None else DeadlineBatching(profiles))

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        idle = sorted((w for w in workers if w.idle), key=lambda w: (w.available_at_s, w.worker_id))
        if not idle or not queue:
            return DispatchDecision.make_empty()
        taken: set[str] = set()
        assignments = []
        for worker in idle:
            batch = self._batch_for(now_s, queue, worker, taken)
            if batch is not None:
                assignments.append(batch)
                taken.update(batch.query_ids)
        return DispatchDecision(assignments=tuple(assignments))

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        self._batching.observe(device, variant, batch_size, latency_ms)

    def on_profiles(self, profiles: ProfileSet) -> None:
        self._batching.on_profiles(profiles)

    def _batch_for(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, taken: set[str]
    ) -> Assignment | None:
        loaded = set(worker.variants)
        for head in queue:
            if head.query_id in taken:
                continue
            variant = next((v for v in head.candidate_variants if v in loaded), None)
            if variant is None:
                continue
            servable = [q for q in queue if q.query_id not in taken and variant in q.candidate_variants]
            batch = self._batching.batch(now_s, servable, worker, variant)
            if not batch:
                return None
            return Assignment(worker_id=worker.worker_id, variant=variant, query_ids=tuple(q.query_id for q in batch))
        return None
