"""`InfaasDispatch`: INFaaS's Dispatcher (Algorithm 1, spec §6.2) as a `DispatchPolicy`.

For each queued query, in arrival order, getVariant runs over the query's candidate variants (the
scheduler already filtered them by family and accuracy floor) with the live fleet: a worker's loaded
variants are Active instances unless the last metadata snapshot says Overloaded or Interfered; least
loaded means the shortest predicted busy time, then fewest inflight batches, then lowest monitored QPS.
A worker the snapshot shows above ``max_utilization`` is left out of the fleet, as
`FleetState.from_records` does: no query is routed to it by getVariant and no variant loaded on it.

INFaaS queues a query at a worker; Meridian holds it in one queue until a worker is idle. Two rules
carry the paper's over to that queue:

- **The SLO getVariant matches is the compute time the query has left** (its compute deadline less
  now), not the whole SLO: a query that waited has less, and may need a faster variant.
- **A busy worker's instance counts as Overloaded** while an idle worker's instance meets the goals
  (INFaaS' daemon would flag a worker queue that grows, two seconds late). If none does, the query waits
  for the busy worker's match only if that worker, through its current batch and the queries already
  waiting for it, still finishes it in time; else that instance too counts as Overloaded for the query.

- **Active** match on an idle worker: the query goes there with the queued queries after it, as many as
  finish the most of them by their deadlines (`most_in_time`), on the variant that finishes the most: of
  the query's candidates Active on that worker, getVariant's match first (it wins a tie). One query keeps
  getVariant's choice; a backlog the slow variant cannot clear in time runs on a faster one, as INFaaS'
  autoscaler would downgrade an Overloaded variant, but batch by batch.
- **Inactive** match: the decision asks for the (worker, variant) to be loaded (`DispatchDecision.loads`,
  once per ``reload_after_s`` while it is not loaded; never when the worker holds it already, as the
  least-utilized worker of a type may when its instance is Overloaded or Interfered: a worker holds a
  variant once; never when no worker of the type may take it, which is the VM-Autoscaler's to answer)
  and meanwhile serves the query on an idle worker that has some candidate loaded (shortest profiled
  latency first).
- **Suggestion** / nothing matches: served the same way, on the closest loaded candidate.

Static profiles are the catalogue's (the constructor's `ProfileSet`) at ``latency_quantile`` of their
measured samples (`shared.profiles.tail`: the median promises what a heavy-tailed CPU pair often
breaks), raised to what finished batches show (`LearnedProfiles`: compute and per-batch overhead), plus
the models the metadata store holds beyond them (registered models). Dynamic state (instance states,
utilization) comes from INFaaS' monitoring daemon (`InstanceMonitor`), which the policy runs itself on
the worker events the core hears (``monitor``), so that wherever it serves, live or simulated, with or
without a registry process, it sees Overloaded instances and busy workers; without ``monitor`` it comes
from `update_from_metadata`. A candidate with no profile at all is served only as a fallback, first
come, first served.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from schemas import BatchFinished, WorkerEvent
from shared.infaas.daemon import InstanceMonitor
from shared.infaas.monitor import MonitorConfig
from shared.infaas.records import (
    MAX_DISPATCH_UTILIZATION,
    FleetState,
    InstanceRecord,
    Key,
    MetadataSnapshot,
    VariantRecord,
)
from shared.infaas.select import Selection, SelectionStatus, VariantIndex, VariantQuery, get_variant
from shared.infaas.state import InstanceState
from shared.policy.base import Assignment, DispatchDecision, DispatchPolicy, PendingQuery, WorkerView
from shared.policy.deadlines import most_in_time
from shared.profiles.format import ProfileSet
from shared.profiles.learned import LearnedProfiles
from shared.profiles.tail import at_quantile

__all__ = ["InfaasDispatch"]

#: candidate lists whose index is kept; the scheduler produces one per (family, accuracy floor)
_MAX_CACHED_INDEXES = 1024

#: selections already made against one fleet state, by (candidates, rows, time left, instances left out):
#: queries with the same goals get the same answer until an assignment changes the fleet
_Selections = dict[tuple[tuple[str, ...], int, int, frozenset], Selection]
#: a fleet state and the selections made against it
_Fleet = tuple[FleetState, _Selections]


class InfaasDispatch(DispatchPolicy):
    """getVariant per query over live workers plus the metadata store's last snapshot.

    Parameters
    ----------
    profiles : ProfileSet, optional
        The catalogue's profiles: the static records (the metadata store's add the models it holds
        beyond them).
    reload_after_s : float
        A load asked for and not seen done is asked for again after this long.
    max_utilization : float
        Workers the last snapshot shows busier than this are left out of getVariant's fleet (the
        authors' artifact: 0.8; 1 keeps every worker: with one queue an idle worker is never overloaded).
    latency_quantile : float
        The quantile of each profiled batch size's measured samples the policy plans with.
    monitor : MonitorConfig, optional
        Run the monitoring daemon on the worker events (`on_worker_event`) with these thresholds, and serve
        from its snapshot each window; a metadata store's snapshot then adds registered models only. Needs
        ``profiles``.
    worker_timeout_s : float
        The daemon's: a worker silent this long is gone.
    """

    name = "infaas"

    def __init__(self, profiles: ProfileSet | None = None, *, reload_after_s: float = 5.0,
                 max_utilization: float = MAX_DISPATCH_UTILIZATION, monitor: MonitorConfig | None = None,
                 worker_timeout_s: float = 3.0, latency_quantile: float = 0.95) -> None:
        self._latency_quantile = latency_quantile
        self._catalogue: dict[Key, VariantRecord] = {}
        #: what batches show of the catalogue's profiles: its records follow them
        self._learned: LearnedProfiles | None = None
        #: the metadata store's records (registered models) from its last snapshot
        self._registered: dict[Key, VariantRecord] = {}
        self._by_key: dict[Key, VariantRecord] = {}
        self._records: dict[str, list[VariantRecord]] = {}
        self._indexes: dict[tuple[str, ...], VariantIndex] = {}
        self._instances: dict[tuple[str, str], InstanceRecord] = {}
        self._utilization: dict[str, float] = {}
        #: (worker id, variant) -> when its load was last asked for
        self._loads_asked: dict[tuple[str, str], float] = {}
        self._reload_after_s = reload_after_s
        self._max_utilization = max_utilization
        self._profiles = profiles
        self._monitor_config = monitor if profiles is not None else None
        self._worker_timeout_s = worker_timeout_s
        #: the monitoring daemon, from the first worker event on (``monitor``)
        self._daemon: InstanceMonitor | None = None
        if profiles:
            self.on_profiles(profiles)

    def on_profiles(self, profiles: ProfileSet) -> None:
        """The static records become these profiles (at the planning quantile), learned afresh from the
        batches that finish from now on; the monitoring daemon judges by them too."""
        if self._daemon is not None:
            self._daemon.profiles_changed(profiles)
        planned = at_quantile(profiles, self._latency_quantile)
        self._profiles = profiles
        self._learned = LearnedProfiles(planned)
        self._catalogue = _records(planned)
        self._set_static({**self._registered, **self._catalogue})

    def on_worker_event(self, event: WorkerEvent, now_s: float) -> None:
        """Learn from finished batches; feed the daemon and, at the end of each of its windows, serve from
        its snapshot."""
        if self._learned is not None and isinstance(event, BatchFinished):
            version = self._learned.version
            self._learned.observe_event(event)
            if self._learned.version != version:
                self._catalogue = _records(self._learned.profiles())
                self._set_static({**self._registered, **self._catalogue})
        if self._monitor_config is None:
            return
        if self._daemon is None:
            self._daemon = InstanceMonitor.in_memory(self._profiles, worker_timeout_s=self._worker_timeout_s,
                                                     start_s=now_s, config=self._monitor_config)
        self._daemon.observe(event, now_s)
        if now_s - self._daemon.last_flush_s >= self._monitor_config.window_s:
            self._daemon.flush(now_s)
            self._apply(self._daemon.store.snapshot(now_s))

    def update_from_metadata(self, snapshot: MetadataSnapshot) -> None:
        """Replace what the policy knows of the metadata store.

        The scheduler calls this every ~2 s with ``shared.adapters.infaas_store.RedisMetadataStore.snapshot()`` (read off its event
        loop); the simulator calls it directly. Indexes are rebuilt only when the static profiles changed.
        """
        self._registered = {r.key: r for r in snapshot.variants}
        self._set_static({**self._registered, **self._catalogue})
        if self._monitor_config is None:  # the policy's own daemon is the source of the dynamic state
            self._apply(snapshot)

    def _apply(self, snapshot: MetadataSnapshot) -> None:
        self._instances = {(i.variant, i.worker_id): i for i in snapshot.instances}
        self._utilization = {w.worker_id: w.utilization for w in snapshot.workers}

    def _set_static(self, by_key: dict[Key, VariantRecord]) -> None:
        if by_key == self._by_key:
            return
        self._by_key = by_key
        self._records = {}
        for record in by_key.values():
            self._records.setdefault(record.variant, []).append(record)
        self._indexes.clear()

    def decide(self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]) -> DispatchDecision:
        free = {w.worker_id: w for w in workers if w.idle}
        if not free or not queue:
            return DispatchDecision.make_empty()
        by_id = {w.worker_id: w for w in workers}
        loaded = {(w.worker_id, v) for w in workers for v in w.variants}
        self._loads_asked = {k: at for k, at in self._loads_asked.items() if k not in loaded}
        loads: list[tuple[str, str]] = []
        fleets = self._fleets(workers, free)
        taken: set[str] = set()
        #: (worker id, variant) of a busy worker -> rows of the queries this call left waiting for it
        waiting: dict[tuple[str, str], int] = {}
        assignments = []
        #: variants an idle worker holds; of the queries none of them serves, only the first of each candidate
        #: list is examined (for the load it may ask): the rest can only wait (a backlog must not cost a
        #: selection per query on every event while, say, another application's worker idles)
        servable = {v for w in free.values() for v in w.variants}
        examined: set[tuple[str, ...]] = set()
        for query in queue:
            if not free:
                break
            if query.query_id in taken:
                continue
            if servable.isdisjoint(query.candidate_variants):
                if query.candidate_variants in examined:
                    continue
                examined.add(query.candidate_variants)
            goals = _Goals.at(query, now_s)
            target = self._target(goals, fleets, free, by_id, waiting, now_s, loads, loaded)
            if target is None:
                continue
            worker, variant, active = target
            if active:  # the variant of the batch: of the worker's Active candidates, the one finishing most in time
                batch, variant = max(((self._batch(goals, queue, taken, worker, v, now_s, None), v)
                                      for v in self._active_on(worker, goals.query, variant)),
                                     key=lambda option: option[0][1])
            else:
                batch = self._batch(goals, queue, taken, worker, variant, now_s, fleets[0])
            assignments.append(Assignment(worker.worker_id, variant, batch[0]))
            taken.update(batch[0])
            del free[worker.worker_id]
            fleets = self._fleets(workers, free)
            servable = {v for w in free.values() for v in w.variants}
        return DispatchDecision(assignments=tuple(assignments), loads=tuple(loads))

    # -- internals ------------------------------------------------------------------------------
    def _select(self, goals: _Goals, fleet: FleetState, selections: _Selections,
                excluded: frozenset[Key] = frozenset()) -> Selection:
        key = (goals.query.candidate_variants, goals.query.batch_size, goals.left_ms, excluded)
        selection = selections.get(key)
        if selection is None:
            if excluded:
                fleet = FleetState({k: w for k, w in fleet.active.items() if k not in excluded}, fleet.placement)
            selection = selections[key] = get_variant(
                VariantQuery(goals.query.batch_size, goals.left_ms), self._index(goals.query.candidate_variants),
                fleet)
        return selection

    def _target(self, goals: _Goals, fleets: tuple[_Fleet, _Fleet], free: dict[str, WorkerView],
                by_id: dict[str, WorkerView], waiting: dict[tuple[str, str], int], now_s: float,
                loads: list[tuple[str, str]], loaded: set[tuple[str, str]]) -> tuple[WorkerView, str, bool] | None:
        """(worker, variant, whether it is the Active match), or None to keep the query waiting.

        getVariant first runs over the idle workers' instances: a busy worker's counts as Overloaded while
        an idle one meets the goals. Else the query waits for a busy worker's Active match only if that
        worker, through its current batch and the queries already waiting for it, still finishes this one
        in time; one that cannot counts as Overloaded for the query too.
        """
        selection = self._select(goals, *fleets[0])
        if selection.status is SelectionStatus.ACTIVE:
            return free[selection.worker_id], selection.variant, True
        excluded: frozenset[Key] = frozenset()
        while True:
            selection = self._select(goals, *fleets[1], excluded)
            if selection.status is not SelectionStatus.ACTIVE:
                break
            worker = by_id[selection.worker_id]
            if worker.worker_id in free:  # only for an instance the idle fleet leaves out (not Active there)
                return worker, selection.variant, True
            if self._can_wait(goals, worker, selection.variant, waiting):
                return None
            excluded |= {(selection.variant, selection.device)}
        if selection.status is SelectionStatus.INACTIVE and selection.worker_id is not None:
            key = (selection.worker_id, selection.variant)
            if key not in loaded and now_s - self._loads_asked.get(key, -math.inf) >= self._reload_after_s:
                self._loads_asked[key] = now_s
                loads.append(key)
        fallback = self._loaded_fallback(goals.query, free)
        return None if fallback is None else (*fallback, False)

    def _can_wait(self, goals: _Goals, worker: WorkerView, variant: str, waiting: dict[tuple[str, str], int]) -> bool:
        """Whether the busy ``worker`` finishes the query on ``variant`` in time after its current batch and the
        queries already waiting for it (in full batches, this one in the last); if so the query joins them."""
        record = self._by_key.get((variant, worker.device))
        if record is None:
            return False
        key = (worker.worker_id, variant)
        rows = waiting.get(key, 0) + goals.query.batch_size
        largest = min(worker.max_batch, record.max_rows)
        full, last = divmod(rows, largest)
        batches = [largest] * full + ([last] if last else [])
        latencies = [record.latency_ms(b) for b in batches]
        if None in latencies or worker.busy_remaining_ms + sum(latencies) > goals.left_ms:
            return False
        waiting[key] = rows
        return True

    def _index(self, candidates: tuple[str, ...]) -> VariantIndex:
        index = self._indexes.get(candidates)
        if index is None:
            if len(self._indexes) >= _MAX_CACHED_INDEXES:
                self._indexes.clear()
            index = self._indexes[candidates] = VariantIndex(
                r for v in dict.fromkeys(candidates) for r in self._records.get(v, ()))
        return index

    def _fleets(self, workers: Sequence[WorkerView], free: dict[str, WorkerView]) -> tuple[_Fleet, _Fleet]:
        """The idle workers' fleet and the whole fleet, each with its selections cache."""
        return (self._live_fleet(workers, free, idle_only=True), {}), (self._live_fleet(workers, free), {})

    def _live_fleet(self, workers: Sequence[WorkerView], free: dict[str, WorkerView], *,
                    idle_only: bool = False) -> FleetState:
        """Active instances from what workers report loaded, states from the snapshot; workers already
        given a batch in this call count as busy (or are left out: ``idle_only``); workers above
        `max_utilization` are left out."""
        active: dict[Key, tuple] = {}
        placement: dict[str, tuple] = {}
        for worker in workers:
            if self._utilization.get(worker.worker_id, 0.0) > self._max_utilization:
                continue
            if idle_only and worker.worker_id not in free:
                continue
            busy = worker.worker_id not in free
            live = (busy, worker.busy_remaining_ms, worker.inflight)
            for variant in worker.variants:
                if not self._active(variant, worker.worker_id):
                    continue
                instance = self._instances.get((variant, worker.worker_id))
                rank = (*live, instance.qps if instance else 0.0, worker.worker_id)
                key = (variant, worker.device)
                if key not in active or rank < active[key]:
                    active[key] = rank
            rank = (self._utilization.get(worker.worker_id, 0.0), *live, worker.worker_id)
            if worker.device not in placement or rank < placement[worker.device]:
                placement[worker.device] = rank
        return FleetState(active={k: r[-1] for k, r in active.items()},
                          placement={d: r[-1] for d, r in placement.items()})

    def _loaded_fallback(self, query: PendingQuery, free: dict[str, WorkerView]) -> tuple[WorkerView, str] | None:
        best = None
        for worker in free.values():
            for variant in query.candidate_variants:
                if variant not in worker.variants:
                    continue
                record = self._by_key.get((variant, worker.device))
                latency = record.latency_ms(query.batch_size) if record else None
                rank = (math.inf if latency is None else latency, worker.worker_id, variant)
                if best is None or rank < best[0]:
                    best = (rank, worker, variant)
        return None if best is None else (best[1], best[2])

    def _active(self, variant: str, worker_id: str) -> bool:
        """Whether the instance is Active (one the monitor has not judged yet is)."""
        instance = self._instances.get((variant, worker_id))
        return instance is None or instance.state is InstanceState.ACTIVE

    def _active_on(self, worker: WorkerView, query: PendingQuery, chosen: str) -> list[str]:
        """``chosen``, then the query's other candidates Active on ``worker``, most preferred first."""
        others = [v for v in query.candidate_variants
                  if v != chosen and v in worker.variants and (v, worker.device) in self._by_key
                  and self._active(v, worker.worker_id)]
        return [chosen, *others]

    def _batch(self, head: _Goals, queue: Sequence[PendingQuery], taken: set[str], worker: WorkerView,
               variant: str, now_s: float, fallback: _Fleet | None) -> tuple[tuple[str, ...], int]:
        """The head and the queued queries after it that `variant` may serve, as many as finish the most of
        them by their deadlines (`most_in_time`), and how many of them finish in time.

        On a fallback instance (`fallback` gives the fleet it was chosen from) a query joins only if it
        has no Active match of its own: it must not be served off an Overloaded or Interfered instance
        while one exists.
        """
        record = self._by_key.get((variant, worker.device))
        limit = min(worker.max_batch, record.max_rows) if record else worker.max_batch
        members, rows = [head], head.query.batch_size
        for query in queue:
            if query.query_id in taken or query.query_id == head.query.query_id \
                    or variant not in query.candidate_variants:
                continue
            if rows + query.batch_size > limit:
                break
            goals = _Goals.at(query, now_s)
            if fallback is not None and self._select(goals, *fallback).status is SelectionStatus.ACTIVE:
                continue
            members.append(goals)
            rows += query.batch_size
        if record is None:
            return tuple(goals.query.query_id for goals in members), 0
        size, in_time = most_in_time([goals.query.batch_size for goals in members],
                                     [goals.left_ms for goals in members], record.latency_ms)
        return tuple(goals.query.query_id for goals in members[:size]), in_time


class _Goals(NamedTuple):
    """A query and the compute time it has left: getVariant's SLO for it now (whole milliseconds, so that
    queries of the same goals share a selection; at least 1, so a late query, where the core keeps one, is
    served on the closest loaded candidate)."""

    query: PendingQuery
    left_ms: int

    @classmethod
    def at(cls, query: PendingQuery, now_s: float) -> "_Goals":
        return cls(query, max(1, math.floor((query.deadline_s - now_s) * 1000.0)))


def _records(profiles: ProfileSet) -> dict[Key, VariantRecord]:
    return {r.key: r for r in MetadataSnapshot.from_profiles(profiles).variants}
