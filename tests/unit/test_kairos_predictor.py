"""Online latency prediction: linear fit first, lookup table once warm (spec §7 items 10, 22)."""
import numpy as np
import pytest

from shared.kairos import LatencyPredictor
from shared.profiles.kairos import load_kairos_profiles
from shared.settings import Settings


def test_linear_fit_before_warm_up_then_bucket_means():
    p = LatencyPredictor(min_samples=3)
    p.observe("cpu", "m", 10, 12.0)
    p.observe("cpu", "m", 100, 102.0)  # line: 2 + 1 * bucket
    assert p.predict("cpu", "m", np.array([50, 95, 1000])) == pytest.approx([52.0, 102.0, 1002.0])
    p.observe("cpu", "m", 47, 60.0)  # buckets 50: one sample, still on the (refitted) line
    p.observe("cpu", "m", 50, 61.0)
    line = p.predict("cpu", "m", np.array([50]))[0]
    assert line != pytest.approx(61.0)
    p.observe("cpu", "m", 41, 62.0)  # third sample in bucket 50 -> its mean
    assert p.predict("cpu", "m", np.array([50]))[0] == pytest.approx(61.0)
    assert p.predict("cpu", "m", np.array([60]))[0] != pytest.approx(61.0)  # other buckets: the line


def test_unknown_device_predicts_zero_and_single_point_is_flat():
    p = LatencyPredictor()
    assert p.predict("gpu", "m", np.array([10, 500])).tolist() == [0.0, 0.0]
    p.observe("gpu", "m", 500, 30.0)
    assert p.predict("gpu", "m", np.array([10, 990])).tolist() == [30.0, 30.0]


def test_seeded_from_profiles_equals_the_profiled_means():
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    p = LatencyPredictor.from_profiles(profiles, variants=["wnd"])
    table = profiles.get("wnd", "t3.xlarge").batch_latency_ms
    sizes = np.array([1, 10, 11, 555, 1000])
    expected = [table[10], table[10], table[20], table[560], table[1000]]
    assert p.predict("t3.xlarge", "wnd", sizes) == pytest.approx(expected)
    # a new observation moves that bucket's running mean only
    p.observe("t3.xlarge", "wnd", 555, table[560] + 4.0)
    assert p.predict("t3.xlarge", "wnd", np.array([560]))[0] == pytest.approx(table[560] + 1.0)
    assert p.predict("t3.xlarge", "wnd", np.array([550]))[0] == pytest.approx(table[550])
    assert p.table("wnd", ["t3.xlarge"]).latency_ms[0, 0] == pytest.approx(table[10])


def test_noise_knob_is_five_percent_and_seeded():
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    clean = LatencyPredictor.from_profiles(profiles, variants=["rm2"])
    noisy = [LatencyPredictor.from_profiles(profiles, variants=["rm2"], noise_frac=0.05, seed=11) for _ in range(2)]
    sizes = np.full(20_000, 500)
    truth = clean.predict("g4dn.xlarge", "rm2", sizes)
    draws = noisy[0].predict("g4dn.xlarge", "rm2", sizes)
    assert np.std(draws / truth - 1) == pytest.approx(0.05, rel=0.05)
    assert np.array_equal(draws, noisy[1].predict("g4dn.xlarge", "rm2", sizes))
    assert noisy[0].predict("g4dn.xlarge", "rm2", sizes[:3], noisy=False) == pytest.approx(truth[:3])


def test_out_of_range_sizes_raise():
    p = LatencyPredictor()
    with pytest.raises(ValueError, match="batch sizes"):
        p.predict("cpu", "m", np.array([1001]))
    with pytest.raises(ValueError, match="grid"):
        LatencyPredictor([10, 5])
