"""INFaaS's metadata store (spec §7): the interface and its in-memory implementation.

`shared.adapters.infaas_store.RedisMetadataStore` is the same store on Redis. Both keep the same
indexes, so every lookup getVariant and the monitor make is a hash lookup or a sorted-set range, never
a scan of the catalogue:

- static: one record per (variant, device); per family, the pairs sorted by accuracy; application ->
  registered model families;
- dynamic: one record per loaded (variant, worker) instance; per (variant, device), its Active
  instances sorted by QPS (least loaded first); per family, the pairs with an Active instance; per
  device type, the workers sorted by utilization (least utilized first).

The monitoring loop is the single writer of dynamic data.
"""
from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterable

from shared.infaas.records import FleetState, InstanceRecord, Key, MetadataSnapshot, VariantRecord, WorkerRecord
from shared.infaas.state import InstanceState
from shared.profiles.format import ProfileSet

__all__ = ["InMemoryMetadataStore", "MetadataStore"]


def _pair(key: Key) -> str:
    return f"{key[0]}@{key[1]}"


class MetadataStore(ABC):
    """Static variant profiles, registrations and dynamic instance/worker state."""

    # -- static ---------------------------------------------------------------------------------
    @abstractmethod
    def put_variant(self, record: VariantRecord) -> None:
        """Add or replace the profile of one (variant, device)."""

    @abstractmethod
    def get_variant(self, variant: str, device: str) -> VariantRecord | None: ...

    @abstractmethod
    def variants_of_family(self, family: str, *, min_accuracy: float | None = None) -> list[VariantRecord]:
        """The family's pairs with accuracy >= `min_accuracy`, by ascending accuracy then pair name."""

    @abstractmethod
    def register_model(self, app_id: str, family: str) -> None: ...

    @abstractmethod
    def families_of(self, app_id: str) -> list[str]:
        """Model families registered under `app_id`, sorted."""

    def put_profiles(self, profiles: ProfileSet) -> list[VariantRecord]:
        """Store every profile of a `ProfileSet` (device kind and price from its devices)."""
        records = MetadataSnapshot.from_profiles(profiles).variants
        for record in records:
            self.put_variant(record)
        return list(records)

    # -- dynamic --------------------------------------------------------------------------------
    @abstractmethod
    def put_instance(self, record: InstanceRecord) -> None:
        """Write one instance's state; an Inactive one is removed (Inactive = not loaded anywhere)."""

    @abstractmethod
    def get_instance(self, variant: str, worker_id: str) -> InstanceRecord | None: ...

    @abstractmethod
    def remove_instance(self, variant: str, worker_id: str) -> None: ...

    @abstractmethod
    def instances_on(self, worker_id: str) -> list[InstanceRecord]:
        """The worker's instances, by variant name."""

    @abstractmethod
    def put_worker(self, record: WorkerRecord) -> None: ...

    @abstractmethod
    def get_worker(self, worker_id: str) -> WorkerRecord | None: ...

    @abstractmethod
    def remove_worker(self, worker_id: str) -> None:
        """Forget a worker and its instances."""

    # -- reads for selection --------------------------------------------------------------------
    @abstractmethod
    def fleet_state(self, families: Iterable[str], devices: Iterable[str]) -> FleetState:
        """The Active pairs of `families` with their least-loaded worker, and the least-utilized worker
        of each of `devices`: the dynamic input of one getVariant call."""

    @abstractmethod
    def snapshot(self, at_s: float = 0.0) -> MetadataSnapshot:
        """Everything, for the scheduler's periodic refresh."""


# ------------------------------------------------------------------------------------- in memory


class _SortedPairs:
    """A sorted set of (score, member) with one score per member, like a Redis zset."""

    def __init__(self) -> None:
        self._items: list[tuple[float, str]] = []
        self._score: dict[str, float] = {}

    def add(self, member: str, score: float) -> None:
        self.remove(member)
        bisect.insort(self._items, (score, member))
        self._score[member] = score

    def remove(self, member: str) -> None:
        score = self._score.pop(member, None)
        if score is not None:
            del self._items[bisect.bisect_left(self._items, (score, member))]

    def first(self) -> str | None:
        return self._items[0][1] if self._items else None

    def from_score(self, low: float) -> list[str]:
        return [m for _, m in self._items[bisect.bisect_left(self._items, (low, "")):]]

    def __len__(self) -> int:
        return len(self._items)


