"""The metadata store: the in-memory and the Redis implementation behave the same (spec §7).

The Redis half runs a throwaway ``redis-server`` on a free loopback port; it is skipped only when
``redis-server`` is not installed.
"""
import shutil
import socket
import subprocess
import time
import uuid

import pytest

from shared.adapters.infaas_store import RedisMetadataStore
from shared.infaas import (
    FleetState,
    InMemoryMetadataStore,
    InstanceRecord,
    InstanceState,
    MetadataSnapshot,
    VariantRecord,
    WorkerRecord,
)
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

A, O, X = InstanceState.ACTIVE, InstanceState.OVERLOADED, InstanceState.INTERFERED


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis"))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        yield InMemoryMetadataStore()
        return
    redis_store = RedisMetadataStore.from_url(request.getfixturevalue("redis_url"),
                                              prefix=f"meridian:test-{uuid.uuid4().hex[:8]}:")
    yield redis_store
    redis_store.clear()


def variant(name, device="cpu", family="fam", accuracy=0.8):
    return VariantRecord(name, family, device, device_kind=device, price_per_hour=0.5, accuracy=accuracy,
                         batch_latency_ms=((1, 2.0), (8, 9.5)), load_latency_ms=120.0, peak_memory_mb=33.0, max_batch=8)


def scenario(store):
    """A fixed sequence of writes covering every index; returns what every read gives back."""
    for v in (variant("a", accuracy=0.9), variant("b", accuracy=0.7), variant("c", accuracy=None),
              variant("a", device="gpu", accuracy=0.9), variant("z", family="other", accuracy=0.99)):
        store.put_variant(v)
    store.put_variant(variant("b", accuracy=0.75))  # re-profiled: replaces, keeps one entry
    store.register_model("app1", "fam")
    store.register_model("app1", "other")
    store.register_model("app2", "fam")
    for w, device, util in (("w1", "cpu", 0.5), ("w2", "cpu", 0.2), ("w3", "gpu", 0.9), ("w4", "cpu", 0.2)):
        store.put_worker(WorkerRecord(w, device, device, util, updated_s=1.0))
    for v, w, state, qps in (("a", "w1", A, 30.0), ("a", "w2", A, 10.0), ("b", "w1", O, 99.0),
                             ("b", "w2", X, 1.0), ("c", "w4", A, 0.0), ("a", "w3", A, 5.0), ("z", "w1", A, 2.0)):
        device = "gpu" if w == "w3" else "cpu"
        store.put_instance(InstanceRecord(v, device, w, state, qps=qps, avg_latency_ms=2.5, load_latency_ms=100.0,
                                          updated_s=2.0))
    store.put_instance(InstanceRecord("b", "cpu", "w2", A, qps=3.0, updated_s=3.0))   # mitigated
    store.put_instance(InstanceRecord("c", "cpu", "w4", InstanceState.INACTIVE))       # unloaded
    store.put_worker(WorkerRecord("w2", "cpu", "cpu", 0.95, updated_s=4.0))           # busier now
    observed = {
        "variant": store.get_variant("a", "gpu"),
        "missing": store.get_variant("nope", "cpu"),
        "family": [r.key for r in store.variants_of_family("fam")],
        "family>=0.75": [r.key for r in store.variants_of_family("fam", min_accuracy=0.75)],
        "families": (store.families_of("app1"), store.families_of("app2"), store.families_of("nope")),
        "instance": store.get_instance("b", "w2"),
        "gone": store.get_instance("c", "w4"),
        "on w1": store.instances_on("w1"),
        "fleet": store.fleet_state(["fam"], ["cpu", "gpu", "tpu"]),
        "fleet other": store.fleet_state(["other"], ["cpu"]),
    }
    store.remove_worker("w1")
    store.remove_instance("a", "w3")
    observed["after removals"] = store.fleet_state(["fam", "other"], ["cpu", "gpu"])
    observed["worker"] = (store.get_worker("w1"), store.get_worker("w2"))
    observed["snapshot"] = store.snapshot(at_s=9.0)
    return observed


