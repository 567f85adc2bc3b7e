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


def query(i, slo=50.0, rows=1, candidates=BOTH, at=0.0):
    return PendingQuery(str(i), "app", rows, at, slo, candidates)


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
    assert dispatch.decide(1.0, [query(1, slo=10.0, at=1.0)], workers).loads == (), "asked once while it loads"
    assert dispatch.decide(6.0, [query(2, slo=10.0, at=6.0)], workers).loads == (("w2", "fast"),), \
        "asked again later"


def test_a_variant_is_never_loaded_again_where_it_is_held_overloaded():
    # `fast` is the Inactive choice: its only instance is Overloaded, on the least-utilized worker
    dispatch = policy(states=[("fast", "w2", InstanceState.OVERLOADED)], utilization={"w1": 0.8, "w2": 0.1})
    workers = [worker("w1", ["slow"], busy_ms=20.0), worker("w2", ["fast"])]
    for now in (0.0, 6.0, 12.0):
        decision = dispatch.decide(now, [query(0, slo=10.0, at=now)], workers)
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


def test_metadata_store_profiles_extend_the_catalogues_which_follow_what_batches_show():
    from schemas import BatchFinished

    registered = VariantProfile(variant="reg", family="m", device="cpu", accuracy=0.9,
                                batch_latency_ms={1: 1.0}, max_batch=1)
    store_view = ProfileSet(source="redis", devices=PROFILES.devices, variants=[registered, *PROFILES.variants])
    dispatch = InfaasDispatch(PROFILES)
    dispatch.update_from_metadata(MetadataSnapshot.from_profiles(store_view))
    workers = [worker("w1", ["fast"]), worker("w2", ["slow"]), worker("w3", ["reg"])]
    candidates = ("fast", "slow", "reg")
    # only the store knows `reg` (1 ms): the one variant within a 1.5 ms SLO
    assert sent(dispatch.decide(0.0, [query(0, slo=1.5, candidates=candidates)], workers)) == {("0",): ("w3", "reg")}
    assert sent(dispatch.decide(0.0, [query(1, slo=20.0)], workers)) == {("1",): ("w1", "fast")}
    for k in range(30):  # `fast` takes 40 ms a row where its profile promised 2
        dispatch.on_worker_event(BatchFinished(worker_id="w1", batch_id=f"b{k}", device="cpu", variant="fast",
                                               rows=1, compute_ms=40.0, ok=True, at=float(k)), float(k))
    dispatch.update_from_metadata(MetadataSnapshot.from_profiles(store_view))  # the store's copy does not undo it
    decision = dispatch.decide(30.0, [query(2, slo=20.0, at=30.0)], workers)
    assert sent(decision) == {("2",): ("w2", "slow")}, "nothing meets 20 ms now: the closest loaded serves it"


def test_plans_with_the_tail_of_the_measured_samples():
    spiky = PROFILES.get("fast", "cpu").model_copy(update={"latency_samples_ms": {1: [2.0] * 9 + [80.0]}})
    profiles = PROFILES.model_copy(update={"variants": [spiky, PROFILES.get("slow", "cpu")]})
    workers = [worker("w1", ["fast"]), worker("w2", ["slow"])]
    assert sent(InfaasDispatch(profiles).decide(0.0, [query(0, slo=40.0)], workers)) == {("0",): ("w2", "slow")}
    median = InfaasDispatch(profiles, latency_quantile=0.5)
    assert sent(median.decide(0.0, [query(0, slo=20.0)], workers)) == {("0",): ("w1", "fast")}


def test_getvariant_matches_the_time_a_query_has_left():
    workers = [worker("w1", ["slow"]), worker("w2", ["fast"])]
    assert sent(policy().decide(0.0, [query(0)], workers)) == {("0",): ("w1", "slow")}
    assert sent(policy().decide(0.025, [query(0)], workers)) == {("0",): ("w2", "fast")}, "25 ms left: `slow` is 30"


def test_a_busy_workers_instance_counts_as_overloaded_while_an_idle_one_matches():
    workers = [worker("w1", ["slow"], busy_ms=1.0), worker("w2", ["fast"])]
    assert sent(policy().decide(0.0, [query(0)], workers)) == {("0",): ("w2", "fast")}


def test_a_query_waits_for_a_busy_worker_only_if_it_still_finishes_in_time():
    dispatch = policy(states=[("fast", "w2", InstanceState.INTERFERED)])
    in_time = [worker("w1", ["slow"], busy_ms=15.0), worker("w2", ["fast"])]
    assert dispatch.decide(0.0, [query(0)], in_time).assignments == (), "15 + 30 ms <= 50: it waits"
    # behind the first, a second would need 15 + 60 ms (a batch of 2 is profiled at 4 rows): it goes to the
    # closest idle instance, and takes the first along (it has no Active match on an idle worker either)
    assert sent(dispatch.decide(0.0, [query(0), query(1)], in_time)) == {("1", "0"): ("w2", "fast")}
    too_late = [worker("w1", ["slow"], busy_ms=25.0), worker("w2", ["fast"])]
    assert sent(dispatch.decide(0.0, [query(0)], too_late)) == {("0",): ("w2", "fast")}, "25 + 30 > 50"


def test_a_batch_takes_as_many_as_finish_the_most_in_time():
    queue = [query(0, slo=40.0), *(query(k, slo=35.0) for k in range(1, 9))]
    # on `slow`: 1 row 30 ms, 2-4 rows 60 ms, 5-8 rows 100 ms; all but the head have 35 ms
    assert sent(policy().decide(0.0, queue, [worker("w1", ["slow"])])) == {("0",): ("w1", "slow")}
    # on `fast` (8 rows take 9 ms, its max batch) a head with 3 ms left is made late to serve seven others in time
    queue = [query(0, slo=3.0, candidates=("fast",)), *(query(k, candidates=("fast",)) for k in range(1, 9))]
    decision = policy().decide(0.0, queue, [worker("w1", ["fast"])])
    assert sent(decision) == {("0", "1", "2", "3", "4", "5", "6", "7"): ("w1", "fast")}


def test_a_batch_runs_the_active_variant_that_finishes_the_most_in_time():
    both = [worker("w1", ["slow", "fast"])]
    assert sent(policy().decide(0.0, [query(0)], both)) == {("0",): ("w1", "slow")}, "one query: getVariant's choice"
    # eight queued: `slow` finishes one of them within 50 ms, `fast` all eight (9 ms)
    decision = policy().decide(0.0, [query(k) for k in range(8)], both)
    assert sent(decision) == {tuple(str(k) for k in range(8)): ("w1", "fast")}
    interfered = policy(states=[("fast", "w1", InstanceState.INTERFERED)])
    assert sent(interfered.decide(0.0, [query(k) for k in range(8)], both)) == {("0",): ("w1", "slow")}, \
        "never an instance the monitor flags"


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
    assert sent(dispatch.decide(1.5, [query(0, at=1.5)], workers)) == {("0",): ("w1", "slow")}, \
        "its window has not ended"
    dispatch.on_worker_event(beat("w1", "slow", 0.9, 2.0), 2.0)
    assert sent(dispatch.decide(2.5, [query(1, at=2.5)], workers)) == {("1",): ("w2", "fast")}
    dispatch.update_from_metadata(MetadataSnapshot())  # an empty store does not undo what the monitor saw
    assert sent(dispatch.decide(2.6, [query(2, at=2.6)], workers)) == {("2",): ("w2", "fast")}
