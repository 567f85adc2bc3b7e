"""getVariant: INFaaS Algorithm 1 (spec §6.2), indexed, plus the brute-force selector it must agree with.

Given a query's goals (rows ``b``, latency SLO ``S``, accuracy floor ``A``), over the variants of a
scope (an application's families, one family, or a scheduler's candidate list):

1. **Active**: among (variant, device) pairs with an Active instance that match, i.e.
   ``accuracy >= A``, ``T(b) <= S`` and ``b <= max batch``, the one with the lowest hardware cost
   (the device's $/h), ties to the smallest slack ``S - T(b)`` (spec §12.2: the slowest variant that
   still meets the SLO, so fast ones stay free, as the authors' code), on the least-loaded worker
   running it. Running time does not enter the cost: a pair is billed for its hardware whether it
   answers in 10 ms or 40 ms;
2. **Inactive**: else the matching pair with the lowest ``load + T(b)`` latency on *any* device type
   of the scope, on that type's least-utilized worker (the variant is loaded there), or with no
   worker (``worker_id`` None) when the type has none that may take it: "(d) may not be loaded due to
   lack of resources", which the VM-Autoscaler answers (spec §6.2, §6.5);
3. **Suggested**: else the pair closest to the goals,
   ``max(0, A - acc) / A + max(0, T(b) - S) / S`` (spec §12.24), flagged as not meeting them.

Workers above 80% utilization take no query and no new variant ([REF]: blacklisted for dispatch;
§6.5's threshold): `shared.infaas.records.FleetState.from_records` and the dispatch leave them out
of the fleet, so here they are simply absent. Ties always break on (variant, device) names, so the
indexed and brute-force selectors agree exactly.

Index. `VariantIndex` keeps, per device type and per *batch bucket*, a Fenwick tree over the pairs in
descending accuracy whose nodes hold their block sorted by latency with running minima of the
Inactive rank. "min rank with accuracy >= A and latency <= S" is then a prefix of the accuracy order
split into O(log n) blocks, one bisection each: O(log^2 n) per device type. A bucket is an interval
``(u_{i-1}, u_i]`` of the sorted union of every profiled batch size and max batch in the scope; every
batch in it looks up the same profiled latency of every pair and the same eligibility, so one tree per
bucket is exact. The Active step scans only pairs with an Active instance (bounded by the fleet, not
the catalogue); the suggestion scans the scope, but only runs when nothing can meet the goals.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from shared.infaas.records import FleetState, Key, VariantRecord

__all__ = ["Selection", "SelectionStatus", "VariantIndex", "VariantQuery", "brute_force_get_variant",
           "get_variant"]


@dataclass(frozen=True, slots=True)
class VariantQuery:
    """A query's goals. `accuracy_floor` ``None`` accepts any accuracy."""

    batch_size: int
    slo_ms: float
    accuracy_floor: float | None = None

    def __post_init__(self) -> None:
        _variant_query_iv(self)


def _variant_query_iv(query: VariantQuery) -> None:
    if not isinstance(query.batch_size, int) or query.batch_size < 1:
        raise ValueError(f"`batch_size` must be an integer >= 1, got {query.batch_size!r}")
    if not (query.slo_ms > 0 and math.isfinite(query.slo_ms)):
        raise ValueError(f"`slo_ms` must be finite and > 0, got {query.slo_ms!r}")
    if query.accuracy_floor is not None and not 0.0 <= query.accuracy_floor <= 1.0:
        raise ValueError(f"`accuracy_floor` must be in [0, 1], got {query.accuracy_floor!r}")


class SelectionStatus(str, Enum):
    ACTIVE = "active"            # a loaded instance meets the goals
    INACTIVE = "inactive"        # load `variant` on `worker_id`: it meets the goals
    SUGGESTED = "suggested"      # nothing meets the goals; the closest pair
    UNAVAILABLE = "unavailable"  # no pair of the scope can run this batch


@dataclass(frozen=True, slots=True)
class Selection:
    status: SelectionStatus
    message: str
    variant: str | None = None
    device: str | None = None
    #: None for an Inactive or suggested pair no worker of its type may take now (a new one must start)
    worker_id: str | None = None
    #: profiled latency of the query's batch on the chosen pair
    latency_ms: float | None = None
    #: loading latency to pay first (0 for an Active instance)
    load_latency_ms: float | None = None

    @property
    def success(self) -> bool:
        """Whether the choice meets the query's goals."""
        return self.status in (SelectionStatus.ACTIVE, SelectionStatus.INACTIVE)


