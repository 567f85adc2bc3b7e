"""`PerApplicationDispatch`: each application served by a dispatch policy of its own, switchable while serving.

One core, one queue, one fleet, several policies. Each named application has its own policy object; every
other application shares the default one. The composite tells each policy only about its applications'
queries and, in `decide`, shows it only those; all policies see every worker, plan and finished batch.
Within one `decide` a worker one policy assigned is shown to the next as busy (not hidden: a policy
that routes per worker, like Proteus, would take a hidden worker for a lost one), and the policy asked
first rotates, so that no application always has the first pick of the idle workers.

`switch` hands one application to a new policy between two steps: the old policy forgets its queued
queries, the new one hears the latest plan, every worker and then each of those queries, in queue order;
batches in flight are not touched. Nothing queued is lost or served twice, and other applications do
not notice.

With one policy for all (no application named) every `decide` goes to the default policy with the core's
own queue and workers, so the scheduler decides exactly as with that policy alone.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schemas import WorkerEvent
from shared.policy.base import DispatchDecision, DispatchPolicy, FleetController, FleetPlan, PendingQuery, WorkerView

if TYPE_CHECKING:
    from shared.profiles.format import ProfileSet


@dataclass(slots=True)
class _Group:
    """A policy and the queued queries of the applications it serves, in the core's queue order."""

    policy: DispatchPolicy
    queued: dict[str, PendingQuery] = field(default_factory=dict)


