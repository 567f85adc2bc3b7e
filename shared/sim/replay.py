"""Turn a record of what really arrived into the simulator's inputs, and its answers into outcomes.

The record (queries with their send times, results, worker events) comes from Kafka (`shared.adapters.
recording`); here it becomes `Workload`s and `SimWorker`s, so the simulator serves exactly the queries
that were sent, on the fleet that served them (or on another one: a what-if).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from schemas import Query, Result, ResultStatus, WorkerHeartbeat, WorkerStopped
from shared.catalogue import Catalogue
from shared.sim.arrivals import Workload
from shared.sim.engine import SimResult
from shared.sim.scorecard import Outcomes, Tenure
from shared.sim.workers import SimWorker


@dataclass(frozen=True, slots=True)
class RecordedWorker:
    """A worker as its events showed it: what it ran, and when it was in the fleet."""

    worker_id: str
    device: str
    variants: tuple[str, ...]
    max_batch: int
    emulated: bool
    first_seen_s: float
    stopped_s: float | None

    def sim_worker(self) -> SimWorker:
        return SimWorker(self.worker_id, self.device, self.variants, self.max_batch)

    def tenure(self) -> Tenure:
        return Tenure(self.device, self.first_seen_s, self.stopped_s)


def fleet_from_events(events: Iterable[tuple[float, object]]) -> list[RecordedWorker]:
    """Every worker that heartbeated, with the variants it last reported; a restarted worker counts once."""
    seen: dict[str, RecordedWorker] = {}
    for at, event in events:
        if isinstance(event, WorkerHeartbeat):
            known = seen.get(event.worker_id)
            first = known.first_seen_s if known is not None and known.stopped_s is None else at
            seen[event.worker_id] = RecordedWorker(event.worker_id, event.device, tuple(sorted(event.variants)),
                                                   event.max_batch, event.emulated, first, None)
        elif isinstance(event, WorkerStopped) and event.worker_id in seen:
            seen[event.worker_id] = replace(seen[event.worker_id], stopped_s=at)
    return list(seen.values())


def what_if_fleet(recorded: Sequence[RecordedWorker], counts: Mapping[str, int], catalogue: Catalogue,
                  applications: Iterable[str]) -> list[SimWorker]:
    """``counts`` workers per device type. Each hosts what the recorded workers of its type hosted, or, for
    a type that was not in the fleet, every variant of the applications its profiles cover."""
    workers = []
    for device, count in counts.items():
        if device not in {d.name for d in catalogue.profiles.devices}:
            raise ValueError(f"device type {device!r} has no profile; known: "
                             f"{', '.join(sorted(d.name for d in catalogue.profiles.devices))}")
        peers = [w for w in recorded if w.device == device]
        if peers:
            variants = tuple(sorted({v for w in peers for v in w.variants}))
            max_batch = max(w.max_batch for w in peers)
        else:
            wanted = {v for app in applications for family in catalogue.applications.get(app, ())
                      for v in catalogue.variants_of(family)}
            profiled = [p for p in catalogue.profiles.variants if p.device == device and p.variant in wanted]
            if not profiled:
                raise ValueError(f"device type {device!r} has no profile for the recorded applications")
            variants = tuple(sorted({p.variant for p in profiled}))
            max_batch = max(p.max_batch for p in profiled)
        workers += [SimWorker(f"{device}-whatif-{k}", device, variants, max_batch) for k in range(count)]
    return workers


def workloads_from(queries: Sequence[Query], catalogue: Catalogue, start_s: float) -> list[Workload]:
    """One workload per (application, model, SLO, priority class), arrivals in seconds since ``start_s``.

    A query's candidates are what its ``model`` names: one variant, or its family (an accuracy floor is
    not modelled: the simulator serves with every variant of the family).
    """
    groups: dict[tuple[str, str, float, int | None], list[Query]] = {}
    for query in queries:
        model = query.model or catalogue.applications[query.application][0]
        groups.setdefault((query.application, model, query.slo_ms, query.priority), []).append(query)
    workloads = []
    for (application, model, slo_ms, priority), members in groups.items():
        members.sort(key=lambda q: q.sent_at)
        candidates = (model,) if catalogue.profiles_of(model) else tuple(catalogue.variants_of(model))
        workloads.append(Workload(np.array([q.sent_at - start_s for q in members]),
                                  np.array([q.batch_size for q in members]), application, slo_ms, candidates,
                                  priority))
    return workloads


def sim_outcomes(result: SimResult, start_s: float = 0.0) -> Outcomes:
    """The simulator's answers: a served query is answered ``ok`` at its finish (late or not)."""
    served = result.served
    return Outcomes(result.application, result.slo_ms, result.arrival_s + start_s,
                    np.where(served, result.finish_s + start_s, np.nan), np.where(served, result.variant, ""))


def live_outcomes(queries: Sequence[Query], answers: Mapping[str, tuple[Result, float]]) -> Outcomes:
    """The live answers: ``answers`` maps a query id to its final result and when it was received."""
    answered, variant = [], []
    for query in queries:
        result, at = answers.get(query.query_id, (None, np.nan))
        ok = result is not None and result.status is ResultStatus.OK
        answered.append(at if ok else np.nan)
        variant.append(result.variant or "" if ok else "")
    return Outcomes(np.array([q.application for q in queries], dtype=object),
                    np.array([q.slo_ms for q in queries], dtype=float),
                    np.array([q.sent_at for q in queries], dtype=float), np.array(answered, dtype=float),
                    np.array(variant, dtype=object))
