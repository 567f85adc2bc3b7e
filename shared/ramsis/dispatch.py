"""`RamsisDispatch`: round-robin to per-worker deadline queues, then each idle worker's MS policy (spec §3.8).

Every query, in arrival order, goes to the next worker of the ring (strict rotation, busy or not: the
MDP's transition model assumes exactly every K-th arrival). When a worker is idle and its queue is not
empty, the state ``(n, quantised earliest slack)`` picks ``(model, batch)`` in the policy for the current
K and load: the lowest-load policy that covers the 500 ms moving-average load. Nothing is dropped:
beyond the policy's queue length the whole queue goes to the fastest model.

The live scheduler and the simulator use it unchanged. Workers may come and go (K is the number of
eligible workers seen now; a vanished worker's queue is re-dealt). When no policy covers the load, the
dispatch records the request (`missing_load`) and keeps serving with the highest-load policy it has;
a synchronous ``generator`` (simulator, tests) solves it on the spot, a service solves it in the
background and hands it over with `add_policy` (see `fill_missing`).
"""
from __future__ import annotations

import bisect
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.profiles.format import ProfileSet
from shared.ramsis.generator import PolicyGenerator
from shared.ramsis.monitor import LoadMonitor
from shared.ramsis.policy import PolicySet, RamsisPolicy
from shared.ramsis.problem import build_problem

_log = logging.getLogger(__name__)

#: (deadline in s, sequence, query): a worker queue sorts by deadline, then arrival
_Item = tuple[float, int, PendingQuery]


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    """A (K, load) no policy of the set covers: what a background generator should solve next."""

    workers: int
    rate_qps: float


