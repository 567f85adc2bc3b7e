"""DeepRecSys-style distribution: a static size threshold splits queries between base and auxiliaries.

Queries larger than ``threshold`` wait in a FIFO for base instances, the rest in a FIFO for auxiliary
instances (spec §8.12). The threshold is tuned per configuration by hill climbing on the 10-grid
(`hill_climb_threshold`), as DeepRecSys does. If a configuration has no instance of one side, that side's
queries use the other, so nothing starves.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView


class DrsDispatch(DispatchPolicy):
    """Size > ``threshold`` -> a base instance; otherwise -> an auxiliary instance; FIFO within each."""

    name = "drs"

    def __init__(self, *, threshold: int, base_devices: Collection[str]) -> None:
        self.threshold = threshold
        self._base = frozenset(base_devices)

    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        has_base = any(w.device in self._base for w in workers)
        has_aux = any(w.device not in self._base for w in workers)
        idle = [w for w in workers if w.idle]
        assignments = []
        for query in queue:
            if not idle:
                break
            wants_base = (query.batch_size > self.threshold and has_base) or not has_aux
            for k, worker in enumerate(idle):
                if (worker.device in self._base) != wants_base or query.batch_size > worker.max_batch:
                    continue
                variant = next((v for v in query.candidate_variants if v in worker.variants), None)
                if variant is not None:
                    assignments.append(Assignment(worker.worker_id, variant, (query.query_id,)))
                    del idle[k]
                    break
        return DispatchDecision(assignments=tuple(assignments))


@dataclass(frozen=True, slots=True)
class HillClimbResult:
    threshold: int
    value: float
    #: threshold -> value, every point evaluated
    evaluated: dict[int, float]


def hill_climb_threshold(
    evaluate: Callable[[int], float],
    *,
    start: int,
    low: int = 0,
    high: int = 1000,
    step: int = 100,
    min_step: int = 10,
) -> HillClimbResult:
    """Move the threshold while ``evaluate`` improves, halving the step (down to ``min_step``) when stuck.

    Each point is evaluated once; thresholds stay on multiples of ``min_step`` within ``[low, high]``.
    """
    if not low <= start <= high or min_step < 1 or step < min_step:
        raise ValueError("need `low` <= `start` <= `high` and `step` >= `min_step` >= 1")
    seen: dict[int, float] = {}

    def value(t: int) -> float:
        if t not in seen:
            seen[t] = evaluate(t)
        return seen[t]

    best = start
    while True:
        neighbours = [t for t in (best - step, best + step) if low <= t <= high]
        better = max(neighbours, key=value, default=None)
        if better is not None and value(better) > value(best):
            best = better
        elif step > min_step:
            step = max(min_step, step // 2 // min_step * min_step)
        else:
            return HillClimbResult(best, value(best), seen)
