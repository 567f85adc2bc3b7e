"""The digits family trains deterministically, exports runnable ONNX, and profiles into the one format."""

import itertools
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shared.modelzoo import build, digits
from shared.modelzoo.profiler import (
    BATCH_SIZES,
    device_for_provider,
    load_validation,
    measure_accuracy,
    profile_model,
)
from shared.onnx_runtime import CPU_PROVIDER, make_session, run_batch
from shared.profiles.format import ProfileSet

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES = REPO_ROOT / "profiles" / "digits.json"


def _quick(name: str, epochs: int) -> digits.DigitsVariant:
    """A variant of the family with a shortened recipe (same code path, a fraction of the time)."""
    variant = digits.get_variant(name)
    return replace(variant, recipe=replace(variant.recipe, epochs=epochs))


@pytest.fixture(scope="module")
def split() -> digits.DigitsSplit:
    return digits.load_split()


@pytest.fixture(scope="module")
def tiny_cnn(split):
    """digits-cnn-xs trained for 3 epochs: (trained variant, exported ONNX bytes)."""
    trained = digits.train_variant(_quick("digits-cnn-xs", 3), split)
    return trained, digits.export_onnx(trained.module, metadata={"k": "v"})


def test_variants_are_named_and_ordered_by_compute():
    names = [v.name for v in digits.VARIANTS]
    assert len(set(names)) == len(names) >= 4
    assert all(re.fullmatch(r"digits-(mlp|cnn)-(xs|s|m|l|xl)", n) for n in names)
    macs = [v.macs for v in digits.VARIANTS]
    assert macs == sorted(macs) and len(set(macs)) == len(macs)
    assert macs[-1] >= 20 * macs[0]
    assert digits.get_variant("digits-cnn-s").arch.kind == "cnn"
    with pytest.raises(ValueError, match="valid names"):
        digits.get_variant("digits-resnet-xxl")


def test_split_is_fixed_stratified_and_preprocessed(split):
    assert (len(split.x_train), len(split.x_val), len(split.x_test)) == (1077, 270, 450)
    assert split.x_test.dtype == np.float32 and split.x_test.shape[1:] == digits.INPUT_SHAPE
    assert split.y_test.dtype == np.int64 and set(split.y_test) == set(range(10))
    assert 0.0 <= split.x_train.min() and split.x_train.max() <= 1.0
    assert digits.load_split().sha256() == split.sha256()


def test_training_twice_gives_identical_onnx_bytes(split):
    variant = _quick(digits.VARIANTS[0].name, 5)
    first = digits.export_onnx(digits.train_variant(variant, split).module)
    second = digits.export_onnx(digits.train_variant(variant, split).module)
    assert first == second


def test_augmented_cnn_training_is_deterministic_too(split, tiny_cnn):
    trained, _ = tiny_cnn
    again = digits.train_variant(trained.variant, split)
    for key, value in trained.module.state_dict().items():
        assert np.array_equal(value.numpy(), again.module.state_dict()[key].numpy()), key


def test_recipe_hash_tracks_the_recipe(split):
    variant = digits.VARIANTS[0]
    assert digits.recipe_sha256(variant, split) == digits.recipe_sha256(variant, split)
    assert digits.recipe_sha256(variant, split) != digits.recipe_sha256(_quick(variant.name, 1), split)


