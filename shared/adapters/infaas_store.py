"""INFaaS's metadata store on Redis: hashes and sorted sets, the same indexes as the in-memory store.

Redis layout (every key under `prefix`, ``meridian:`` by default; ``<pair>`` is ``variant@device``,
``<inst>`` is ``variant|worker``; identifiers cannot contain ``@`` or ``|``)::

    variants                      set   of <pair>            variant:<pair>             hash (VariantRecord)
    families                      set   of family            family:<f>:by-accuracy     zset <pair> -> accuracy
    apps                          set   of app id            app:<app>:models           set of families
    instances                     set   of <inst>            instance:<inst>            hash (InstanceRecord)
    worker:<w>:instances          set   of variant           active:<pair>              zset worker -> qps
    family:<f>:active             set   of <pair> with an Active instance
    workers                       set   of worker id         worker:<w>                 hash (WorkerRecord)
    workers:util:<device>         zset  worker -> utilization

The monitoring loop is the single writer of dynamic data; multi-key updates are pipelined, and a
reader may see one instance's update half applied for a moment, never a corrupt record.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from shared.infaas.metadata import MetadataStore
from shared.infaas.records import FleetState, InstanceRecord, Key, MetadataSnapshot, VariantRecord, WorkerRecord
from shared.infaas.state import InstanceState

if TYPE_CHECKING:
    import redis

__all__ = ["RedisMetadataStore"]


def _pair(key: Key) -> str:
    return f"{key[0]}@{key[1]}"


def _enc(value: Any) -> str:
    return "" if value is None else str(value)


def _opt_float(value: str | None) -> float | None:
    return None if value in (None, "") else float(value)


class RedisMetadataStore(MetadataStore):
    """The store on Redis (hashes and sorted sets, see the module docstring for the key layout).

    Parameters
    ----------
    client : redis.Redis
        Created with ``decode_responses=True`` (see `from_url`).
    prefix : str, optional
        Namespace of every key; tests and benchmarks use ``meridian:<something>:``.
    """

    def __init__(self, client: "redis.Redis", *, prefix: str = "meridian:") -> None:
        if not client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("`client` must be created with decode_responses=True")
        if not prefix.startswith("meridian:"):
            raise ValueError(f"`prefix` must start with 'meridian:', got {prefix!r}")
        self._r = client
        self._p = prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "meridian:") -> "RedisMetadataStore":
        import redis

        return cls(redis.Redis.from_url(url, decode_responses=True), prefix=prefix)

    # -- static ---------------------------------------------------------------------------------
    def put_variant(self, record: VariantRecord) -> None:
        pair, p = _pair(record.key), self._p
        old_family = self._r.hget(f"{p}variant:{pair}", "family")
        pipe = self._r.pipeline()
        if old_family and old_family != record.family:
            pipe.zrem(f"{p}family:{old_family}:by-accuracy", pair)
            pipe.srem(f"{p}family:{old_family}:active", pair)
        pipe.hset(f"{p}variant:{pair}", mapping={
            "variant": record.variant, "family": record.family, "device": record.device,
            "device_kind": record.device_kind, "price_per_hour": repr(record.price_per_hour),
            "accuracy": _enc(record.accuracy), "batch_latency_ms": json.dumps(record.batch_latency_ms),
            "load_latency_ms": _enc(record.load_latency_ms), "peak_memory_mb": _enc(record.peak_memory_mb),
            "max_batch": str(record.max_batch)})
        pipe.sadd(f"{p}variants", pair)
        pipe.sadd(f"{p}families", record.family)
        pipe.zadd(f"{p}family:{record.family}:by-accuracy", {pair: record.accuracy_or_zero})
        pipe.zcard(f"{p}active:{pair}")
        if pipe.execute()[-1]:
            self._r.sadd(f"{p}family:{record.family}:active", pair)

    @staticmethod
    def _variant_from(fields: dict[str, str]) -> VariantRecord | None:
        if not fields:
            return None
        return VariantRecord(
            variant=fields["variant"], family=fields["family"], device=fields["device"],
            device_kind=fields["device_kind"], price_per_hour=float(fields["price_per_hour"]),
            accuracy=_opt_float(fields["accuracy"]),
            batch_latency_ms=tuple((int(b), float(ms)) for b, ms in json.loads(fields["batch_latency_ms"])),
            load_latency_ms=_opt_float(fields["load_latency_ms"]), peak_memory_mb=_opt_float(fields["peak_memory_mb"]),
            max_batch=int(fields["max_batch"]))

    def get_variant(self, variant: str, device: str) -> VariantRecord | None:
        return self._variant_from(self._r.hgetall(f"{self._p}variant:{variant}@{device}"))

    def variants_of_family(self, family: str, *, min_accuracy: float | None = None) -> list[VariantRecord]:
        low = "-inf" if min_accuracy is None else repr(min_accuracy)
        pairs = self._r.zrangebyscore(f"{self._p}family:{family}:by-accuracy", low, "+inf")
        return self._hgetall_many([f"{self._p}variant:{pair}" for pair in pairs], self._variant_from)

    def _hgetall_many(self, keys: list[str], parse: Any) -> list[Any]:
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return [record for record in map(parse, pipe.execute()) if record is not None]

    def register_model(self, app_id: str, family: str) -> None:
        pipe = self._r.pipeline()
        pipe.sadd(f"{self._p}apps", app_id)
        pipe.sadd(f"{self._p}app:{app_id}:models", family)
        pipe.execute()

    def families_of(self, app_id: str) -> list[str]:
        return sorted(self._r.smembers(f"{self._p}app:{app_id}:models"))

    # -- dynamic --------------------------------------------------------------------------------
    def put_instance(self, record: InstanceRecord) -> None:
        if record.state is InstanceState.INACTIVE:
            self.remove_instance(record.variant, record.worker_id)
            return
        p, inst = self._p, f"{record.variant}|{record.worker_id}"
        old_device = self._r.hget(f"{p}instance:{inst}", "device")
        if old_device and old_device != record.device:
            self._set_active((record.variant, old_device), record.worker_id, None)
        pipe = self._r.pipeline()
        pipe.hset(f"{p}instance:{inst}", mapping={
            "variant": record.variant, "device": record.device, "worker_id": record.worker_id,
            "state": record.state.value, "qps": repr(record.qps), "avg_latency_ms": _enc(record.avg_latency_ms),
            "load_latency_ms": _enc(record.load_latency_ms), "updated_s": repr(record.updated_s)})
        pipe.sadd(f"{p}instances", inst)
        pipe.sadd(f"{p}worker:{record.worker_id}:instances", record.variant)
        pipe.execute()
        self._set_active(record.key, record.worker_id, record.qps if record.state is InstanceState.ACTIVE else None)

    def _set_active(self, key: Key, worker_id: str, qps: float | None) -> None:
        p, pair = self._p, _pair(key)
        pipe = self._r.pipeline()
        if qps is None:
            pipe.zrem(f"{p}active:{pair}", worker_id)
        else:
            pipe.zadd(f"{p}active:{pair}", {worker_id: qps})
        pipe.zcard(f"{p}active:{pair}")
        pipe.hget(f"{p}variant:{pair}", "family")
        *_, count, family = pipe.execute()
        if family:
            (self._r.sadd if count else self._r.srem)(f"{p}family:{family}:active", pair)

    @staticmethod
    def _instance_from(fields: dict[str, str]) -> InstanceRecord | None:
        if not fields:
            return None
        return InstanceRecord(
            variant=fields["variant"], device=fields["device"], worker_id=fields["worker_id"],
            state=InstanceState(fields["state"]), qps=float(fields["qps"]),
            avg_latency_ms=_opt_float(fields["avg_latency_ms"]), load_latency_ms=_opt_float(fields["load_latency_ms"]),
            updated_s=float(fields["updated_s"]))

    def get_instance(self, variant: str, worker_id: str) -> InstanceRecord | None:
        return self._instance_from(self._r.hgetall(f"{self._p}instance:{variant}|{worker_id}"))

    def remove_instance(self, variant: str, worker_id: str) -> None:
        p, inst = self._p, f"{variant}|{worker_id}"
        device = self._r.hget(f"{p}instance:{inst}", "device")
        if device is None:
            return
        pipe = self._r.pipeline()
        pipe.delete(f"{p}instance:{inst}")
        pipe.srem(f"{p}instances", inst)
        pipe.srem(f"{p}worker:{worker_id}:instances", variant)
        pipe.execute()
        self._set_active((variant, device), worker_id, None)

    def instances_on(self, worker_id: str) -> list[InstanceRecord]:
        variants = sorted(self._r.smembers(f"{self._p}worker:{worker_id}:instances"))
        return self._hgetall_many([f"{self._p}instance:{v}|{worker_id}" for v in variants], self._instance_from)

    def put_worker(self, record: WorkerRecord) -> None:
        p = self._p
        old_device = self._r.hget(f"{p}worker:{record.worker_id}", "device")
        pipe = self._r.pipeline()
        if old_device and old_device != record.device:
            pipe.zrem(f"{p}workers:util:{old_device}", record.worker_id)
        pipe.hset(f"{p}worker:{record.worker_id}", mapping={
            "worker_id": record.worker_id, "device": record.device, "device_kind": record.device_kind,
            "utilization": repr(record.utilization), "updated_s": repr(record.updated_s)})
        pipe.sadd(f"{p}workers", record.worker_id)
        pipe.zadd(f"{p}workers:util:{record.device}", {record.worker_id: record.utilization})
        pipe.execute()

    @staticmethod
    def _worker_from(fields: dict[str, str]) -> WorkerRecord | None:
        if not fields:
            return None
        return WorkerRecord(worker_id=fields["worker_id"], device=fields["device"], device_kind=fields["device_kind"],
                            utilization=float(fields["utilization"]), updated_s=float(fields["updated_s"]))

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        return self._worker_from(self._r.hgetall(f"{self._p}worker:{worker_id}"))

    def remove_worker(self, worker_id: str) -> None:
        p = self._p
        for variant in self._r.smembers(f"{p}worker:{worker_id}:instances"):
            self.remove_instance(variant, worker_id)
        device = self._r.hget(f"{p}worker:{worker_id}", "device")
        pipe = self._r.pipeline()
        pipe.delete(f"{p}worker:{worker_id}", f"{p}worker:{worker_id}:instances")
        pipe.srem(f"{p}workers", worker_id)
        if device:
            pipe.zrem(f"{p}workers:util:{device}", worker_id)
        pipe.execute()

    # -- reads for selection --------------------------------------------------------------------
    def fleet_state(self, families: Iterable[str], devices: Iterable[str]) -> FleetState:
        """Two round trips: the Active pairs and placement candidates, then each pair's least loaded."""
        families, devices = list(families), list(devices)
        pipe = self._r.pipeline(transaction=False)
        for family in families:
            pipe.smembers(f"{self._p}family:{family}:active")
        for device in devices:
            pipe.zrange(f"{self._p}workers:util:{device}", 0, 0)
        replies = pipe.execute()
        pairs = sorted(set().union(*replies[:len(families)]))
        placement = {d: first[0] for d, first in zip(devices, replies[len(families):], strict=True) if first}
        if not pairs:
            return FleetState(active={}, placement=placement)
        pipe = self._r.pipeline(transaction=False)
        for pair in pairs:
            pipe.zrange(f"{self._p}active:{pair}", 0, 0)
        firsts = pipe.execute()
        active = {tuple(pair.split("@", 1)): first[0] for pair, first in zip(pairs, firsts, strict=True) if first}
        return FleetState(active=active, placement=placement)

    def snapshot(self, at_s: float = 0.0) -> MetadataSnapshot:
        p = self._p
        pipe = self._r.pipeline(transaction=False)
        for name in ("variants", "apps", "instances", "workers"):
            pipe.smembers(f"{p}{name}")
        pairs, apps, instances, workers = (sorted(members) for members in pipe.execute())
        pipe = self._r.pipeline(transaction=False)
        for app in apps:
            pipe.smembers(f"{p}app:{app}:models")
        families = pipe.execute()
        variants = self._hgetall_many([f"{p}variant:{pair}" for pair in pairs], self._variant_from)
        return MetadataSnapshot(
            variants=tuple(sorted(variants, key=lambda r: r.key)),
            applications={app: tuple(sorted(f)) for app, f in zip(apps, families, strict=True)},
            instances=tuple(sorted(self._hgetall_many([f"{p}instance:{i}" for i in instances], self._instance_from),
                                   key=lambda r: (r.variant, r.worker_id))),
            workers=tuple(self._hgetall_many([f"{p}worker:{w}" for w in workers], self._worker_from)),
            at_s=at_s)

    def clear(self) -> None:
        """Delete every key this store wrote, found through its own index sets (no keyspace scan)."""
        p, r = self._p, self._r
        keys = [f"{p}{name}" for name in ("variants", "families", "apps", "instances", "workers")]
        instances = r.smembers(f"{p}instances")
        pairs = r.smembers(f"{p}variants") | {
            f"{inst.split('|', 1)[0]}@{r.hget(f'{p}instance:{inst}', 'device')}" for inst in instances}
        keys += [f"{p}variant:{pair}" for pair in pairs] + [f"{p}active:{pair}" for pair in pairs]
        for family in r.smembers(f"{p}families"):
            keys += [f"{p}family:{family}:by-accuracy", f"{p}family:{family}:active"]
        keys += [f"{p}app:{app}:models" for app in r.smembers(f"{p}apps")]
        keys += [f"{p}instance:{inst}" for inst in r.smembers(f"{p}instances")]
        for worker in r.smembers(f"{p}workers"):
            keys += [f"{p}worker:{worker}", f"{p}worker:{worker}:instances"]
            device = r.hget(f"{p}worker:{worker}", "device")
            if device:
                keys.append(f"{p}workers:util:{device}")
        for start in range(0, len(keys), 500):
            r.delete(*keys[start:start + 500])
