"""`InfaasDispatch`: INFaaS's Dispatcher (Algorithm 1, spec §6.2) as a `DispatchPolicy`.

For each queued query, in arrival order, getVariant runs over the query's candidate variants (the
scheduler already filtered them by family and accuracy floor) with the live fleet: a worker's loaded
variants are Active instances unless the last metadata snapshot says Overloaded or Interfered; least
loaded means the shortest predicted busy time, then fewest inflight batches, then lowest monitored QPS.
A worker the snapshot shows above ``max_utilization`` (80%) is left out of the fleet, as
`FleetState.from_records` does: no query is routed to it by getVariant and no variant loaded on it.

- **Active** match: the query goes to that instance's worker if it is idle, together with other queued
  queries that variant may serve, while the batch's profiled latency stays within all their SLOs and
  the worker's and variant's max batch. If the worker is busy the query waits for it rather than take
  an Overloaded or Interfered instance.
- **Inactive** match: the decision asks for the (worker, variant) to be loaded (`DispatchDecision.loads`,
  once per ``reload_after_s`` while it is not loaded; never when the worker holds it already, as the
  least-utilized worker of a type may when its instance is Overloaded or Interfered: a worker holds a
  variant once; never when no worker of the type may take it, which is the VM-Autoscaler's to answer)
  and meanwhile serves the query on an idle worker that has some candidate loaded (shortest profiled
  latency first).
- **Suggestion** / nothing matches: served the same way, on the closest loaded candidate.

Static profiles are the catalogue's (the constructor's `ProfileSet`) plus whatever the metadata store
holds (registered models). Dynamic state (instance states, utilization) comes from INFaaS' monitoring
daemon (`InstanceMonitor`), which the policy runs itself on the worker events the core hears
(``monitor``), so that wherever it serves, live or simulated, with or without a registry process, it
sees Overloaded instances and busy workers; without ``monitor`` it comes from `update_from_metadata`.
A candidate with no profile at all is served only as a fallback, first come, first served.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from schemas import WorkerEvent
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
from shared.profiles.format import ProfileSet

__all__ = ["InfaasDispatch"]

#: candidate lists whose index is kept; the scheduler produces one per (family, accuracy floor)
_MAX_CACHED_INDEXES = 1024

#: selections already made against one fleet state, by (candidates, rows, SLO): queries with the same
#: goals get the same answer until an assignment changes the fleet
_Selections = dict[tuple[tuple[str, ...], int, float], Selection]


class InfaasDispatch(DispatchPolicy):
    """getVariant per query over live workers plus the metadata store's last snapshot.

    Parameters
    ----------
    profiles : ProfileSet, optional
        The catalogue's profiles: the static records before any snapshot arrives (the metadata store's
        records of the same (variant, device) replace them).
    reload_after_s : float
        A load asked for and not seen done is asked for again after this long.
    max_utilization : float
        Workers the last snapshot shows busier than this are left out of getVariant's fleet.
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
                 worker_timeout_s: float = 3.0) -> None:
        self._catalogue = {r.key: r for r in MetadataSnapshot.from_profiles(profiles).variants} if profiles else {}
        self._by_key: dict[Key, VariantRecord] = {}
        self._records: dict[str, list[VariantRecord]] = {}
        self._indexes: dict[tuple[str, ...], VariantIndex] = {}
        self._instances: dict[tuple[str, str], InstanceRecord] = {}
        self._utilization: dict[str, float] = {}
        #: (worker id, variant) -> when its load was last asked for
        self._loads_asked: dict[tuple[str, str], float] = {}
        self._reload_after_s = reload_after_s
        self._max_utilization = max_utilization
        self._set_static(self._catalogue)
        self._monitor_config = monitor if profiles is not None else None
        self._profiles = profiles
        self._worker_timeout_s = worker_timeout_s
        #: the monitoring daemon, from the first worker event on (``monitor``)
        self._daemon: InstanceMonitor | None = None

    def on_worker_event(self, event: WorkerEvent, now_s: float) -> None:
        """Feed the daemon; at the end of each of its windows, serve from its snapshot."""
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
        self._set_static({**self._catalogue, **{r.key: r for r in snapshot.variants}})
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
        loaded = {(w.worker_id, v) for w in workers for v in w.variants}
        self._loads_asked = {k: at for k, at in self._loads_asked.items() if k not in loaded}
        loads: list[tuple[str, str]] = []
        fleet, selections = self._live_fleet(workers, free), {}
        taken: set[str] = set()
        assignments = []
        for query in queue:
            if not free:
                break
            if query.query_id in taken:
                continue
            target = self._target(query, fleet, free, selections, now_s, loads, loaded)
            if target is None:
                continue
            worker, variant, active = target
            batch = self._batch(query, queue, taken, worker, variant, None if active else (fleet, selections))
            assignments.append(Assignment(worker.worker_id, variant, batch))
            taken.update(batch)
            del free[worker.worker_id]
            fleet, selections = self._live_fleet(workers, free), {}
        return DispatchDecision(assignments=tuple(assignments), loads=tuple(loads))

    # -- internals ------------------------------------------------------------------------------
    def _select(self, query: PendingQuery, fleet: FleetState, selections: _Selections) -> Selection:
        goals = (query.candidate_variants, query.batch_size, query.budget_ms)
        selection = selections.get(goals)
        if selection is None:
            selection = selections[goals] = get_variant(
                VariantQuery(query.batch_size, query.budget_ms), self._index(query.candidate_variants), fleet)
        return selection

    def _target(self, query: PendingQuery, fleet: FleetState, free: dict[str, WorkerView], selections: _Selections,
                now_s: float, loads: list[tuple[str, str]],
                loaded: set[tuple[str, str]]) -> tuple[WorkerView, str, bool] | None:
        """(worker, variant, whether it is the Active match), or None to keep the query waiting."""
        selection = self._select(query, fleet, selections)
        if selection.status is SelectionStatus.ACTIVE:
            worker = free.get(selection.worker_id)
            return None if worker is None else (worker, selection.variant, True)
        if selection.status is SelectionStatus.INACTIVE and selection.worker_id is not None:
            key = (selection.worker_id, selection.variant)
            if key not in loaded and now_s - self._loads_asked.get(key, -math.inf) >= self._reload_after_s:
                self._loads_asked[key] = now_s
                loads.append(key)
        fallback = self._loaded_fallback(query, free)
        return None if fallback is None else (*fallback, False)

    def _index(self, candidates: tuple[str, ...]) -> VariantIndex:
        index = self._indexes.get(candidates)
        if index is None:
            if len(self._indexes) >= _MAX_CACHED_INDEXES:
                self._indexes.clear()
            index = self._indexes[candidates] = VariantIndex(
                r for v in dict.fromkeys(candidates) for r in self._records.get(v, ()))
        return index

    def _live_fleet(self, workers: Sequence[WorkerView], free: dict[str, WorkerView]) -> FleetState:
        """Active instances from what workers report loaded, states from the snapshot; workers already
        given a batch in this call count as busy; workers above `max_utilization` are left out."""
        active: dict[Key, tuple] = {}
        placement: dict[str, tuple] = {}
        for worker in workers:
            if self._utilization.get(worker.worker_id, 0.0) > self._max_utilization:
                continue
            busy = worker.worker_id not in free
            live = (busy, worker.busy_remaining_ms, worker.inflight)
            for variant in worker.variants:
                instance = self._instances.get((variant, worker.worker_id))
                if instance is not None and instance.state is not InstanceState.ACTIVE:
                    continue
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

    def _batch(self, head: PendingQuery, queue: Sequence[PendingQuery], taken: set[str], worker: WorkerView,
               variant: str, fallback: tuple[FleetState, _Selections] | None) -> tuple[str, ...]:
        """The head plus other queued queries `variant` may serve, while the batch meets every SLO in it.

        On a fallback instance (`fallback` gives the fleet it was chosen from) a query joins only if it
        has no Active match of its own: it must not be served off an Overloaded or Interfered instance
        while one exists.
        """
        record = self._by_key.get((variant, worker.device))
        limit = min(worker.max_batch, record.max_rows) if record else worker.max_batch
        chosen, rows, slo = [head.query_id], head.batch_size, head.budget_ms
        for query in queue:
            if query.query_id in taken or query.query_id == head.query_id or variant not in query.candidate_variants:
                continue
            if rows + query.batch_size > limit:
                break
            if record is not None:
                latency = record.latency_ms(rows + query.batch_size)
                if latency is None or latency > min(slo, query.budget_ms):
                    break
            if fallback is not None and self._select(query, *fallback).status is SelectionStatus.ACTIVE:
                continue
            chosen.append(query.query_id)
            rows += query.batch_size
            slo = min(slo, query.budget_ms)
        return tuple(chosen)
