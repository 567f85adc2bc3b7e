"""Ribbon's query distribution: first come, first served, base instances preferred (Kairos §7).

Ribbon searches configurations with Bayesian optimisation but distributes queries naively: the queue head
goes to an idle instance, base types first, then in fleet order. One query per instance; QoS is not
considered. (Unlike `FcfsDispatch`, queries are never merged into one batch: Kairos queries arrive
pre-batched.)
"""
from __future__ import annotations

from collections.abc import Sequence

from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView


class RibbonDispatch(DispatchPolicy):
    """FCFS to idle workers ranked by ``preferred_devices`` (base first), then fleet order."""

    name = "ribbon"

    def __init__(self, *, preferred_devices: Sequence[str]) -> None:
        self._rank = {device: r for r, device in enumerate(preferred_devices)}

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        idle = sorted(
            (w for w in workers if w.idle), key=lambda w: self._rank.get(w.device, len(self._rank))
        )
        assignments = []
        for query in queue:
            if not idle:
                break
            for k, worker in enumerate(idle):
                variant = next((v for v in query.candidate_variants if v in worker.variants), None)
                if variant is not None and query.batch_size <= worker.max_batch:
                    assignments.append(Assignment(worker.worker_id, variant, (query.query_id,)))
                    del idle[k]
                    break
        return DispatchDecision(assignments=tuple(assignments))