class _GroupQueue(Sequence[PendingQuery]):
    """One group's queued queries as its policy sees them, without copying (cheap ``len``, iteration,
    prefix slices), like the core's own queue view."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, PendingQuery]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[PendingQuery]:
        return iter(self._items.values())

    def __reversed__(self) -> Iterator[PendingQuery]:
        return reversed(self._items.values())

    def __getitem__(self, index):  # type: ignore[override]
        prefix = isinstance(index, slice) and index.start in (None, 0) and index.step in (None, 1)
        if prefix and index.stop is not None and index.stop >= 0:
            return list(itertools.islice(self._items.values(), index.stop))
        if isinstance(index, int) and 0 <= index:
            return next(itertools.islice(self._items.values(), index, None))
        return list(self._items.values())[index]


class PerApplicationDispatch(DispatchPolicy):
    """Route each application's queries to its own dispatch policy; see the module docstring.

    Parameters
    ----------
    default : serves every application not named in ``policies``.
    policies : application -> the policy that serves it; each a distinct object.
    """

    name = "per-application"

    def __init__(self, default: DispatchPolicy, policies: Mapping[str, DispatchPolicy] | None = None) -> None:
        policies = dict(policies or {})
        objects = [default, *policies.values()]
        if len({id(p) for p in objects}) < len(objects):
            raise ValueError("`policies` must hold a distinct policy object per application, other than `default`")
        self._default = _Group(default)
        self._own = {application: _Group(policy) for application, policy in policies.items()}
        #: what a policy that starts serving must be told: every worker as last heard of, and the latest plan
        self._workers: dict[str, WorkerView] = {}
        self._plan: FleetPlan | None = None
        #: a lost worker's queries went back to the head of the core's queue: take the order from it again
        self._reorder = False
        self._turn = 0

    # -- which policy serves what ---------------------------------------------------------------
    def policy_of(self, application: str) -> str:
        """The registry name of the policy serving ``application`` (a metric label)."""
        return self._group(application).policy.name

    def running(self, name: str) -> list[DispatchPolicy]:
        """The policies of registry name ``name`` serving now (for services that feed them: metadata, new
        RAMSIS policies)."""
        return [group.policy for group in self._groups() if group.policy.name == name]

    def switch(self, application: str, policy: DispatchPolicy) -> None:
        """Serve ``application`` with ``policy`` (a new object) from the next `decide` on; call between steps."""
        if any(policy is group.policy for group in self._groups()):
            raise ValueError("`policy` already serves other applications: give a new policy object")
        old = self._own.pop(application, None)
        if old is None:  # it shared the default policy: take its queries out, keeping their order
            moved = {qid: q for qid, q in self._default.queued.items() if q.application == application}
            for query_id in moved:
                del self._default.queued[query_id]
            old = _Group(self._default.policy, moved)
        for query_id in old.queued:
            old.policy.on_query_removed(query_id)
        if self._plan is not None:
            policy.on_plan(self._plan)
        for view in self._workers.values():
            policy.on_worker_joined(view)
        for query in old.queued.values():
            policy.on_query_added(query)
        self._own[application] = _Group(policy, old.queued)

    # -- the DispatchPolicy contract --------------------------------------------------------------
    def on_query_added(self, query: PendingQuery) -> None:
        group = self._group(query.application)
        group.queued[query.query_id] = query
        group.policy.on_query_added(query)

    def on_query_removed(self, query_id: str) -> None:
        for group in self._groups():
            if group.queued.pop(query_id, None) is not None:
                group.policy.on_query_removed(query_id)
                return

    def decide(self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]) -> DispatchDecision:
        groups = [group for group in self._groups() if group.queued]
        if len(groups) == 1:  # every waiting query is this policy's: it sees the core's own queue
            decision = groups[0].policy.decide(now_s, queue, workers)
            self._forget_decided(groups[0], decision)
            return decision
        if not groups:
            return DispatchDecision.make_empty()
        if self._reorder:
            self._reorder_from(queue)
        self._turn += 1
        first = self._turn % len(groups)
        assignments, dropped, loads = [], [], []
        shown = workers
        for group in groups[first:] + groups[:first]:
            decision = group.policy.decide(now_s, _GroupQueue(group.queued), shown)
            if not decision:
                continue
            self._forget_decided(group, decision)
            assignments += decision.assignments
            dropped += decision.dropped
            loads += decision.loads
            if decision.assignments:
                taken = {a.worker_id for a in assignments}
                shown = [w._replace(inflight=w.inflight + 1) if w.worker_id in taken else w for w in workers]
        if not (assignments or dropped or loads):
            return DispatchDecision.make_empty()
        return DispatchDecision(tuple(assignments), tuple(dropped), tuple(loads))

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        for group in self._groups():
            group.policy.on_batch_finished(device, variant, batch_size, latency_ms)

    def on_worker_joined(self, worker: WorkerView) -> None:
        self._workers[worker.worker_id] = worker
        for group in self._groups():
            group.policy.on_worker_joined(worker)

    def on_worker_lost(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)
        self._reorder = True
        for group in self._groups():
            group.policy.on_worker_lost(worker_id)

    def on_plan(self, plan: FleetPlan) -> None:
        self._plan = plan
        for group in self._groups():
            group.policy.on_plan(plan)

    def on_profiles(self, profiles: ProfileSet) -> None:
        for group in self._groups():
            group.policy.on_profiles(profiles)

    def on_worker_event(self, event: WorkerEvent, now_s: float) -> None:
        for group in self._groups():
            group.policy.on_worker_event(event, now_s)

    def next_wakeup_s(self) -> float | None:
        wakeups = [t for group in self._groups() if (t := group.policy.next_wakeup_s()) is not None]
        return min(wakeups, default=None)

    # -- internals ------------------------------------------------------------------------------
    def _group(self, application: str) -> _Group:
        return self._own.get(application, self._default)

    def _groups(self) -> list[_Group]:
        return [self._default, *self._own.values()]

    def _forget_decided(self, group: _Group, decision: DispatchDecision) -> None:
        """The core takes assigned and dropped queries out of its queue without telling the policy."""
        for assignment in decision.assignments:
            for query_id in assignment.query_ids:
                group.queued.pop(query_id, None)
        for query_id, _ in decision.dropped:
            group.queued.pop(query_id, None)

    def _reorder_from(self, queue: Sequence[PendingQuery]) -> None:
        for group in self._groups():
            group.queued = {}
        for query in queue:
            self._group(query.application).queued[query.query_id] = query
        self._reorder = False


@dataclass
class PerApplicationPlanning(FleetController):
    """A planning loop per application as one controller (the simulator drives one): each hears its
    application's query sizes and every worker event; a call returns the first plan made, and the next
    loop due plans on the next call."""

    loops: Mapping[str, FleetController]

    def on_worker_event(self, event: WorkerEvent) -> None:
        for loop in self.loops.values():
            loop.on_worker_event(event)

    def on_query_sizes(self, application: str, sizes: Sequence[int]) -> None:
        if (loop := self.loops.get(application)) is not None:
            loop.on_query_sizes(application, sizes)

    def control(self, now_s: float, arrivals: Mapping[str, int]) -> FleetPlan | None:
        for loop in self.loops.values():
            if (plan := loop.control(now_s, arrivals)) is not None:
                return plan
        return None