def test_exported_onnx_matches_torch_with_dynamic_batch(split, tiny_cnn):
    import torch

    trained, model_bytes = tiny_cnn
    assert digits.onnx_metadata(model_bytes) == {"k": "v"}
    session = make_session(model_bytes)
    assert [(i.name, i.shape[1:]) for i in session.get_inputs()] == [("input", [1, 8, 8])]
    assert [(o.name, o.shape[1:]) for o in session.get_outputs()] == [("logits", [10])]
    for batch in (1, 7, 64):
        x = split.x_test[:batch]
        with torch.no_grad():
            expected = trained.module(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(run_batch(session, x), expected, rtol=1e-4, atol=1e-4)


def test_profiler_measures_latency_accuracy_load_and_memory(tmp_path, split, tiny_cnn):
    trained, model_bytes = tiny_cnn
    path = tmp_path / "tiny.onnx"
    path.write_bytes(model_bytes)
    npz = tmp_path / "val.npz"
    digits.save_split_npz(npz, split.x_test, split.y_test)

    (profile,) = profile_model(
        path,
        variant="tiny",
        family="digits",
        validation=npz,
        providers=[CPU_PROVIDER],
        num_repeats=20,
        num_rounds=2,
        max_seconds=0.5,
        num_loads=1,
    )
    assert profile.device == "cpu-1t" and profile.variant == "tiny" and profile.measured
    assert list(profile.batch_latency_ms) == list(BATCH_SIZES) and profile.max_batch == 64
    assert all(len(s) == 20 for s in profile.latency_samples_ms.values())
    latency = profile.batch_latency_ms
    assert latency[64] > latency[1]
    assert all(latency[b] >= 0.5 * latency[a] for a, b in itertools.pairwise(BATCH_SIZES))  # monotone-ish
    assert profile.load_latency_ms > 0 and profile.peak_memory_mb is not None and profile.peak_memory_mb >= 0

    x, y = load_validation(npz)
    direct = float((run_batch(make_session(path), x).argmax(axis=1) == y).mean())
    assert 0.0 <= profile.accuracy <= 1.0
    assert (
        profile.accuracy == pytest.approx(direct) == pytest.approx(measure_accuracy(make_session(path), x, y))
    )
    assert profile.accuracy == pytest.approx(trained.test_accuracy, abs=1 / len(y))


def test_validation_file_needs_x_and_y(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"lacks key\(s\) \['y'\]"):
        load_validation(tmp_path / "bad.npz")


def test_device_names_and_assumed_prices():
    assert device_for_provider(CPU_PROVIDER).model_dump() == {
        "name": "cpu-1t",
        "kind": "cpu",
        "price_per_hour": 0.0425,
        "startup_s": None,
    }
    assert device_for_provider(CPU_PROVIDER, intra_op_threads=2).name == "cpu-2t"
    assert device_for_provider("CUDAExecutionProvider").kind == "gpu"
    with pytest.raises(ValueError, match="`provider`"):
        device_for_provider("TensorrtExecutionProvider")


def test_build_skips_training_when_the_recipe_is_unchanged(tmp_path, monkeypatch):
    variants = [_quick(digits.VARIANTS[0].name, 2)]
    paths = build.build_models(tmp_path, variants=variants)
    onnx_path = paths[variants[0].name]
    assert onnx_path == tmp_path / "digits-mlp-s.onnx" and paths["digits-test"].exists()
    recipe = digits.onnx_metadata(onnx_path.read_bytes())[digits.RECIPE_METADATA_KEY]
    assert recipe == digits.recipe_sha256(variants[0], digits.load_split())

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the recipe is unchanged")

    monkeypatch.setattr(digits, "train_variant", no_training)
    assert build.build_models(tmp_path, variants=variants) == paths
    with pytest.raises(AssertionError, match="retrained"):
        build.build_models(tmp_path, variants=[_quick(digits.VARIANTS[0].name, 3)])


def _weights(model_bytes: bytes) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in onnx.load_from_string(model_bytes).graph.initializer}


def test_the_shipped_family_is_what_its_recipe_builds(tmp_path, split):
    """profiles/digits/ is served without torch, so it must stay what `make models` would build now: each
    file names the recipe it was built from, and retraining gives a model that answers as it does.

    Retraining gives the same weights bit for bit on the same kind of CPU only: oneDNN's convolutions
    round differently with AVX-512 and AVX2, and training amplifies it (on an AMD EPYC the shipped CNNs'
    weights came back up to 0.52 apart, with 99.8% of test predictions the same and accuracy within
    0.2 points). So the weights are compared through what they answer."""
    rebuilt = build.build_models(tmp_path, force=True)
    shipped = build.SHIPPED_DIR
    with np.load(shipped / build.TEST_SPLIT_FILE) as test_split:
        assert np.array_equal(test_split["x"], split.x_test) and np.array_equal(test_split["y"], split.y_test)
    assert sorted(p.name for p in shipped.glob("*.onnx")) == sorted(f"{v.name}.onnx" for v in digits.VARIANTS)
    for variant in digits.VARIANTS:
        ours, theirs = (shipped / f"{variant.name}.onnx").read_bytes(), rebuilt[variant.name].read_bytes()
        assert (digits.onnx_metadata(ours).get(digits.RECIPE_METADATA_KEY)
                == digits.recipe_sha256(variant, split)), f"{variant.name}: its recipe changed: run `make models`"
        expected, got = _weights(theirs), _weights(ours)
        assert {k: w.shape for k, w in expected.items()} == {k: w.shape for k, w in got.items()}, variant.name
        predictions = [run_batch(make_session(m, provider=CPU_PROVIDER), split.x_test).argmax(axis=1)
                       for m in (ours, theirs)]
        assert np.mean(predictions[0] == predictions[1]) >= 0.99, variant.name
        accuracy = [np.mean(p == split.y_test) for p in predictions]
        assert abs(accuracy[0] - accuracy[1]) <= 0.01, (variant.name, accuracy)


def test_committed_profiles_show_the_trade_off():
    profiles = ProfileSet.load(PROFILES)
    assert profiles.slo_ms["digits"] > 0
    assert profiles.device_by_name["cpu-1t"].price_per_hour == pytest.approx(0.0425)
    assert "assumption" in profiles.source and "c5.large" in profiles.source
    family = [profiles.get(v.name, "cpu-1t") for v in digits.VARIANTS]  # smallest compute first
    assert {p.family for p in profiles.variants} == {"digits"}
    assert all(list(p.batch_latency_ms) == list(BATCH_SIZES) and p.max_batch == 64 for p in family)
    accuracy = [p.accuracy for p in family]
    assert accuracy == sorted(accuracy) and len(set(accuracy)) == len(accuracy)  # larger: more accurate
    assert accuracy[-1] - accuracy[0] >= 0.02
    for batch in (16, 32, 64):  # larger: slower
        latency = [p.batch_latency_ms[batch] for p in family]
        assert latency == sorted(latency), batch
    assert family[-1].latency_ms(1) > 10 * family[0].latency_ms(1)
    assert all(p.load_latency_ms > 0 and p.peak_memory_mb > 0 for p in family)