# ------------------------------------------------------------------------------------------- ranks


def _floor(query: VariantQuery) -> float:
    return -math.inf if query.accuracy_floor is None else query.accuracy_floor


def _active_rank(record: VariantRecord, latency: float, query: VariantQuery) -> tuple:
    return (record.price_per_hour, query.slo_ms - latency, record.variant, record.device)


def _inactive_rank(record: VariantRecord, latency: float) -> tuple:
    return ((record.load_latency_ms or 0.0) + latency, record.variant, record.device)


def _distance(record: VariantRecord, latency: float, query: VariantQuery) -> float:
    floor = query.accuracy_floor or 0.0
    short = max(0.0, floor - record.accuracy_or_zero) / floor if floor > 0 else 0.0
    return short + max(0.0, latency - query.slo_ms) / query.slo_ms


def _matches(record: VariantRecord, latency: float | None, query: VariantQuery) -> bool:
    return latency is not None and latency <= query.slo_ms and record.accuracy_or_zero >= _floor(query)


# ------------------------------------------------------------------------------------------ result


def _active(record: VariantRecord, latency: float, worker_id: str) -> Selection:
    return Selection(SelectionStatus.ACTIVE, f"active instance of {record.variant!r} on {worker_id!r}",
                     record.variant, record.device, worker_id, latency, 0.0)


def _inactive(record: VariantRecord, latency: float, worker_id: str | None) -> Selection:
    where = repr(worker_id) if worker_id is not None else f"a new {record.device!r} worker (none may take it)"
    return Selection(SelectionStatus.INACTIVE, f"load {record.variant!r} on {where} (lowest load + "
                     f"inference latency among matching variants)", record.variant, record.device, worker_id,
                     latency, record.load_latency_ms or 0.0)


def _suggested(record: VariantRecord, latency: float, query: VariantQuery, fleet: FleetState) -> Selection:
    worker = fleet.active.get(record.key) or fleet.placement.get(record.device)
    return Selection(
        SelectionStatus.SUGGESTED,
        f"requirements_not_met: no variant reaches accuracy {query.accuracy_floor} within {query.slo_ms:g} ms "
        f"at batch {query.batch_size}; closest is {record.variant!r} on {record.device!r} "
        f"(accuracy {record.accuracy}, {latency:.4g} ms)",
        record.variant, record.device, worker, latency,
        0.0 if record.key in fleet.active else (record.load_latency_ms or 0.0))


def _unavailable(query: VariantQuery) -> Selection:
    return Selection(SelectionStatus.UNAVAILABLE,
                     f"no variant of the scope can run batch {query.batch_size}")


# ------------------------------------------------------------------------------------------- index


class _DominanceTree:
    """Min rank over entries with accuracy >= a and latency <= s, in O(log^2 n) (see module notes)."""

    __slots__ = ("_neg_accuracy", "_nodes")

    def __init__(self, entries: list[tuple[float, float, tuple]]) -> None:
        entries = sorted(entries, key=lambda e: (-e[0], e[2]))  # (accuracy, latency, rank) by accuracy desc
        self._neg_accuracy = [-accuracy for accuracy, _, _ in entries]
        self._nodes: list[tuple[list[float], list[tuple]]] = [([], [])]
        for i in range(1, len(entries) + 1):
            block = sorted(entries[i - (i & -i):i], key=lambda e: (e[1], e[2]))
            latencies, minima, best = [], [], None
            for _, latency, rank in block:
                best = rank if best is None or rank < best else best
                latencies.append(latency)
                minima.append(best)
            self._nodes.append((latencies, minima))

    def min_rank(self, accuracy_floor: float, max_latency: float) -> tuple | None:
        i = bisect.bisect_right(self._neg_accuracy, -accuracy_floor)
        best = None
        while i > 0:
            latencies, minima = self._nodes[i]
            j = bisect.bisect_right(latencies, max_latency)
            if j and (best is None or minima[j - 1] < best):
                best = minima[j - 1]
            i -= i & -i
        return best


