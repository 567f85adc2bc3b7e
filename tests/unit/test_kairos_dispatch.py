"""KairosDispatch as a policy (spec §7 items 2-8) and on the simulator."""
import numpy as np
import pytest

from shared.kairos import KairosDispatch, LatencyPredictor
from shared.kairos.baselines import RibbonDispatch
from shared.policy.base import PendingQuery, WorkerView
from shared.policy.registry import make_dispatch
from shared.sim import Workload, make_fleet, simulate
from tests.unit.kairos_helpers import QOS, dispatched, query, two_type_profiles, worker

PROFILES = two_type_profiles({10: 10.0, 100: 40.0}, {10: 20.0, 100: 80.0})





def test_large_query_avoids_the_instance_that_would_violate_qos():
    profiles = two_type_profiles({100: 60.0}, {100: 99.0})  # CPU predicted at 0.99 T_qos
    decision = KairosDispatch(profiles).decide(0.0, [query(0, 100)], [worker("c", "cpu"), worker("g", "gpu")])
    assert dispatched(decision) == {"0": "g"}


def test_large_to_gpu_small_to_cpu():
    # C_cpu = 40/95: large on GPU + small on CPU costs 40 + 8.4, the swap 10 + 40
    profiles = two_type_profiles({10: 10.0, 100: 40.0}, {10: 20.0, 100: 95.0})
    decision = KairosDispatch(profiles).decide(
        0.0, [query(0, 10), query(1, 100)], [worker("g", "gpu"), worker("c", "cpu")]
    )
    assert dispatched(decision) == {"1": "g", "0": "c"}


# a mid-size query gains more from the GPU than the coefficient credits the CPU for
MID = two_type_profiles({10: 10.0, 50: 20.0, 100: 40.0}, {10: 20.0, 50: 70.0, 100: 95.0})


def test_query_matched_to_a_busy_worker_stays_queued():
    # GPU busy 5 ms: 5 + 20 = 25 < (40/95) * 70 = 29.5 on the idle CPU, so the query waits for the GPU
    fleet = [worker("g", "gpu", busy_ms=5.0), worker("c", "cpu")]
    assert KairosDispatch(MID).decide(0.0, [query(0, 50)], fleet).assignments == ()
    # with a small query too, it takes the idle CPU and the mid-size one keeps waiting for the GPU
    decision = KairosDispatch(MID).decide(0.0, [query(0, 50), query(1, 10)], fleet)
    assert dispatched(decision) == {"1": "c"}


def test_rows_are_the_first_2n_queries_in_fifo_order():
    profiles = two_type_profiles({10: 10.0, 100: 40.0}, {10: 20.0, 100: 95.0})
    queue = [query(i, 100, arrival=0.0) for i in range(4)] + [query(4, 10)]
    decision = KairosDispatch(profiles).decide(0.0, queue, [worker("c", "cpu")])
    assert "4" not in dispatched(decision)  # the cheap small query is beyond the first 2n = 2 rows
    decision = KairosDispatch(profiles, rows_per_worker=5).decide(0.0, queue, [worker("c", "cpu")])
    assert dispatched(decision) == {"4": "c"}


def test_hold_infeasible_keeps_a_query_for_a_busy_worker_that_can_still_make_it():
    profiles = two_type_profiles({100: 40.0}, {100: 99.0})  # the CPU always misses the 0.98 T_qos cut
    queue, fleet = [query(0, 100), query(1, 100)], [worker("g", "gpu", busy_ms=50.0), worker("c", "cpu")]
    # default (paper): Eq. 7 forces min(m, n) matches and the penalised pair on the idle CPU is dispatched
    assert dispatched(KairosDispatch(profiles).decide(0.0, queue, fleet)) == {"1": "c"}
    assert KairosDispatch(profiles, hold_infeasible=True).decide(0.0, queue, fleet).assignments == ()


def test_queries_only_go_to_workers_hosting_their_variant():
    profiles = two_type_profiles({10: 10.0}, {10: 1.0})
    fleet = [WorkerView("c", "cpu", ("other",), 0, 0.0, 0.0, 10), worker("g", "gpu")]
    assert dispatched(KairosDispatch(profiles).decide(0.0, [query(0, 10)], fleet)) == {"0": "g"}


def test_registry_builds_kairos_by_name():
    policy = make_dispatch("kairos", PROFILES)
    assert isinstance(policy, KairosDispatch) and policy.name == "kairos"


def test_noisy_predictions_are_seeded():
    a, b = (KairosDispatch(LatencyPredictor.from_profiles(PROFILES, noise_frac=0.05, seed=3)) for _ in range(2))
    queue = [query(i, 10 if i % 2 else 100) for i in range(6)]
    fleet = [worker("g", "gpu"), worker("c", "cpu"), worker("c2", "cpu")]
    assert a.decide(0.0, queue, fleet) == b.decide(0.0, queue, fleet)


