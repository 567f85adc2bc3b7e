"""The QoS safeguard widened by the observed prediction error (`QosMargin`, spec §7 item 22)."""
import numpy as np
import pytest

from shared.kairos import KairosDispatch, LatencyPredictor, QosMargin
from shared.kairos.matching import XI
from tests.unit.kairos_helpers import dispatched, query, two_type_profiles, worker


def test_exact_predictions_keep_the_papers_xi():
    margin = QosMargin(XI)
    assert margin.xi == XI and margin.relative_error == 0.0
    for latency in (5.0, 50.0, 500.0):
        margin.observe(latency, latency)
    assert margin.xi == XI


def test_rms_relative_error_sets_the_p99_margin():
    margin = QosMargin(XI, quantile=0.99)
    for predicted in (105.0, 95.0, 105.0, 95.0):  # +-5% of the observed 100 ms
        margin.observe(predicted, 100.0)
    assert margin.relative_error == pytest.approx(0.05)
    assert margin.xi == pytest.approx(1.0 - 2.3263 * 0.05, abs=1e-4)  # z_0.99 = 2.3263
    assert QosMargin(XI, quantile=0.9).xi == XI


def test_margin_rejects_bad_parameters():
    with pytest.raises(ValueError):
        QosMargin(0.0)
    with pytest.raises(ValueError):
        QosMargin(XI, quantile=1.0)


def test_dispatcher_learns_the_margin_from_completions_and_stops_sending_near_misses_to_the_cpu():
    # size 50 is predicted at 0.95 T_qos on the CPU: feasible under xi = 0.98, and cheaper there
    # (C_cpu = 50/190: 25 against 30 on the GPU)
    profiles = two_type_profiles({10: 5.0, 50: 30.0, 100: 50.0}, {10: 10.0, 50: 95.0, 100: 190.0})
    fleet = [worker("g", "gpu"), worker("c", "cpu")]
    policy = KairosDispatch(profiles)
    assert dispatched(policy.decide(0.0, [query(0, 50)], fleet)) == {"0": "c"}
    policy.on_batch_finished("cpu", "m", 50, 95.0 / 1.1)  # the prediction was 10% off
    assert policy.xi == pytest.approx(1.0 - 2.3263 * 0.1, abs=1e-3)
    assert dispatched(policy.decide(0.0, [query(1, 50)], fleet)) == {"1": "g"}
    fixed = KairosDispatch(profiles, margin_quantile=None)
    fixed.decide(0.0, [query(0, 50)], fleet)
    fixed.on_batch_finished("cpu", "m", 50, 95.0 / 1.1)
    assert fixed.xi == XI
    assert dispatched(fixed.decide(0.0, [query(1, 50)], fleet)) == {"1": "c"}


def test_exact_dispatches_leave_the_margin_alone_and_unmatched_completions_are_ignored():
    profiles = two_type_profiles({10: 5.0, 100: 50.0}, {10: 10.0, 100: 95.0})
    policy = KairosDispatch(profiles)
    policy.decide(0.0, [query(0, 10)], [worker("c", "cpu")])
    policy.on_batch_finished("cpu", "m", 10, 10.0)
    policy.on_batch_finished("gpu", "m", 100, 1.0)  # never dispatched by this policy: nothing to compare
    assert policy.xi == XI


def test_noisy_predictions_widen_the_margin_to_about_the_noise():
    profiles = two_type_profiles({10: 5.0, 100: 50.0}, {10: 10.0, 100: 95.0})
    predictor = LatencyPredictor.from_profiles(profiles, noise_frac=0.05, seed=0)
    policy = KairosDispatch(predictor, learn=False)
    rng = np.random.default_rng(1)
    for i in range(400):
        size = int(rng.choice([10, 100]))
        decision = policy.decide(0.0, [query(i, size)], [worker("g", "gpu"), worker("c", "cpu")])
        device = {"g": "gpu", "c": "cpu"}[dispatched(decision)[str(i)]]
        policy.on_batch_finished(device, "m", size, profiles.get("m", device).batch_latency_ms[size])
    assert 0.84 < policy.xi < 0.9  # 1 - 2.33 x ~5%
