"""`ProteusDispatch`: the per-application load balancers and per-device batching as one `DispatchPolicy`.

Every new query is routed once, at first sight, to a worker: by the latest plan's shares of the
application's variants (``routing="plan"``), each variant's share split over the workers hosting it in
proportion to their capacity (`shared.proteus.capacity.peak_throughput`), with a smooth weighted
round-robin per application. It then waits in that worker's queue until the batching policy runs it or
gives up on it (an explicit drop with a reason). Before any plan, or when no worker hosts a variant the
plan routes to, an application's queries go to every worker hosting one of their candidate variants,
in proportion to capacity.

When a worker disappears or stops hosting a query's variant (a new plan was applied), its queued
queries are routed again. A query no worker can serve waits, and is dropped once its deadline passes.

Non-work-conserving batching needs to be asked again when its wait ends: `next_wakeup_s` says when.
The simulator schedules that; a caller that only steps periodically should pass its step as
``decision_interval_s`` so a batch is sent at the last step before its deadline rather than after.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from shared.policy.base import (
    Assignment,
    DispatchDecision,
    DispatchPolicy,
    FleetPlan,
    PendingQuery,
    WorkerView,
)
from shared.profiles.format import ProfileSet
from shared.proteus.batching import QueueBatching, make_batching
from shared.proteus.capacity import device_memory, peak_throughput
from shared.proteus.router import SmoothWeightedRouter

Routing = Literal["plan", "uniform", "least_loaded"]
_ROUTINGS = ("plan", "uniform", "least_loaded")
#: a query's (worker id, variant), or None while no worker can take it
_Home = tuple[str, str] | None


class ProteusDispatch(DispatchPolicy):
    """Route by the plan's shares, queue per worker, batch per the batching policy.

    Parameters
    ----------
    profiles : latency profiles (capacities for the split, latencies for batching).
    batching : ``proteus`` (default), ``nexus``, ``aimd``, ``fixed``, ``timer``, or a policy object.
    batching_options : keyword options of the named batching policy (e.g. ``{"size": 1}``).
    routing : ``plan`` (default); ``uniform``, every worker hosting a candidate variant alike (the
        "w/o query assignment" ablation); ``least_loaded``, INFaaS's choice of the most accurate worker
        with room in its next batch, else the least loaded one.
    batch_sizes, memory_mb : allowed batch sizes and device memory for the capacity rule.
    decision_interval_s : how often the caller calls `decide` when `next_wakeup_s` is not honoured.
    """

    name = "proteus"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        batching: str | QueueBatching = "proteus",
        batching_options: Mapping[str, Any] | None = None,
        routing: Routing = "plan",
        batch_sizes: Iterable[int] | None = None,
        memory_mb: Mapping[str, float] | None = None,
        decision_interval_s: float = 0.0,
    ) -> None:
        if routing not in _ROUTINGS:
            raise ValueError(f"`routing` must be one of {_ROUTINGS}, got {routing!r}")
        if not decision_interval_s >= 0:
            raise ValueError(f"`decision_interval_s` must be >= 0, got {decision_interval_s}")
        sizes = None if batch_sizes is None else tuple(batch_sizes)
        if isinstance(batching, str):
            batching = make_batching(batching, profiles, batch_sizes=sizes, memory_mb=memory_mb,
                                     **dict(batching_options or {}))
        elif batching_options:
            raise ValueError("`batching_options` only applies to a batching policy given by name")
        self.batching = batching
        self._profiled = {(p.variant, p.device) for p in profiles.variants}
        self._routing = routing
        self._sizes = sizes
        self._memory = memory_mb
        self._lookahead = decision_interval_s
        self._plan: FleetPlan | None = None
        #: the learned profiles' version the capacities were computed with
        self._version = 0
        self._workers: dict[str, WorkerView] = {}
        self._signature: tuple = ()
        self._routers: dict[tuple[str, tuple[str, ...], float], SmoothWeightedRouter | None] = {}
        self._capacity: dict[tuple[str, str, float], float] = {}
        #: worker id -> variant -> its queue, in routing order
        self._queues: dict[str, dict[str, deque[PendingQuery]]] = {}
        self._home: dict[str, _Home] = {}
        self._unrouted: dict[str, PendingQuery] = {}
        #: queries added since the last decision, routed once the workers are known
        self._fresh: dict[str, PendingQuery] = {}
        self._wake: dict[str, float] = {}
        self._dirty: set[str] = set()
        #: a new plan may give waiting queries a worker: route them again at the next decision
        self._retry_unrouted = False

    # -- the DispatchPolicy contract ------------------------------------------------------------
    def on_plan(self, plan: FleetPlan) -> None:
        """Adopt a successful plan's routing shares (an infeasible plan changes nothing)."""
        if plan.success:
            self._plan = plan
            self._retry_unrouted = True

    def on_profiles(self, profiles: ProfileSet) -> None:
        """Batch on these profiles and weigh the plan's shares by the capacities they give."""
        self.batching.on_profiles(profiles)
        self._profiled = {(p.variant, p.device) for p in profiles.variants}
        self._version = self.batching.learned.version
        self._capacity.clear()
        self._routers.clear()

    def on_query_added(self, query: PendingQuery) -> None:
        self._fresh[query.query_id] = query

    def on_query_removed(self, query_id: str) -> None:
        if self._fresh.pop(query_id, None) is not None or self._unrouted.pop(query_id, None) is not None:
            self._home.pop(query_id, None)
            return
        home = self._home.pop(query_id, None)
        if home is not None:
            worker_id, variant = home
            q = self._queues[worker_id][variant]
            q.remove(next(x for x in q if x.query_id == query_id))

    def decide(self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]) -> DispatchDecision:
        if self.batching.learned.version != self._version:  # the devices serve at another rate than profiled
            self._version = self.batching.learned.version
            self._capacity.clear()
            self._routers.clear()
        self._sync_workers(workers)
        dropped: list[tuple[str, str]] = []
        for query in self._fresh.values():
            self._route(query)
        self._fresh.clear()
        self._drop_unroutable(now_s, dropped)
        assignments: list[Assignment] = []
        for worker_id in list(self._dirty | {w for w, t in self._wake.items() if t <= now_s + self._lookahead}):
            worker = self._workers.get(worker_id)
            if worker is None or worker.inflight:
                continue
            self._dirty.discard(worker_id)
            self._wake.pop(worker_id, None)
            assignment = self._serve(now_s, worker, dropped)
            if assignment is not None:
                assignments.append(assignment)
        if not assignments and not dropped:
            return DispatchDecision.make_empty()
        return DispatchDecision(assignments=tuple(assignments), dropped=tuple(dropped))

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        self.batching.observe(device, variant, batch_size, latency_ms)

    def next_wakeup_s(self) -> float | None:
        """When a worker's waiting batch must be reconsidered although nothing else happens."""
        return min(self._wake.values(), default=None)

    def queued(self, worker_id: str) -> int:
        """Queries routed to ``worker_id`` and not sent yet."""
        return sum(len(q) for q in self._queues.get(worker_id, {}).values())

    # -- workers and plans ------------------------------------------------------------------------
    def _sync_workers(self, workers: Sequence[WorkerView]) -> None:
        views = {w.worker_id: w for w in workers}
        for worker_id, view in views.items():
            old = self._workers.get(worker_id)
            if old is not None and old.inflight and not view.inflight:
                self._dirty.add(worker_id)  # it just finished a batch
        self._workers = views
        signature = tuple((w.worker_id, w.device, w.variants, w.max_batch) for w in workers)
        if signature == self._signature and not self._retry_unrouted:
            return
        self._signature = signature
        self._retry_unrouted = False
        self._routers.clear()
        stranded: list[PendingQuery] = list(self._unrouted.values())
        self._unrouted.clear()
        for worker_id in list(self._queues):
            view = views.get(worker_id)
            for variant in list(self._queues[worker_id]):
                if view is None or variant not in view.variants:
                    stranded.extend(self._queues[worker_id].pop(variant))
            if not self._queues[worker_id]:
                del self._queues[worker_id]
                self._wake.pop(worker_id, None)
        for query in sorted(stranded, key=lambda q: q.arrival_s):
            self._route(query)
        self._dirty.update(w.worker_id for w in workers if not w.inflight)

    def _route(self, query: PendingQuery) -> None:
        target = self._least_loaded(query) if self._routing == "least_loaded" else self._weighted(query)
        if target is None:
            self._home[query.query_id] = None
            self._unrouted[query.query_id] = query
            return
        worker_id, variant = target
        self._home[query.query_id] = target
        self._queues.setdefault(worker_id, {}).setdefault(variant, deque()).append(query)
        self._dirty.add(worker_id)

    def _weighted(self, query: PendingQuery) -> tuple[str, str] | None:
        key = (query.application, query.candidate_variants, query.slo_ms)
        if key not in self._routers:
            self._routers[key] = self._make_router(*key)
        router = self._routers[key]
        return None if router is None else router.pick()

    def _make_router(self, application: str, candidates: tuple[str, ...], slo_ms: float) -> SmoothWeightedRouter | None:
        """Weights per (worker, variant): each planned variant's share split over the workers hosting it by
        capacity. A worker may host several variants (plans route, the fleet stays): it then serves each
        planned one its share, not always its most accurate."""
        hosting = [w for w in self._workers.values() if self._hosted(w, candidates) is not None]
        shares = (self._plan.routing.get(application, {}) if self._plan is not None else {})
        placed = self._placed()
        weights: dict[tuple[str, str], float] = {}
        if self._routing == "uniform":
            weights = {(w.worker_id, self._hosted(w, candidates)): 1.0 for w in hosting}
        else:
            for variant, share in shares.items():
                if variant not in candidates or share <= 0:
                    continue
                able = [w for w in hosting if variant in w.variants and (variant, w.device) in self._profiled]
                # the workers the plan places the variant on; those merely hosting it only if it placed none
                able = [w for w in able if variant in placed.get(w.worker_id, ())] or able
                caps = {w.worker_id: self._cap(w, variant, slo_ms) for w in able}
                total = sum(caps.values())
                for worker_id, cap in caps.items():
                    if total > 0:
                        weights[worker_id, variant] = weights.get((worker_id, variant), 0.0) + share * cap / total
            if not any(w > 0 for w in weights.values()):  # no plan yet, or nothing planned is up
                weights = {(w.worker_id, v): max(self._cap(w, v, slo_ms), 1e-6) for w in hosting
                           if (v := self._hosted(w, candidates)) is not None}
        return SmoothWeightedRouter(weights) if any(w > 0 for w in weights.values()) else None

    def _placed(self) -> dict[str, tuple[str, ...]]:
        """Worker id -> the variants the plan places on it. A plan places variants on device types; each
        placement goes to a worker of its type that hosts all its variants (else any of them), in id
        order. A worker that hosts more (the fleet stays while plans route) serves only its placement's:
        a device switching between variants batches each at a fraction of its rate, and falls short of
        the throughput the plan counted on."""
        if self._plan is None:
            return {}
        free = sorted(self._workers.values(), key=lambda w: w.worker_id)
        placed: dict[str, tuple[str, ...]] = {}
        for placement in self._plan.placements:
            fits = [w for w in free if w.device == placement.device]
            best = (next((w for w in fits if set(placement.variants) <= set(w.variants)), None)
                    or next((w for w in fits if set(placement.variants) & set(w.variants)), None))
            if best is not None:
                placed[best.worker_id] = placement.variants
                free.remove(best)
        return placed

    def _least_loaded(self, query: PendingQuery) -> tuple[str, str] | None:
        """INFaaS: the least loaded worker of the most accurate variant with room in its next batch."""
        for variant in query.candidate_variants:  # most accurate first
            roomy = []
            for w in self._workers.values():
                if variant in w.variants and (variant, w.device) in self._profiled:
                    queued = self.queued(w.worker_id) + w.inflight
                    if queued < self.batching.max_rows(w, variant, query.slo_ms):
                        roomy.append((queued / max(self._cap(w, variant, query.slo_ms), 1e-6), w.worker_id))
            if roomy:
                return min(roomy)[1], variant
        loads = [((self.queued(w.worker_id) + w.inflight) / max(self._cap(w, v, query.slo_ms), 1e-6), w.worker_id, v)
                 for w in self._workers.values() if (v := self._hosted(w, query.candidate_variants)) is not None]
        if not loads:
            return None
        _, worker_id, variant = min(loads)
        return worker_id, variant

    def _hosted(self, worker: WorkerView, candidates: tuple[str, ...]) -> str | None:
        return next((v for v in candidates if v in worker.variants and (v, worker.device) in self._profiled), None)

    def _cap(self, worker: WorkerView, variant: str | None, slo_ms: float) -> float:
        if variant is None:
            return 0.0
        key = (worker.device, variant, slo_ms)
        cap = self._capacity.get(key)
        if cap is None:
            cap = self._capacity[key] = peak_throughput(self.batching.profile(worker, variant), slo_ms,
                                                        batch_sizes=self._sizes,
                                                        memory_mb=device_memory(self._memory, worker.device))
        return cap

    # -- batching ---------------------------------------------------------------------------------
    def _drop_unroutable(self, now_s: float, dropped: list[tuple[str, str]]) -> None:
        for query_id, query in list(self._unrouted.items()):
            if now_s >= query.deadline_s:
                del self._unrouted[query_id]
                del self._home[query_id]
                dropped.append((query_id, "no worker hosts a variant for it; deadline passed"))

    def _serve(self, now_s: float, worker: WorkerView, dropped: list[tuple[str, str]]) -> Assignment | None:
        """Drop the hopeless, then start the ready queue with the earliest head deadline, if any."""
        queues = self._queues.get(worker.worker_id)
        if not queues:
            return None
        ready: list[tuple[float, str, int]] = []
        wake = None
        for variant, q in queues.items():
            for _ in range(self.batching.num_hopeless(now_s, q, worker, variant)):
                query = q.popleft()
                del self._home[query.query_id]
                dropped.append((query.query_id, f"cannot finish within its {query.slo_ms:g} ms SLO on {worker.worker_id}"))
            if not q:
                continue
            rows = self.batching.batch_rows(now_s + self._lookahead, q, worker, variant)
            if rows > 0:
                ready.append((q[0].deadline_s, variant, rows))
            else:
                at = self.batching.wake_at_s(now_s, q, worker, variant)
                if at is not None:
                    wake = at if wake is None else min(wake, at)
        for variant in [v for v, q in queues.items() if not q]:
            del queues[variant]
        if wake is not None:
            self._wake[worker.worker_id] = wake
        if not ready:
            return None
        _, variant, rows = min(ready)
        q = queues[variant]
        # the batching policies count 1-row queries, as the paper's workloads have; a query of several
        # rows takes that many places, and a batch never exceeds the worker's max_batch
        budget, taken = min(rows, worker.max_batch), []
        while q and (not taken or budget - q[0].batch_size >= 0):
            budget -= q[0].batch_size
            taken.append(q.popleft().query_id)
        ids = tuple(taken)
        for query_id in ids:
            del self._home[query_id]
        if not q:
            del queues[variant]
        self._wake.pop(worker.worker_id, None)
        return Assignment(worker.worker_id, variant, ids)
