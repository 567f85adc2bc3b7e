"""On a GPU, for real: CUDA computes what the CPU does through I/O binding, a GPU worker describes its GPU,
measures the memory each variant holds and refuses a load past its share, and an fp16 variant answers as
its fp32 model does. Where no CUDA GPU runs onnxruntime, every test here is skipped with that reason (shown
in pytest's summary): none of them has run on this project's 2-core, GPU-less machine."""
from __future__ import annotations

import numpy as np
import pytest

from services.worker.executors import ExecutionError, OnnxExecutor
from services.worker.self_measure import MeasurementCache
from shared.onnx_runtime import CPU_PROVIDER, CUDA_PROVIDER, make_session, run_batch, usable_providers
from shared.settings import REPO_ROOT, Settings

DIGITS = REPO_ROOT / "profiles" / "digits"

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    CUDA_PROVIDER not in usable_providers(),
    reason=f"no GPU that onnxruntime's CUDA provider runs on here (usable: {', '.join(usable_providers())})")]


def _lite0_and_photographs() -> tuple[str, np.ndarray]:
    from shared import imaging
    from shared.modelzoo import efficientnet, photos

    path = Settings().models_dir / "efficientnet-lite0.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is not built (make var/models/.built)")
    spec = efficientnet.preprocessing(efficientnet.get_variant("efficientnet-lite0").image_size)
    return str(path), np.stack([imaging.prepare(p.jpeg, spec) for p in photos.augmented(32, seed=3)])


def test_cuda_through_io_binding_computes_what_the_cpu_does() -> None:
    x = np.random.default_rng(0).standard_normal((64, 1, 8, 8)).astype(np.float32)
    for model in ("digits-cnn-s", "digits-cnn-l"):
        on_gpu = make_session(DIGITS / f"{model}.onnx", provider=CUDA_PROVIDER)
        assert on_gpu.get_providers()[0] == CUDA_PROVIDER
        np.testing.assert_allclose(run_batch(on_gpu, x),
                                   run_batch(make_session(DIGITS / f"{model}.onnx", provider=CPU_PROVIDER), x),
                                   rtol=1e-3, atol=1e-3)
    lite0, images = _lite0_and_photographs()
    assert (run_batch(make_session(lite0, provider=CUDA_PROVIDER), images).argmax(-1).tolist()
            == run_batch(make_session(lite0, provider=CPU_PROVIDER), images).argmax(-1).tolist())


def test_a_gpu_worker_names_its_gpu_measures_each_variants_memory_and_refuses_a_load_past_its_share(tmp_path) -> None:
    lite0, _ = _lite0_and_photographs()
    models = tmp_path / "models"
    models.mkdir()
    (models / "efficientnet-lite0.onnx").symlink_to(lite0)
    cache = MeasurementCache(tmp_path / "measured")
    worker = OnnxExecutor(models, cache=cache, max_batch=64)
    assert worker.machine.provider == CUDA_PROVIDER and worker.device.startswith("gpu-")
    assert worker.machine.memory_mb, "nvidia-smi gave the GPU's memory"
    worker.load("efficientnet-lite0", measure=True)
    footprint = worker.measured()["efficientnet-lite0"].device_memory_mb
    assert footprint is not None and footprint > 0
    share = 0.5 * footprint / worker.machine.memory_mb
    with pytest.raises(ExecutionError, match=r"efficientnet-lite0 needs ~\d+ MiB of GPU memory"):
        OnnxExecutor(models, cache=cache, gpu_memory_share=share).load("efficientnet-lite0")


def test_an_fp16_variant_on_cuda_answers_as_its_fp32_model(tmp_path) -> None:
    from shared.modelzoo.variants import generate_variants

    lite0, images = _lite0_and_photographs()
    generation = generate_variants(lite0, tmp_path, model_name="lite0", input_shape=images.shape[1:],
                                   precisions=("fp16",), optimization_levels=("all",), max_batches=(64,),
                                   providers=[CUDA_PROVIDER])
    (fp16,) = generation.variants
    half = run_batch(make_session(fp16.path, provider=CUDA_PROVIDER), images).argmax(-1)
    full = run_batch(make_session(lite0, provider=CUDA_PROVIDER), images).argmax(-1)
    assert (half == full).mean() >= 0.9
