"""InfaasDispatch: getVariant's rules over live workers and the metadata snapshot, and on the simulator."""
import numpy as np

from shared.infaas import InfaasDispatch, InstanceRecord, InstanceState, MetadataSnapshot, WorkerRecord
from shared.policy.base import PendingQuery, WorkerView
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.sim import Workload, make_fleet, simulate

PROFILES = ProfileSet(
    source="test",
    devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)],
    variants=[
        VariantProfile(variant="fast", family="m", device="cpu", accuracy=0.9,
                       batch_latency_ms={1: 2.0, 4: 5.0, 8: 9.0}, load_latency_ms=50.0, max_batch=8),
        VariantProfile(variant="slow", family="m", device="cpu", accuracy=0.9,
                       batch_latency_ms={1: 30.0, 4: 60.0, 8: 100.0}, load_latency_ms=10.0, max_batch=8),
    ],
)
BOTH = ("fast", "slow")


def query(i, slo=50.0, rows=1, candidates=BOTH):
    return PendingQuery(str(i), "app", rows, 0.0, slo, candidates)


def worker(wid, variants, busy_ms=0.0, max_batch=8):
    return WorkerView(wid, "cpu", tuple(variants), int(busy_ms > 0), busy_ms, 0.0, max_batch)


def policy(states=(), utilization=None):
    dispatch = InfaasDispatch(PROFILES)
    instances = tuple(InstanceRecord(v, "cpu", w, s) for v, w, s in states)
    workers = tuple(WorkerRecord(w, "cpu", "cpu", u) for w, u in (utilization or {}).items())
    dispatch.update_from_metadata(MetadataSnapshot(instances=instances, workers=workers))
    return dispatch


def sent(decision):
    return {a.query_ids: (a.worker_id, a.variant) for a in decision.assignments}


def test_active_instance_meeting_the_slo_gets_the_query():
    decision = policy().decide(0.0, [query(0)], [worker("w1", ["slow"]), worker("w2", ["fast"])])
    # same hardware cost: the smallest slack (30 ms within 50) keeps the fast variant free (spec §12.2)
    assert sent(decision) == {("0",): ("w1", "slow")}


def test_workers_above_80_percent_utilization_are_skipped():
    decision = policy(utilization={"w1": 0.85, "w2": 0.1}).decide(
        0.0, [query(0)], [worker("w1", ["slow"]), worker("w2", ["fast"])])
    assert sent(decision) == {("0",): ("w2", "fast")}


def test_no_load_is_asked_when_no_worker_of_the_type_may_take_it():
    dispatch = policy(utilization={"w1": 0.9})
    decision = dispatch.decide(0.0, [query(0, slo=10.0)], [worker("w1", ["slow"])])
    assert decision.loads == () and sent(decision) == {("0",): ("w1", "slow")}, "served on what is loaded"


def test_least_loaded_worker_among_instances_of_the_chosen_variant():
    dispatch = InfaasDispatch(PROFILES)
    dispatch.update_from_metadata(MetadataSnapshot(instances=(
        InstanceRecord("fast", "cpu", "w1", InstanceState.ACTIVE, qps=80.0),
        InstanceRecord("fast", "cpu", "w2", InstanceState.ACTIVE, qps=5.0))))
    decision = dispatch.decide(0.0, [query(0)], [worker("w1", ["fast"]), worker("w2", ["fast"])])
    assert sent(decision) == {("0",): ("w2", "fast")}


def test_overloaded_or_interfered_instances_are_skipped_for_an_active_one():
    for state in (InstanceState.OVERLOADED, InstanceState.INTERFERED):
        decision = policy(states=[("fast", "w2", state)]).decide(
            0.0, [query(0)], [worker("w1", ["slow"]), worker("w2", ["fast"])])
        assert sent(decision) == {("0",): ("w1", "slow")}


def test_query_waits_for_its_busy_active_instance_rather_than_an_overloaded_one():
    dispatch = policy(states=[("slow", "w2", InstanceState.OVERLOADED)])
    decision = dispatch.decide(0.0, [query(0)], [worker("w1", ["fast"], busy_ms=3.0), worker("w2", ["slow"])])
    assert decision.assignments == ()


def test_inactive_choice_is_a_load_request_and_the_query_is_served_meanwhile():
    dispatch = policy(utilization={"w1": 0.8, "w2": 0.1})
    # only `slow` is loaded and it misses a 10 ms SLO; `fast` would meet it once loaded
    workers = [worker("w1", ["slow"]), worker("w2", [])]
    decision = dispatch.decide(0.0, [query(0, slo=10.0)], workers)
    assert sent(decision) == {("0",): ("w1", "slow")}
    assert decision.loads == (("w2", "fast"),)  # least-utilized worker of its type
    assert dispatch.decide(1.0, [query(1, slo=10.0)], workers).loads == (), "asked once while it loads"
    assert dispatch.decide(6.0, [query(2, slo=10.0)], workers).loads == (("w2", "fast"),), "asked again later"