class InMemoryMetadataStore(MetadataStore):
    """Dicts and sorted lists with the Redis store's semantics (tests, the simulator, single processes)."""

    def __init__(self) -> None:
        self._variants: dict[Key, VariantRecord] = {}
        self._by_accuracy: dict[str, _SortedPairs] = {}
        self._apps: dict[str, set[str]] = {}
        self._instances: dict[tuple[str, str], InstanceRecord] = {}
        self._worker_instances: dict[str, set[str]] = {}
        self._active: dict[Key, _SortedPairs] = {}
        self._family_active: dict[str, set[Key]] = {}
        self._workers: dict[str, WorkerRecord] = {}
        self._util: dict[str, _SortedPairs] = {}

    def put_variant(self, record: VariantRecord) -> None:
        old = self._variants.get(record.key)
        if old is not None and old.family != record.family:
            self._by_accuracy[old.family].remove(_pair(old.key))
        self._variants[record.key] = record
        self._by_accuracy.setdefault(record.family, _SortedPairs()).add(_pair(record.key), record.accuracy_or_zero)
        if old is not None:
            self._family_active.get(old.family, set()).discard(record.key)
        if len(self._active.get(record.key, ())):
            self._family_active.setdefault(record.family, set()).add(record.key)

    def get_variant(self, variant: str, device: str) -> VariantRecord | None:
        return self._variants.get((variant, device))

    def variants_of_family(self, family: str, *, min_accuracy: float | None = None) -> list[VariantRecord]:
        pairs = self._by_accuracy.get(family)
        if pairs is None:
            return []
        members = pairs.from_score(-float("inf") if min_accuracy is None else min_accuracy)
        return [self._variants[tuple(m.split("@", 1))] for m in members]

    def register_model(self, app_id: str, family: str) -> None:
        self._apps.setdefault(app_id, set()).add(family)

    def families_of(self, app_id: str) -> list[str]:
        return sorted(self._apps.get(app_id, ()))

    def put_instance(self, record: InstanceRecord) -> None:
        if record.state is InstanceState.INACTIVE:
            self.remove_instance(record.variant, record.worker_id)
            return
        old = self._instances.get((record.variant, record.worker_id))
        if old is not None and old.device != record.device:
            self._set_active(old.key, old.worker_id, None)
        self._instances[(record.variant, record.worker_id)] = record
        self._worker_instances.setdefault(record.worker_id, set()).add(record.variant)
        self._set_active(record.key, record.worker_id, record.qps if record.state is InstanceState.ACTIVE else None)

    def _set_active(self, key: Key, worker_id: str, qps: float | None) -> None:
        active = self._active.setdefault(key, _SortedPairs())
        active.add(worker_id, qps) if qps is not None else active.remove(worker_id)
        record = self._variants.get(key)
        if record is not None:
            family = self._family_active.setdefault(record.family, set())
            family.add(key) if len(active) else family.discard(key)

    def get_instance(self, variant: str, worker_id: str) -> InstanceRecord | None:
        return self._instances.get((variant, worker_id))

    def remove_instance(self, variant: str, worker_id: str) -> None:
        old = self._instances.pop((variant, worker_id), None)
        if old is None:
            return
        self._worker_instances.get(worker_id, set()).discard(variant)
        self._set_active(old.key, worker_id, None)

    def instances_on(self, worker_id: str) -> list[InstanceRecord]:
        return [self._instances[(v, worker_id)] for v in sorted(self._worker_instances.get(worker_id, ()))]

    def put_worker(self, record: WorkerRecord) -> None:
        old = self._workers.get(record.worker_id)
        if old is not None and old.device != record.device:
            self._util[old.device].remove(record.worker_id)
        self._workers[record.worker_id] = record
        self._util.setdefault(record.device, _SortedPairs()).add(record.worker_id, record.utilization)

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        return self._workers.get(worker_id)

    def remove_worker(self, worker_id: str) -> None:
        for variant in list(self._worker_instances.get(worker_id, ())):
            self.remove_instance(variant, worker_id)
        self._worker_instances.pop(worker_id, None)
        old = self._workers.pop(worker_id, None)
        if old is not None:
            self._util[old.device].remove(worker_id)

    def fleet_state(self, families: Iterable[str], devices: Iterable[str]) -> FleetState:
        active = {key: self._active[key].first() for f in families for key in self._family_active.get(f, ())}
        placement = {d: self._util[d].first() for d in devices if len(self._util.get(d, ()))}
        return FleetState(active=active, placement=placement)

    def snapshot(self, at_s: float = 0.0) -> MetadataSnapshot:
        return MetadataSnapshot(
            variants=tuple(self._variants[k] for k in sorted(self._variants)),
            applications={app: tuple(sorted(f)) for app, f in sorted(self._apps.items())},
            instances=tuple(self._instances[k] for k in sorted(self._instances)),
            workers=tuple(self._workers[w] for w in sorted(self._workers)),
            at_s=at_s)