def test_store_indexes_answer_as_expected(store):
    seen = scenario(store)
    assert seen["variant"] == variant("a", device="gpu", accuracy=0.9) and seen["missing"] is None
    assert seen["family"] == [("c", "cpu"), ("b", "cpu"), ("a", "cpu"), ("a", "gpu")]
    assert seen["family>=0.75"] == [("b", "cpu"), ("a", "cpu"), ("a", "gpu")]
    assert seen["families"] == (["fam", "other"], ["fam"], [])
    assert seen["instance"].state is A and seen["instance"].qps == 3.0 and seen["gone"] is None
    assert [i.variant for i in seen["on w1"]] == ["a", "b", "z"]
    # least loaded Active per pair (b: w1 Overloaded, w2 Active again); lowest utilization per device
    assert seen["fleet"] == FleetState(active={("a", "cpu"): "w2", ("a", "gpu"): "w3", ("b", "cpu"): "w2"},
                                       placement={"cpu": "w4", "gpu": "w3"})
    assert seen["fleet other"] == FleetState(active={("z", "cpu"): "w1"}, placement={"cpu": "w4"})
    assert seen["after removals"] == FleetState(active={("a", "cpu"): "w2", ("b", "cpu"): "w2"},
                                                placement={"cpu": "w4", "gpu": "w3"})
    assert seen["worker"] == (None, WorkerRecord("w2", "cpu", "cpu", 0.95, updated_s=4.0))
    snapshot = seen["snapshot"]
    assert [r.key for r in snapshot.variants] == [("a", "cpu"), ("a", "gpu"), ("b", "cpu"), ("c", "cpu"), ("z", "cpu")]
    assert snapshot.applications == {"app1": ("fam", "other"), "app2": ("fam",)}
    assert [(i.variant, i.worker_id) for i in snapshot.instances] == [("a", "w2"), ("b", "w2")]
    # the store's indexes are raw; selection's fleet also leaves out workers above 80% (w2: 0.95, w3: 0.9)
    assert snapshot.fleet(max_utilization=1.0) == seen["after removals"]
    assert snapshot.fleet() == FleetState(active={}, placement={"cpu": "w4"})


def test_in_memory_and_redis_stores_behave_the_same(redis_url):
    redis_store = RedisMetadataStore.from_url(redis_url, prefix=f"meridian:test-{uuid.uuid4().hex[:8]}:")
    try:
        assert scenario(redis_store) == scenario(InMemoryMetadataStore())
    finally:
        redis_store.clear()


def test_clear_removes_every_key_the_store_wrote(redis_url):
    import redis

    prefix = f"meridian:test-{uuid.uuid4().hex[:8]}:"
    redis_store = RedisMetadataStore.from_url(redis_url, prefix=prefix)
    scenario(redis_store)
    redis_store.clear()
    assert list(redis.Redis.from_url(redis_url).scan_iter(match=prefix + "*")) == []


def test_put_profiles_stores_a_profile_set_with_device_kinds(store):
    profiles = ProfileSet(
        source="test", devices=[DeviceType(name="gpu-cuda", kind="gpu", price_per_hour=0.526)],
        variants=[VariantProfile(variant="m-fp32-all-b8", family="m", device="gpu-cuda", accuracy=0.9,
                                 batch_latency_ms={1: 1.0, 8: 2.0}, max_batch=8)])
    (record,) = store.put_profiles(profiles)
    assert store.get_variant("m-fp32-all-b8", "gpu-cuda") == record
    assert (record.device_kind, record.price_per_hour) == ("gpu", 0.526)
    assert MetadataSnapshot.from_profiles(profiles).variants == (record,)


def test_redis_store_refuses_a_client_without_decoded_responses_or_a_foreign_prefix(redis_url):
    import redis

    with pytest.raises(ValueError, match="decode_responses"):
        RedisMetadataStore(redis.Redis.from_url(redis_url))
    with pytest.raises(ValueError, match="prefix"):
        RedisMetadataStore.from_url(redis_url, prefix="other:")