class VariantIndex:
    """The static side of getVariant for one scope: built once per catalogue change, queried per query."""

    def __init__(self, records: Iterable[VariantRecord]) -> None:
        self.records: dict[Key, VariantRecord] = {r.key: r for r in records}
        bounds = {b for r in self.records.values() for b, _ in r.batch_latency_ms}
        bounds |= {r.max_rows for r in self.records.values()}
        self._bounds = sorted(bounds)
        self._by_key: dict[tuple, VariantRecord] = {}
        grouped: dict[tuple[str, int], list[tuple[float, float, tuple]]] = {}
        for record in self.records.values():
            for bucket, bound in enumerate(self._bounds):
                latency = record.latency_ms(bound)
                if latency is None:
                    break
                rank = _inactive_rank(record, latency)
                self._by_key[rank] = record
                grouped.setdefault((record.device, bucket), []).append((record.accuracy_or_zero, latency, rank))
        #: (device, bucket) -> tree; pairs not eligible in a bucket are left out of its tree
        self._trees = {slot: _DominanceTree(entries) for slot, entries in grouped.items()}
        self.devices = frozenset(r.device for r in self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def best_active(self, query: VariantQuery, fleet: FleetState) -> Selection | None:
        best = None
        for key, worker_id in fleet.active.items():
            record = self.records.get(key)
            if record is None:
                continue
            latency = record.latency_ms(query.batch_size)
            if _matches(record, latency, query):
                rank = _active_rank(record, latency, query)
                if best is None or rank < best[0]:
                    best = (rank, record, latency, worker_id)
        return None if best is None else _active(best[1], best[2], best[3])

    def best_inactive(self, query: VariantQuery, fleet: FleetState) -> Selection | None:
        bucket = bisect.bisect_left(self._bounds, query.batch_size)
        best = None
        for device in self.devices:
            tree = self._trees.get((device, bucket))
            if tree is None:
                continue
            rank = tree.min_rank(_floor(query), query.slo_ms)
            if rank is not None and (best is None or rank < best):
                best = rank
        if best is None:
            return None
        record = self._by_key[best]
        return _inactive(record, record.latency_ms(query.batch_size), fleet.placement.get(record.device))

    def suggest(self, query: VariantQuery, fleet: FleetState) -> Selection:
        return _suggest(self.records.values(), query, fleet)


def _suggest(records: Iterable[VariantRecord], query: VariantQuery, fleet: FleetState) -> Selection:
    best = None
    for record in records:
        latency = record.latency_ms(query.batch_size)
        if latency is None:
            continue
        rank = (_distance(record, latency, query), record.variant, record.device)
        if best is None or rank < best[0]:
            best = (rank, record, latency)
    return _unavailable(query) if best is None else _suggested(best[1], best[2], query, fleet)


def get_variant(query: VariantQuery, index: VariantIndex, fleet: FleetState) -> Selection:
    """Algorithm 1: an Active instance, else an Inactive variant to load, else a suggestion.

    Parameters
    ----------
    query : VariantQuery
        The goals.
    index : VariantIndex
        The scope's static profiles (e.g. every variant of an application's families).
    fleet : FleetState
        Active instances (least-loaded worker of each) and the least-utilized worker per device type,
        workers above 80% utilization left out.

    Returns
    -------
    Selection
        ``success`` is False for a suggestion or when nothing can run the batch; ``worker_id`` is None
        when the chosen pair must wait for a new worker of its type.

    Examples
    --------
    >>> from shared.infaas.records import VariantRecord, FleetState
    >>> r = VariantRecord("m-a", "m", "cpu", accuracy=0.9, batch_latency_ms=((1, 5.0),), max_batch=1)
    >>> get_variant(VariantQuery(1, 10.0, 0.8), VariantIndex([r]), FleetState(placement={"cpu": "w1"})).status
    <SelectionStatus.INACTIVE: 'inactive'>
    """
    return (index.best_active(query, fleet) or index.best_inactive(query, fleet)
            or index.suggest(query, fleet))


def brute_force_get_variant(query: VariantQuery, records: Iterable[VariantRecord], fleet: FleetState) -> Selection:
    """The same rules by a full scan of `records`: the reference the index is checked against."""
    records = list(records)
    active, inactive = None, None
    for record in records:
        latency = record.latency_ms(query.batch_size)
        if not _matches(record, latency, query):
            continue
        if record.key in fleet.active:
            rank = _active_rank(record, latency, query)
            if active is None or rank < active[0]:
                active = (rank, record, latency)
        rank = _inactive_rank(record, latency)
        if inactive is None or rank < inactive[0]:
            inactive = (rank, record, latency)
    if active is not None:
        return _active(active[1], active[2], fleet.active[active[1].key])
    if inactive is not None:
        return _inactive(inactive[1], inactive[2], fleet.placement.get(inactive[1].device))
    return _suggest(records, query, fleet)
