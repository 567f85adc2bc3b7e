"""getVariant (Algorithm 1): checklist items 4-7 and 10, indexed versus brute force."""
import random

import pytest

from shared.infaas import (
    FleetState,
    InstanceRecord,
    InstanceState,
    SelectionStatus,
    VariantIndex,
    VariantQuery,
    VariantRecord,
    WorkerRecord,
    brute_force_get_variant,
    get_variant,
)


def record(variant, device="cpu", *, accuracy=0.8, latency=10.0, load=100.0, price=1.0, max_batch=8):
    return VariantRecord(variant, "fam", device, price_per_hour=price, accuracy=accuracy,
                         batch_latency_ms=((1, latency), (8, latency * 4)), load_latency_ms=load, max_batch=max_batch)


RECORDS = [
    record("fast-lo", accuracy=0.70, latency=2.0, load=50.0),
    record("mid", accuracy=0.80, latency=10.0, load=500.0),
    record("mid-quick-load", accuracy=0.80, latency=20.0, load=100.0),
    record("slow-hi", accuracy=0.95, latency=80.0, load=2000.0),
]
INDEX = VariantIndex(RECORDS)


def select(query, fleet):
    chosen = get_variant(query, INDEX, fleet)
    assert chosen == brute_force_get_variant(query, RECORDS, fleet)
    return chosen


def fleet_of(instances, utilization):
    workers = [WorkerRecord(w, "cpu", "cpu", u) for w, u in utilization.items()]
    return FleetState.from_records(instances, workers)


def instance(variant, worker, state=InstanceState.ACTIVE, qps=0.0):
    return InstanceRecord(variant, "cpu", worker, state, qps=qps)


def test_rule4_a_matching_active_variant_wins_on_its_least_loaded_worker():
    fleet = fleet_of([instance("mid", "w1", qps=90.0), instance("mid", "w2", qps=10.0)],
                     {"w1": 0.1, "w2": 0.7, "w3": 0.0})
    chosen = select(VariantQuery(1, 50.0, 0.75), fleet)
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.ACTIVE, "mid", "w2")
    assert chosen.load_latency_ms == 0.0 and chosen.success


def test_rule4_active_variants_rank_by_hardware_cost_then_smallest_slack():
    """Spec §12.2: lowest hardware cost first, ties to the smallest positive slack ``SLO - T(b)``."""
    records = [record("quick", price=0.3, latency=10.0), record("slower", price=0.3, latency=40.0),
               record("gpu", device="gpu", price=0.5, latency=2.0), record("too-slow", price=0.1, latency=60.0)]
    fleet = FleetState(active={r.key: "w1" for r in records})
    query = VariantQuery(1, 50.0)
    chosen = get_variant(query, VariantIndex(records), fleet)
    # too-slow is cheapest but misses 50 ms; quick and slower cost the same: slower leaves 10 ms, quick 40
    assert chosen.variant == "slower" == brute_force_get_variant(query, records, fleet).variant
    # not $/h x latency (which prefers quick, 3.0 < 12.0) and not the GPU, though it is 20x faster
    cpu_or_gpu = [records[0], records[2]]
    assert get_variant(query, VariantIndex(cpu_or_gpu), FleetState(active={r.key: "w1" for r in cpu_or_gpu})
                       ).device == "cpu"


def test_rule4_workers_above_80_percent_utilization_are_skipped():
    """[REF]: workers above 80% are blacklisted for dispatch: the replica on w2 (90%) is not taken, even
    though it is the least loaded, and neither is w2 for a load."""
    instances = [instance("mid", "w1", qps=90.0), instance("mid", "w2", qps=10.0)]
    chosen = select(VariantQuery(1, 50.0, 0.75), fleet_of(instances, {"w1": 0.5, "w2": 0.9}))
    assert (chosen.status, chosen.worker_id) == (SelectionStatus.ACTIVE, "w1")
    chosen = select(VariantQuery(1, 50.0, 0.75), fleet_of(instances[1:], {"w2": 0.9}))
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.INACTIVE, "mid-quick-load", None)


@pytest.mark.parametrize("state", [InstanceState.OVERLOADED, InstanceState.INTERFERED])
def test_rule5_overloaded_or_interfered_instances_are_never_chosen_while_an_active_matches(state):
    fleet = fleet_of([instance("mid", "w1", state=state), instance("mid-quick-load", "w2")], {"w1": 0.0, "w2": 0.5})
    chosen = select(VariantQuery(1, 50.0, 0.75), fleet)
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.ACTIVE, "mid-quick-load", "w2")


def test_rule6_only_inactive_matches_gives_min_load_plus_inference_on_least_utilized_worker():
    fleet = fleet_of([instance("mid", "w1", state=InstanceState.OVERLOADED)], {"w1": 0.2, "w2": 0.7, "w3": 0.1})
    chosen = select(VariantQuery(1, 50.0, 0.75), fleet)
    # mid: 500 + 10; mid-quick-load: 100 + 20 -> the quick loader, on the least-utilized worker
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.INACTIVE, "mid-quick-load", "w3")
    assert chosen.load_latency_ms == 100.0 and chosen.latency_ms == 20.0


