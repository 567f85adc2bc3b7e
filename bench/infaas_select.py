"""getVariant latency (INFaaS §6.4 / Table 7): indexed vs brute force, in memory and through Redis.

Run ``python -m bench.infaas_select``. Writes ``bench/results/infaas_select.json`` and prints it.

The catalogue is **generated**, not measured: 8 families shaped like the paper's Table 6 (22
architectures), each architecture on three device types (cpu-1t, gpu-cuda, inf1) and several max
batches, with profiles drawn (seeded) inside the paper's ranges: accuracy 56.6-82.5 %, load latency
0.59-11 s, batch-1 latency 1.5 ms-5.7 s. A fleet of 24 workers holds random instances (mostly Active,
some Overloaded or Interfered). Queries are application-level (2-3 families per application) with a
random batch, SLO (5 ms-2 s, log-uniform) and accuracy floor. Each call is timed alone with
``perf_counter_ns``; the brute-force selector runs the same queries over the same scope, and every
answer is checked to be identical. ``scaling`` repeats the in-memory measurement with one application
spanning catalogues of 10, 166 and 1,000 variants (checklist item 10: latency must not grow).

The Redis path reads the dynamic state per query as the Dispatcher would (two pipelined round trips on
the local Redis at ``MERIDIAN_REDIS_URL``, keys under ``meridian:bench-infaas:``, removed afterwards),
then selects on the in-memory static index; it is skipped with a note when Redis is unreachable.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import random
import statistics
import time

from bench.common import write_result
from shared.adapters.infaas_store import RedisMetadataStore
from shared.infaas import (
    FleetState,
    InstanceRecord,
    InstanceState,
    VariantIndex,
    VariantQuery,
    VariantRecord,
    WorkerRecord,
    brute_force_get_variant,
    get_variant,
)
from shared.settings import Settings

#: Table 6: family -> architectures
FAMILIES = {
    "mobilenet": ["mobilenetv1", "mobilenetv2"], "alexnet": ["alexnet"],
    "densenet": ["densenet121", "densenet169", "densenet201"], "nasnet": ["nasnetmobile"],
    "resnet": ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50"],
    "vgg": ["vgg11", "vgg16", "vgg19"], "inception": ["inceptionv3", "inceptionv4", "inceptionresnetv2"],
    "gnmt": ["gnmt-4", "gnmt-8", "gnmt-16"],
}
#: device type -> (kind, $/h, latency factor vs the CPU, max batches generated)
DEVICES = {"cpu-1t": ("cpu", 0.0425, 1.0, (1, 8)), "gpu-cuda": ("gpu", 0.526, 0.04, (1, 8, 32, 64)),
           "inf1": ("inferentia", 0.362, 0.08, (1, 8))}
BATCHES = (1, 2, 4, 8, 16, 32, 64)
NUM_QUERIES = 20_000
PREFIX = "meridian:bench-infaas:"


def catalogue(rng: random.Random) -> list[VariantRecord]:
    records = []
    for family, architectures in FAMILIES.items():
        for arch in architectures:
            accuracy = round(rng.uniform(0.566, 0.825), 3)
            cpu_ms = math.exp(rng.uniform(math.log(15.0), math.log(5700.0)))
            load_ms = math.exp(rng.uniform(math.log(590.0), math.log(11_000.0)))
            for device, (kind, price, factor, max_batches) in DEVICES.items():
                for max_batch in max_batches:
                    b1 = max(1.5, cpu_ms * factor * rng.uniform(0.9, 1.1))
                    slope = rng.uniform(0.3, 0.9) if kind == "cpu" else rng.uniform(0.05, 0.3)
                    records.append(VariantRecord(
                        f"{arch}-{device}-b{max_batch}", family, device, device_kind=kind, price_per_hour=price,
                        accuracy=accuracy, batch_latency_ms=tuple((b, round(b1 * (1 + slope * (b - 1)), 3))
                                                                  for b in BATCHES if b <= max(max_batch, 1)),
                        load_latency_ms=round(load_ms * rng.uniform(0.8, 1.2), 1), max_batch=max_batch))
    return records


def fleet_records(rng: random.Random, records: list[VariantRecord]) -> tuple[list[InstanceRecord], list[WorkerRecord]]:
    workers = [WorkerRecord(f"w{i:02d}", device, DEVICES[device][0], round(rng.random(), 3))
               for i, device in enumerate(rng.choice(list(DEVICES)) for _ in range(24))]
    states = [InstanceState.ACTIVE] * 6 + [InstanceState.OVERLOADED, InstanceState.INTERFERED]
    instances = {}
    for record in rng.sample(records, k=min(40, len(records))):
        for worker in rng.sample([w for w in workers if w.device == record.device] or [workers[0]], k=1):
            if worker.device == record.device:
                instances[(record.variant, worker.worker_id)] = InstanceRecord(
                    record.variant, record.device, worker.worker_id, rng.choice(states),
                    qps=round(rng.uniform(0, 500), 1))
    return list(instances.values()), workers


def queries(rng: random.Random, apps: list[str], n: int) -> list[tuple[str, VariantQuery]]:
    out = []
    for _ in range(n):
        batch = rng.choice(BATCHES[:4]) if rng.random() < 0.8 else rng.choice(BATCHES)
        slo = math.exp(rng.uniform(math.log(5.0), math.log(2000.0)))
        out.append((rng.choice(apps), VariantQuery(batch, slo, rng.choice([None, 0.6, 0.7, 0.75, 0.78]))))
    return out


def time_us(call, items) -> list[float]:
    gc.collect()
    samples = []
    for item in items:
        start = time.perf_counter_ns()
        call(item)
        samples.append((time.perf_counter_ns() - start) / 1000.0)
    return samples


def p(samples: list[float], q: float) -> float:
    return round(statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1], 2)


def scaling(rng: random.Random, records: list[VariantRecord]) -> dict[str, dict[str, float]]:
    """One application over the whole catalogue, at 10, 166 and 1,000 variants."""
    base = records * (1000 // len(records) + 1)
    results = {}
    for n in (10, 166, 1000):
        scope = [dataclasses.replace(r, variant=f"{r.variant}-{k}") for k, r in enumerate(base[:n])]
        index = VariantIndex(scope)
        instances, workers = fleet_records(rng, scope)
        fleet = FleetState.from_records(instances, workers)
        qs = [q for _, q in queries(rng, ["all"], 5000)]
        results[str(n)] = {"get_variant_us_p50": p(time_us(lambda q: get_variant(q, index, fleet), qs), 50),
                           "brute_force_us_p50": p(time_us(lambda q: brute_force_get_variant(q, scope, fleet), qs), 50)}
    return results


def redis_path(records, instances, workers, apps, indexes, work) -> dict[str, object]:
    import redis

    settings = Settings()
    store = RedisMetadataStore.from_url(settings.redis_url, prefix=PREFIX)
    try:
        store.clear()
        for record in records:
            store.put_variant(record)
        for app, families in apps.items():
            for family in families:
                store.register_model(app, family)
        for worker in workers:
            store.put_worker(worker)
        for instance in instances:
            store.put_instance(instance)
        families = {app: store.families_of(app) for app in apps}
        devices = {app: sorted(indexes[app].devices) for app in apps}
        fleet = FleetState.from_records(instances, workers)
        mismatches = sum(get_variant(q, indexes[app], store.fleet_state(families[app], devices[app]))
                         != get_variant(q, indexes[app], fleet) for app, q in work[:500])
        samples = time_us(lambda item: get_variant(item[1], indexes[item[0]],
                                                   store.fleet_state(families[item[0]], devices[item[0]])), work[:5000])
        return {"redis_get_variant_us_p50": p(samples, 50), "redis_get_variant_us_p99": p(samples, 99),
                "redis_mismatches_vs_memory": mismatches, "redis_url": settings.redis_url}
    except redis.ConnectionError as exc:
        return {"redis_get_variant_us_p50": None, "redis_note": f"Redis unreachable ({exc}); start it with "
                                                                 f"`bash infra/redis/redis.sh start`"}
    finally:
        try:
            store.clear()
        except redis.ConnectionError:
            pass


def main() -> None:
    rng = random.Random(20210714)
    records = catalogue(rng)
    families = list(FAMILIES)
    apps = {f"app{i}": tuple(rng.sample(families, k=rng.choice([2, 3]))) for i in range(6)}
    scopes = {app: [r for r in records if r.family in fams] for app, fams in apps.items()}
    started = time.perf_counter()
    indexes = {app: VariantIndex(scope) for app, scope in scopes.items()}
    build_ms = (time.perf_counter() - started) * 1000.0
    instances, workers = fleet_records(rng, records)
    fleet = FleetState.from_records(instances, workers)
    work = queries(rng, list(apps), NUM_QUERIES)

    mismatches = sum(get_variant(q, indexes[a], fleet) != brute_force_get_variant(q, scopes[a], fleet) for a, q in work)
    statuses: dict[str, int] = {}
    for app, q in work:
        status = get_variant(q, indexes[app], fleet).status.value
        statuses[status] = statuses.get(status, 0) + 1
    indexed = time_us(lambda item: get_variant(item[1], indexes[item[0]], fleet), work)
    brute = time_us(lambda item: brute_force_get_variant(item[1], scopes[item[0]], fleet), work)
    result = {
        "variants": len(records),
        "get_variant_us_p50": p(indexed, 50),
        "get_variant_us_p99": p(indexed, 99),
        "brute_force_us_p50": p(brute, 50),
        "brute_force_us_p99": p(brute, 99),
        "speedup_p50": round(p(brute, 50) / p(indexed, 50), 2),
        "mismatches_vs_brute_force": mismatches,
        "queries": NUM_QUERIES,
        "outcomes": statuses,
        "scope_variants_mean": round(statistics.mean(len(s) for s in scopes.values()), 1),
        "index_build_ms_all_apps": round(build_ms, 1),
        "instances": len(instances),
        "workers": len(workers),
        **redis_path(records, instances, workers, apps, indexes, work),
        "scaling_one_app": scaling(rng, records),
        "catalogue": "generated (seeded) within the paper's ranges; not measured profiles",
    }
    write_result("infaas_select", result)


if __name__ == "__main__":
    main()