def test_fig5_matching_serves_more_within_qos_than_fcfs():
    """Fig. 5: two instances, four queries in order; FCFS sends the large query to the slow CPU."""
    profiles = two_type_profiles({10: 10.0, 100: 40.0}, {10: 20.0, 100: 200.0})
    fleet = make_fleet({"gpu": 1, "cpu": 1}, ["m"], max_batch=100)
    load = Workload(
        arrival_s=np.array([0.0, 0.001, 0.025, 0.030]),
        batch_size=np.array([10, 100, 10, 100]),
        application="m",
        slo_ms=QOS,
        candidate_variants=("m",),
    )
    fcfs = simulate(load, fleet, RibbonDispatch(preferred_devices=["gpu", "cpu"]), profiles)
    kairos = simulate(load, fleet, KairosDispatch(profiles), profiles)
    assert (fcfs.num_within_slo, kairos.num_within_slo) == (3, 4)  # "33% higher throughput"
    assert kairos.worker.tolist() == [1, 0, 1, 0]  # small -> CPU, large -> GPU


def test_learns_online_from_completions():
    predictor = LatencyPredictor()
    policy = KairosDispatch(predictor)
    for _ in range(3):
        policy.on_batch_finished("gpu", "m", 100, 42.0)
    assert predictor.predict("gpu", "m", np.array([100]))[0] == pytest.approx(42.0)
    frozen = LatencyPredictor()
    KairosDispatch(frozen, learn=False).on_batch_finished("gpu", "m", 100, 42.0)
    assert frozen.predict("gpu", "m", np.array([100]))[0] == 0.0


def test_with_five_percent_prediction_noise_kairos_still_beats_homogeneous():
    """Spec §7 item 22 on RM2, at a rate no budget-scaled homogeneous fleet can carry."""
    from shared.kairos.baselines import homogeneous_fleet
    from shared.profiles.kairos import load_kairos_profiles
    from shared.settings import Settings
    from shared.sim import deeprecsys_sizes, poisson_arrivals

    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    hom = homogeneous_fleet(0.526, 2.5)  # 4 g4dn, credited x1.19 for the unspent budget
    rate = 80.0  # homogeneous bound: 4 x Q_b (~15 qps) x 1.19 ~ 71.5 qps
    rng = np.random.default_rng(0)
    sizes = deeprecsys_sizes(3000, rng)
    arrivals = poisson_arrivals(rate, 3000, rng)
    noisy = KairosDispatch(LatencyPredictor.from_profiles(profiles, variants=["rm2"], noise_frac=0.05, seed=1))
    hetero = simulate(Workload(arrivals, sizes, "rm2", 350.0, ("rm2",)),
                      make_fleet({"g4dn.xlarge": 1, "r5n.large": 13}, ["rm2"], max_batch=1000), noisy, profiles)
    # the homogeneous fleet gets the same queries at rate / scale: passing there would mean >= rate scaled
    homo = simulate(Workload(arrivals * hom.scale, sizes, "rm2", 350.0, ("rm2",)),
                    make_fleet({"g4dn.xlarge": hom.count}, ["rm2"], max_batch=1000), KairosDispatch(profiles), profiles)
    assert hetero.fraction_within_slo() >= 0.99
    assert homo.fraction_within_slo() < 0.99


def test_a_burst_of_one_application_does_not_starve_another_on_its_own_worker():
    """Ten queries of `a` (GPU only) fill the matching window of 2n = 4 rows; `b`'s query, which only the
    idle CPU serves, joins the matching all the same: each application's head is in it."""
    from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

    profiles = ProfileSet(source="test", devices=[DeviceType(name="gpu", kind="gpu", price_per_hour=1.0),
                                                   DeviceType(name="cpu", kind="cpu", price_per_hour=0.2)],
                          variants=[VariantProfile(variant="m", family="m", device="gpu",
                                                   batch_latency_ms={10: 10.0, 100: 40.0}, max_batch=100),
                                    VariantProfile(variant="n", family="n", device="cpu",
                                                   batch_latency_ms={10: 5.0, 100: 20.0}, max_batch=100)])
    policy = KairosDispatch(profiles)
    queue = [query(i, 10) for i in range(10)] + [PendingQuery("b0", "b", 10, 0.0, QOS, ("n",))]
    for q in queue:
        policy.on_query_added(q)
    workers = [WorkerView("g", "gpu", ("m",), 1, 5.0, 0.0, 100), WorkerView("c", "cpu", ("n",), 0, 0.0, 0.0, 100)]
    assert dispatched(policy.decide(0.0, queue, workers)) == {"b0": "c"}
    assert dispatched(KairosDispatch(profiles).decide(0.0, queue, workers)) == {}  # told of no query: the prefix


@pytest.mark.parametrize("batch_queries, expected", [(False, ("0",)), (True, ("0", "1", "2", "3", "4"))])
def test_batch_queries_batches_the_queued_queries_that_finish_within_their_qos(batch_queries, expected):
    policy = KairosDispatch(PROFILES, batch_queries=batch_queries)
    queue = [query(i, 10) for i in range(5)]
    for q in queue:
        policy.on_query_added(q)
    decision = policy.decide(0.0, queue, [worker("g", "gpu")])
    assert [a.query_ids for a in decision.assignments] == [expected]


def test_batch_queries_leaves_a_query_it_would_finish_late_queued():
    policy = KairosDispatch(PROFILES, batch_queries=True)
    queue = [query(0, 10, arrival=-0.095)] + [query(i, 10) for i in range(1, 5)]  # "0" has 3 ms of its QoS left
    for q in queue:
        policy.on_query_added(q)
    decision = policy.decide(0.0, queue, [worker("g", "gpu")])
    assert [a.query_ids for a in decision.assignments] == [("1", "2", "3", "4")]