class RamsisDispatch(DispatchPolicy):
    """RAMSIS online: load balancer, load monitor and per-worker model selectors.

    Parameters
    ----------
    profiles : latency profiles (fallback choices and per-model batch limits).
    policy_set : the offline policies (e.g. `shared.adapters.ramsis_store.RedisPolicyStore.load`); may be empty.
    generator : ``(workers, rate_qps) -> policy``, called synchronously in `decide` when no policy
        covers the load. Leave it None in a live service and run `fill_missing` in the background.
    family, slo_ms, delta, max_queue : with neither ``policy_set`` nor ``generator``, build a small
        `PolicyGenerator` for ``family`` on the fly (``slo_ms`` defaults to the profile set's SLO).
    device : the worker type the policies are for (default: theirs); other workers get no queries.
    rate_qps : a known load, instead of the monitor (the paper's "perfect" monitor at constant load).
    window_s : the load monitor's window.
    headroom : a missing policy is requested for the load times ``1 + headroom``.
    """

    name = "ramsis"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        policy_set: PolicySet | None = None,
        generator: Callable[[int, float], RamsisPolicy] | None = None,
        family: str | None = None,
        slo_ms: float | None = None,
        delta: int = 10,
        max_queue: int = 16,
        device: str | None = None,
        rate_qps: float | None = None,
        window_s: float = 0.5,
        headroom: float = 0.1,
    ) -> None:
        if rate_qps is not None and not rate_qps > 0:
            raise ValueError(f"`rate_qps` must be > 0, got {rate_qps}")
        if not headroom >= 0:
            raise ValueError(f"`headroom` must be >= 0, got {headroom}")
        policy_set = policy_set if policy_set is not None else PolicySet()
        if not len(policy_set) and generator is None:
            if family is None:
                raise ValueError("give a non-empty `policy_set`, a `generator`, or a `family` to build one from")
            problem = build_problem(
                profiles, family=family, slo_ms=slo_ms if slo_ms is not None else profiles.slo_ms[family],
                device=device, delta=delta, max_queue=max_queue,
            )
            generator = PolicyGenerator(problem)
        if len(policy_set):
            first = policy_set.policies[0]
            self._models, self._device = first.models, first.device
        elif isinstance(generator, PolicyGenerator):
            self._models, self._device = generator.problem.models, generator.problem.device
        else:
            raise ValueError("with an empty `policy_set`, `generator` must be a `PolicyGenerator`")
        self._device = device if device is not None else self._device
        self._profiles = profiles
        self._set = policy_set
        self._generator = generator
        self._known_rate = rate_qps
        self._monitor = LoadMonitor(window_s=window_s)
        self._headroom = headroom
        self._missing: PolicyRequest | None = None
        self._warned: set[int] = set()
        self._ring: list[str] = []
        self._next = 0
        self._queues: dict[str, list[_Item]] = {}
        self._owner: dict[str, str] = {}
        #: queries added since the last decision, dealt round-robin once a worker is there
        self._fresh: dict[str, PendingQuery] = {}
        self._seq = itertools.count()

    def on_profiles(self, profiles: ProfileSet) -> None:
        """Fall back and bound batches by these profiles; the MDP policies stay as they were solved, for
        one device type's profile (`device`), offline."""
        self._profiles = profiles

    # -- the background-generation interface ----------------------------------------------------
    @property
    def policy_set(self) -> PolicySet:
        return self._set

    def missing_load(self) -> PolicyRequest | None:
        """The latest (K, load) no policy covered, or None while the set covers what it sees."""
        return self._missing

    def add_policy(self, policy: RamsisPolicy) -> None:
        """Make a newly generated policy available (safe to call from another thread)."""
        self._set = self._set.with_policy(policy)
        missing = self._missing
        if missing is not None and policy.workers == missing.workers and policy.rate_qps >= missing.rate_qps:
            self._missing = None  # answered: do not solve it again before the next decision looks

    # -- the queue, as the serving core tells it --------------------------------------------------
    def on_query_added(self, query: PendingQuery) -> None:
        self._fresh[query.query_id] = query

    def on_query_removed(self, query_id: str) -> None:
        if self._fresh.pop(query_id, None) is not None:
            return
        worker_id = self._owner.pop(query_id, None)
        if worker_id is not None:
            items = self._queues[worker_id]
            items[:] = [item for item in items if item[2].query_id != query_id]

    # -- decisions ------------------------------------------------------------------------------
    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        eligible = [
            w for w in workers if w.device == self._device and any(m in w.variants for m in self._models)
        ]
        self._update_ring(eligible)
        if not self._ring:
            return DispatchDecision.make_empty()
        dropped = self._take_new()
        idle = {w.worker_id: w for w in eligible if w.idle and self._queues[w.worker_id]}
        if not idle:
            return DispatchDecision(dropped=dropped)
        rate = self._known_rate if self._known_rate is not None else self._monitor.rate(now_s)
        policy = self._policy(len(self._ring), rate)
        assignments = []
        for worker_id in self._ring:
            view = idle.get(worker_id)
            if view is not None:
                assignment = self._serve(now_s, policy, view, self._queues[worker_id])
                if assignment is not None:
                    assignments.append(assignment)
        return DispatchDecision(assignments=tuple(assignments), dropped=dropped)

    def _take_new(self) -> tuple[tuple[str, str], ...]:
        """Deal the new queries round-robin; drop those no model of the policies serves."""
        dropped = []
        for q in self._fresh.values():
            if not any(m in q.candidate_variants for m in self._models):
                dropped.append((q.query_id, f"RAMSIS serves {list(self._models)}; none is a candidate"))
                continue
            self._monitor.record(q.arrival_s)
            self._deal((q.deadline_s, next(self._seq), q))
        self._fresh.clear()
        return tuple(dropped)

    def _deal(self, item: _Item) -> None:
        worker_id = self._ring[self._next]
        self._next = (self._next + 1) % len(self._ring)
        bisect.insort(self._queues[worker_id], item)
        self._owner[item[2].query_id] = worker_id

    def _update_ring(self, eligible: Sequence[WorkerView]) -> None:
        ids = [w.worker_id for w in eligible]
        if len(ids) == len(self._ring) and set(ids) == set(self._ring):
            return
        current = set(ids)
        orphans = sorted(item for w in self._ring if w not in current for item in self._queues.pop(w))
        known = set(self._ring)
        self._ring = [w for w in self._ring if w in current] + [w for w in ids if w not in known]
        for worker_id in self._ring:
            self._queues.setdefault(worker_id, [])
        self._next = self._next % len(self._ring) if self._ring else 0
        for item in orphans:
            del self._owner[item[2].query_id]
            if self._ring:
                self._deal(item)
        _log.info("RAMSIS now balances over %d workers", len(self._ring))

    def _policy(self, workers: int, rate: float | None) -> RamsisPolicy | None:
        policies = self._set
        found = policies.highest(workers) if rate is None else policies.lookup(workers, rate)
        if found is not None:
            self._missing = None
            return found
        target = max(rate or 0.0, 1.0 / self._monitor.window_s) * (1.0 + self._headroom)
        self._missing = PolicyRequest(workers, target)
        if self._generator is not None:
            policy = self._generator(workers, target)
            self.add_policy(policy)
            self._missing = None
            return policy
        fallback = policies.highest(workers)
        if fallback is None and policies.workers:
            nearest = min(policies.workers, key=lambda k: (abs(k - workers), -k))
            per_worker = (rate or 0.0) * nearest / workers  # the same load per worker
            fallback = policies.lookup(nearest, per_worker) or policies.highest(nearest)
            self._warn(workers, f"no RAMSIS policy for {workers} workers; using the {nearest}-worker policy "
                                f"at {fallback.rate_qps:g} QPS (same per-worker load) until one is generated")
        elif fallback is None:
            self._warn(workers, "no RAMSIS policy at all; serving each queue on the most accurate model that "
                                "meets its earliest deadline until one is generated")
        return fallback

    def _warn(self, workers: int, message: str) -> None:
        if workers not in self._warned:
            self._warned.add(workers)
            _log.warning(message)

    def _serve(
        self, now_s: float, policy: RamsisPolicy | None, worker: WorkerView, items: list[_Item]
    ) -> Assignment | None:
        n = len(items)
        head = items[0][2]
        slack_ms = (items[0][0] - now_s) * 1000.0
        hosted = [m for m in self._models if m in worker.variants]
        if policy is not None:
            model, size = policy.action(n, slack_ms)
            variant = policy.models[model]
        else:
            variant, size = None, n
        if variant not in worker.variants:
            variant = self._best_meeting(hosted, size, slack_ms)
        if variant not in head.candidate_variants:
            options = [v for v in head.candidate_variants if v in worker.variants]
            if not options:
                return None
            variant = options[0]
        limit = min(worker.max_batch, self._max_batch(variant))
        batch, rows = [], 0
        for _, _, q in items[:size]:
            if variant in q.candidate_variants and rows + q.batch_size <= limit:
                batch.append(q)
                rows += q.batch_size
        if not batch:
            return None
        taken = {q.query_id for q in batch}
        items[:] = [item for item in items if item[2].query_id not in taken]
        for query_id in taken:
            del self._owner[query_id]
        return Assignment(worker.worker_id, variant, tuple(q.query_id for q in batch))

    def _best_meeting(self, hosted: Sequence[str], size: int, slack_ms: float) -> str:
        """The most accurate hosted model whose batch of ``size`` meets the slack, else the fastest."""
        latency = {m: self._latency(m, size) for m in hosted}
        meeting = [m for m in hosted if latency[m] <= slack_ms]
        if meeting:
            return max(meeting, key=lambda m: (self._profiles.get(m, self._device).accuracy or 0.0, -latency[m]))
        return min(hosted, key=lambda m: latency[m])

    def _max_batch(self, variant: str) -> float:
        try:
            return self._profiles.get(variant, self._device).max_batch
        except KeyError:  # a query's own variant, outside the policies' family: the worker's limit rules
            return math.inf

    def _latency(self, variant: str, size: int) -> float:
        profile = self._profiles.get(variant, self._device)
        return profile.latency_ms(size) if size <= max(profile.batch_latency_ms) else math.inf


def fill_missing(dispatch: RamsisDispatch, generator: Callable[[int, float], RamsisPolicy]) -> RamsisPolicy | None:
    """One step of a background generator: solve the dispatch's missing (K, load), if any, and hand it over.

    A service runs this in a loop on a worker thread (policy generation takes seconds; `decide` must not).
    """
    request = dispatch.missing_load()
    if request is None:
        return None
    policy = generator(request.workers, request.rate_qps)
    dispatch.add_policy(policy)
    return policy
