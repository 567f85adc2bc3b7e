"""The Kairos data loader reads the authors' files into the one profile format."""
import numpy as np
import pytest

from shared.profiles.kairos import load_kairos_pool, load_kairos_profiles
from shared.settings import Settings

MODELS = {"ncf", "rm2", "wnd", "mtwnd", "dien"}
DEVICES = {"g4dn.xlarge", "c5n.2xlarge", "r5n.large", "t3.xlarge"}


def test_profiles_cover_models_devices_grid_and_paper_values():
    profiles = load_kairos_profiles(Settings().kairos_data_dir)
    assert {p.variant for p in profiles.variants} == MODELS
    assert all(p.family == p.variant for p in profiles.variants)
    assert {d.name for d in profiles.devices} == DEVICES
    kinds = {d.name: d.kind for d in profiles.devices}
    assert kinds["g4dn.xlarge"] == "gpu" and {kinds[d] for d in DEVICES - {"g4dn.xlarge"}} == {"cpu"}
    assert profiles.device_by_name["g4dn.xlarge"].price_per_hour == pytest.approx(0.526)
    assert profiles.slo_ms == {"ncf": 5.0, "rm2": 350.0, "wnd": 25.0, "mtwnd": 25.0, "dien": 35.0}
    rm2_gpu = profiles.get("rm2", "g4dn.xlarge")
    assert list(rm2_gpu.batch_latency_ms) == list(range(10, 1001, 10))
    assert rm2_gpu.latency_ms(1000) == pytest.approx(260.78, abs=0.05)  # spec Appendix A.1
    assert rm2_gpu.latency_ms(95) == rm2_gpu.batch_latency_ms[100]  # rounds up to the grid
    assert rm2_gpu.latency_samples_ms is None


def test_samples_are_inference_plus_load_without_the_max():
    profiles = load_kairos_profiles(Settings().kairos_data_dir, samples=True)
    p = profiles.get("dien", "t3.xlarge")
    assert len(p.latency_samples_ms[500]) == 99
    for batch in (10, 500, 1000):
        assert np.mean(p.latency_samples_ms[batch]) == pytest.approx(p.batch_latency_ms[batch], rel=2e-3)


def test_pool_and_data_dir_override(monkeypatch, tmp_path):
    pool = load_kairos_pool(Settings().kairos_data_dir)
    assert pool.base == "g4dn.xlarge" and pool.budget_per_hour == 2.5
    assert pool.max_counts == (5, 6, 17, 15)
    monkeypatch.setenv("MERIDIAN_MATERIALS_DIR", str(tmp_path))
    assert Settings().kairos_data_dir == tmp_path / "data" / "kairos"
    with pytest.raises(FileNotFoundError):
        load_kairos_pool(Settings().kairos_data_dir)


def test_a_copied_profile_set_does_not_reuse_the_originals_lookups() -> None:
    from shared.profiles import DeviceType, ProfileSet, VariantProfile

    def variant(name: str) -> VariantProfile:
        return VariantProfile(variant=name, family="f", device="d", batch_latency_ms={1: 1.0}, max_batch=1)

    original = ProfileSet(source="s", devices=[DeviceType(name="d", kind="cpu", price_per_hour=0.0)],
                          variants=[variant("a")])
    original.get("a", "d")  # fills the cached index
    copy = original.model_copy(update={"variants": [variant("b")]})
    assert copy.get("b", "d").variant == "b"