def test_a_variant_is_never_loaded_again_where_it_is_held_overloaded():
    # `fast` is the Inactive choice: its only instance is Overloaded, on the least-utilized worker
    dispatch = policy(states=[("fast", "w2", InstanceState.OVERLOADED)], utilization={"w1": 0.8, "w2": 0.1})
    workers = [worker("w1", ["slow"], busy_ms=20.0), worker("w2", ["fast"])]
    for now in (0.0, 6.0, 12.0):
        decision = dispatch.decide(now, [query(0, slo=10.0)], workers)
        assert decision.loads == (), "a reload would only stall the worker that holds it"
        assert sent(decision) == {("0",): ("w2", "fast")}, "served there meanwhile"


def test_batches_follow_the_head_while_latency_stays_within_every_slo():
    queue = [query(0), query(1), query(2, rows=4), query(3, slo=6.0), query(4, rows=4)]
    decision = policy().decide(0.0, queue, [worker("w1", ["fast"])])
    # rows 1+1+4 = 6 -> profiled 8: 9 ms <= 50; query 3 would need 9 ms > its 6 ms; query 4 exceeds 8 rows
    assert sent(decision) == {("0", "1", "2"): ("w1", "fast")}


def test_unprofiled_loaded_candidates_are_served_first_come_first_served():
    decision = InfaasDispatch().decide(0.0, [query(0), query(1)], [worker("w1", ["slow"]), worker("w2", [])])
    assert sent(decision) == {("0", "1"): ("w1", "slow")}


def test_metadata_store_profiles_extend_and_replace_the_catalogues():
    registered = VariantProfile(variant="reg", family="m", device="cpu", accuracy=0.9,
                                batch_latency_ms={1: 1.0}, max_batch=1)
    slower_fast = PROFILES.get("fast", "cpu").model_copy(update={"batch_latency_ms": {1: 40.0, 8: 45.0}})
    store_view = ProfileSet(source="redis", devices=PROFILES.devices, variants=[registered, slower_fast])
    dispatch = InfaasDispatch(PROFILES)
    dispatch.update_from_metadata(MetadataSnapshot.from_profiles(store_view))
    workers = [worker("w1", ["fast"]), worker("w2", ["slow"]), worker("w3", ["reg"])]
    candidates = ("fast", "slow", "reg")
    # only the store knows `reg` (1 ms): the one variant within a 2 ms SLO
    assert sent(dispatch.decide(0.0, [query(0, slo=2.0, candidates=candidates)], workers)) == {("0",): ("w3", "reg")}
    # the store's profile of `fast` (40 ms) replaced the catalogue's (2 ms): a 35 ms SLO now needs `slow`
    decision = dispatch.decide(0.0, [query(1, slo=35.0, candidates=("fast", "slow"))], workers)
    assert sent(decision) == {("1",): ("w2", "slow")}


def test_serves_a_simulated_workload_within_slo():
    fleet = make_fleet({"cpu": 2}, ["fast"], max_batch=8)
    rng = np.random.default_rng(0)
    load = Workload(arrival_s=np.cumsum(rng.exponential(1 / 200.0, 400)), batch_size=np.ones(400, dtype=int),
                    application="app", slo_ms=50.0, candidate_variants=BOTH)
    result = simulate(load, fleet, policy(), PROFILES, seed=0)
    assert result.success and result.fraction_within_slo() == 1.0


def test_with_its_own_monitor_a_busy_worker_is_left_out_without_any_metadata_store():
    """No registry process: the policy's monitoring daemon hears the heartbeats (w1 busy 90%) and, at the end
    of its window, leaves w1 out as the metadata store's snapshot would."""
    from schemas import WorkerHeartbeat
    from shared.infaas.monitor import MonitorConfig

    def beat(wid, variant, busy, at):
        return WorkerHeartbeat(worker_id=wid, device="cpu", emulated=True, variants=[variant], max_batch=8, inflight=0,
                               busy_fraction=busy, price_per_hour=0.1, at=at)

    workers = [worker("w1", ["slow"]), worker("w2", ["fast"])]
    dispatch = InfaasDispatch(PROFILES, monitor=MonitorConfig(window_s=2.0))
    for at in (0.0, 1.0):
        dispatch.on_worker_event(beat("w1", "slow", 0.9, at), at)
        dispatch.on_worker_event(beat("w2", "fast", 0.1, at), at)
    assert sent(dispatch.decide(1.5, [query(0)], workers)) == {("0",): ("w1", "slow")}, "its window has not ended"
    dispatch.on_worker_event(beat("w1", "slow", 0.9, 2.0), 2.0)
    assert sent(dispatch.decide(2.5, [query(1)], workers)) == {("1",): ("w2", "fast")}
    dispatch.update_from_metadata(MetadataSnapshot())  # an empty store does not undo what the monitor saw
    assert sent(dispatch.decide(2.6, [query(2)], workers)) == {("2",): ("w2", "fast")}
