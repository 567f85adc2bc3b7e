"""First-come-first-served dispatch to the earliest-available idle worker (the foundation's default)."""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from shared.policy.base import (
    Assignment,
    BatchingPolicy,
    DispatchDecision,
    DispatchPolicy,
    PendingQuery,
    WorkerView,
)
from shared.profiles.format import ProfileSet


class GreedyBatching(BatchingPolicy):
    """Work-conserving: fill the batch with as many waiting rows as the worker takes."""

    name = "greedy"

    def batch_rows(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> int:
        return worker.max_batch


class DeadlineBatching(BatchingPolicy):
    """Work-conserving, sized by deadlines: of the profiled batch sizes, the one that finishes the most of
    its queries by their compute deadlines (the smaller on a tie). A greedy batch as large as the worker
    takes can outlast every SLO in it; one sized for the head alone shrinks to a row at a time once a
    backlog brings the heads near their deadlines, and never catches up."""

    name = "deadline"

    def __init__(self, profiles: ProfileSet) -> None:
        self._profiles = profiles

    def batch_rows(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> int:
        profile = self._profiles.find(variant, worker.device)
        if profile is None or not queue:
            return worker.max_batch
        start = max(now_s, worker.available_at_s)
        deadlines = [q.deadline_s for q in itertools.islice(queue, min(worker.max_batch, profile.max_batch))]
        best, most = 1, -1
        for rows, latency_ms in profile.batch_latency_ms.items():
            if rows > worker.max_batch:
                break
            end = start + latency_ms / 1000.0
            in_time = sum(deadline >= end for deadline in deadlines[:rows])
            if in_time > most:
                best, most = rows, in_time
            if rows >= len(deadlines):
                break
        return best


class FcfsDispatch(DispatchPolicy):
    """The queue head goes to the idle worker that has been free longest and can serve it.

    Queries the head's variant can also serve follow it into the same batch, in arrival order, up to
    the rows the batching policy allows (with profiles, by default, the size that finishes the most of
    them by their compute deadlines; without, as many as the worker takes). A query no worker can serve
    now waits; one that no *idle* worker could serve does not block those behind it.
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
            limit = self._batching.batch_rows(now_s, servable, worker, variant)
            if limit <= 0:
                return None
            # a query is indivisible: the first one goes even when it alone exceeds the limit
            chosen, rows = [servable[0].query_id], servable[0].batch_size
            for query in servable[1:]:
                if rows + query.batch_size > limit:
                    break
                chosen.append(query.query_id)
                rows += query.batch_size
            return Assignment(worker_id=worker.worker_id, variant=variant, query_ids=tuple(chosen))
        return None