def test_rule6_considers_every_device_type_of_the_catalogue():
    """The fastest loader is on a type with no worker now: it is still the choice, with no worker (the
    VM-Autoscaler starts one); with a GPU worker it goes there."""
    records = [record("gpu-fast", device="gpu", latency=1.0, load=10.0), record("cpu-slow", latency=40.0)]
    chosen = get_variant(VariantQuery(1, 50.0), VariantIndex(records), FleetState(placement={"cpu": "c1"}))
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.INACTIVE, "gpu-fast", None)
    assert "new 'gpu' worker" in chosen.message and chosen.success
    fleet = FleetState(placement={"cpu": "c1", "gpu": "g1"})
    assert get_variant(VariantQuery(1, 50.0), VariantIndex(records), fleet).worker_id == "g1"


def test_rule7_nothing_matches_gives_a_flagged_suggestion():
    fleet = fleet_of([], {"w1": 0.0})
    chosen = select(VariantQuery(1, 5.0, 0.9), fleet)  # 0.9 needs slow-hi (80 ms); 5 ms needs fast-lo (0.70)
    assert chosen.status is SelectionStatus.SUGGESTED and not chosen.success
    assert chosen.variant == "fast-lo" and "requirements_not_met" in chosen.message
    # distance: fast-lo 0.2/0.9 = 0.22 ; slow-hi 75/5 = 15 ; mid 0.11 + 1 = 1.11


def test_batch_beyond_every_max_batch_is_unavailable_and_no_worker_is_not():
    assert select(VariantQuery(9, 500.0), fleet_of([], {"w1": 0.0})).status is SelectionStatus.UNAVAILABLE
    chosen = select(VariantQuery(1, 500.0), FleetState())
    assert (chosen.status, chosen.variant, chosen.worker_id) == (SelectionStatus.INACTIVE, "fast-lo", None)
    suggested = select(VariantQuery(1, 5.0, 0.9), FleetState())
    assert (suggested.status, suggested.variant, suggested.worker_id) == (SelectionStatus.SUGGESTED, "fast-lo", None)


def test_latency_is_looked_up_at_the_querys_batch():
    fleet = fleet_of([], {"w1": 0.0})
    assert select(VariantQuery(2, 9.0), fleet).variant == "fast-lo"   # batch 2 -> profiled 8: 8 ms
    assert select(VariantQuery(1, 9.0, 0.75), fleet).status is SelectionStatus.SUGGESTED


def test_query_goals_are_validated():
    with pytest.raises(ValueError, match="batch_size"):
        VariantQuery(0, 10.0)
    with pytest.raises(ValueError, match="slo_ms"):
        VariantQuery(1, float("nan"))
    with pytest.raises(ValueError, match="accuracy_floor"):
        VariantQuery(1, 10.0, 1.5)


# ------------------------------------------------------------------ indexed == brute force (item 10)

DEVICES = ("cpu", "gpu", "inf")
BATCHES = (1, 2, 4, 8, 10, 16, 20, 32, 50, 64)


def random_catalogue(rng, n):
    records = []
    for i in range(n):
        batches = sorted(rng.sample(BATCHES, rng.randint(1, 5)))
        base = rng.uniform(0.5, 200.0)
        latency = tuple((b, round(base * (1 + 0.3 * b) * rng.uniform(0.9, 1.1), 3)) for b in batches)
        records.append(VariantRecord(
            f"v{i}", "fam", rng.choice(DEVICES), price_per_hour=rng.choice([0.0, 0.1, 1.0, 3.0]),
            accuracy=rng.choice([None, round(rng.uniform(0.5, 0.9), 2)]), batch_latency_ms=latency,
            load_latency_ms=rng.choice([None, round(rng.uniform(100, 5000), 1)]),
            max_batch=rng.choice([batches[-1], max(1, batches[-1] // 2), 64])))
    return records


def random_fleet(rng, records):
    active = {r.key: f"w{rng.randint(0, 5)}" for r in records if rng.random() < 0.15}
    return FleetState(active=active, placement={d: f"w-{d}" for d in DEVICES if rng.random() < 0.7})


@pytest.mark.parametrize("seed", range(6))
def test_indexed_selection_agrees_with_brute_force_on_random_catalogues(seed):
    rng = random.Random(seed)
    for _ in range(40):
        records = random_catalogue(rng, rng.randint(1, 80))
        index = VariantIndex(records)
        fleet = random_fleet(rng, records)
        for _ in range(25):
            query = VariantQuery(rng.randint(1, 70), rng.uniform(0.5, 400.0),
                                 rng.choice([None, 0.0, round(rng.uniform(0.4, 0.95), 2)]))
            assert get_variant(query, index, fleet) == brute_force_get_variant(query, records, fleet)
