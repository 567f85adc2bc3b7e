"""Clockwork-style central controller: per-instance FIFO queues, QoS-aware placement (Kairos §7).

Each query is committed, once, to the instance queue where it is predicted to finish earliest among
those that meet its QoS (queue tail + predicted latency), or earliest overall if none does; each
instance then serves its own queue in order, with no work stealing (spec §8.12).

Modelled through `DispatchPolicy`: the policy remembers its commitments. A query is committed the first
time the policy sees it (the engine calls on every arrival while some worker is idle, and on every
completion), using the predicted tails at that moment; a worker's tail is its predicted remaining busy
time plus the predicted latencies of the queries already committed to it. An idle worker takes the head
of its own queue.
"""
from __future__ import annotations

from collections.abc import Sequence

from shared.kairos.predictor import LatencyPredictor
from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.profiles.format import ProfileSet


class ClockworkDispatch(DispatchPolicy):
    """Per-instance queues with QoS-aware, earliest-completion placement."""

    name = "clockwork"

    def __init__(self, latency: ProfileSet | LatencyPredictor) -> None:
        self.predictor = (
            latency if isinstance(latency, LatencyPredictor) else LatencyPredictor.from_profiles(latency)
        )
        #: worker id -> [(query id, variant, predicted ms)] in commit order
        self._queues: dict[str, list[tuple[str, str, float]]] = {}
        self._committed: set[str] = set()

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        self._forget_gone(queue, workers)
        tails = {
            w.worker_id: w.busy_remaining_ms + sum(ms for _, _, ms in self._queues.get(w.worker_id, ()))
            for w in workers
        }
        for query in queue:
            if query.query_id not in self._committed:
                self._commit(now_s, query, workers, tails)
        assignments = []
        for worker in workers:
            pending = self._queues.get(worker.worker_id)
            if worker.idle and pending:
                query_id, variant, _ = pending.pop(0)
                self._committed.discard(query_id)
                assignments.append(Assignment(worker.worker_id, variant, (query_id,)))
        return DispatchDecision(assignments=tuple(assignments))

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        self.predictor.observe(device, variant, batch_size, latency_ms)

    def _commit(
        self, now_s: float, query: PendingQuery, workers: Sequence[WorkerView], tails: dict[str, float]
    ) -> None:
        waited_ms = (now_s - query.arrival_s) * 1000.0
        best = None  # (misses QoS, predicted completion, fleet order)
        predicted: dict[tuple[str, str], float] = {}
        for order, worker in enumerate(workers):
            variant = next((v for v in query.candidate_variants if v in worker.variants), None)
            if variant is None or query.batch_size > worker.max_batch:
                continue
            latency = predicted.get((worker.device, variant))
            if latency is None:
                latency = predicted[(worker.device, variant)] = float(
                    self.predictor.predict(worker.device, variant, [query.batch_size])[0]
                )
            finish_ms = tails[worker.worker_id] + latency
            key = (waited_ms + finish_ms > query.budget_ms, finish_ms, order)
            if best is None or key < best[0]:
                best = (key, worker.worker_id, variant, latency)
        if best is None:
            return
        _, worker_id, variant, latency = best
        self._queues.setdefault(worker_id, []).append((query.query_id, variant, latency))
        self._committed.add(query.query_id)
        tails[worker_id] += latency

    def _forget_gone(self, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]) -> None:
        """Drop commitments to workers that left the fleet or of queries no longer queued."""
        queued = {q.query_id for q in queue}
        present = {w.worker_id for w in workers}
        for worker_id, entries in self._queues.items():
            kept = [e for e in entries if worker_id in present and e[0] in queued]
            if len(kept) != len(entries):
                self._committed.difference_update({e[0] for e in entries} - {e[0] for e in kept})
                self._queues[worker_id] = kept
