"""A GPU worker's loaded variants are bounded by its GPU's memory (`shared.device_memory`), and a worker can
be told which provider computes."""
from __future__ import annotations

import pytest

from schemas import MeasuredLatency
from services.worker.executors import ExecutionError, OnnxExecutor
from shared.device_memory import FILE_FACTOR, WORKSPACE_MB, DeviceMemory, DeviceMemoryFull, footprint_mb
from shared.onnx_runtime import CPU_PROVIDER, CUDA_PROVIDER, provider_named, usable_providers
from shared.settings import REPO_ROOT

DIGITS = REPO_ROOT / "profiles" / "digits"


def test_a_variant_measured_here_counts_at_its_measured_footprint_else_at_a_guess_from_its_file() -> None:
    measured = MeasuredLatency(batch_latency_ms={1: 1.0}, device_memory_mb=300.0)
    assert footprint_mb(measured, 10 * 2**20) == 300.0
    unmeasured = MeasuredLatency(batch_latency_ms={1: 1.0})
    assert footprint_mb(unmeasured, 10 * 2**20) == footprint_mb(None, 10 * 2**20) == FILE_FACTOR * 10 + WORKSPACE_MB


def test_a_load_past_the_budget_is_refused_and_names_what_holds_the_memory() -> None:
    memory = DeviceMemory(1000.0)
    memory.reserve("lite0", 400.0)
    memory.reserve("lite1", 500.0)
    with pytest.raises(DeviceMemoryFull, match=r"lite2 needs ~200 MiB .* 900 of the 1000 MiB .* \(lite0 400, lite1 500\)"):
        memory.reserve("lite2", 200.0)
    assert memory.held_mb == 900.0
    memory.reserve("lite1", 550.0)  # counted again at a new figure, not twice
    assert memory.held_mb == 950.0
    memory.release("lite1")
    memory.reserve("lite2", 200.0)
    memory.update("lite2", 700.0)  # measured once loaded: the truth is kept even past the budget ...
    assert memory.held_mb == 1100.0
    with pytest.raises(DeviceMemoryFull):  # ... and the next load sees it
        memory.reserve("lite3", 1.0)
    with pytest.raises(ValueError, match="budget_mb"):
        DeviceMemory(0.0)


def test_a_provider_is_named_cpu_or_cuda() -> None:
    assert provider_named("cpu") == CPU_PROVIDER and provider_named("cuda") == CUDA_PROVIDER
    with pytest.raises(ValueError, match=r"one of \['cpu', 'cuda'\], got 'tpu'"):
        provider_named("tpu")


def test_a_worker_told_to_compute_on_the_cpu_does_and_is_not_memory_bounded() -> None:
    executor = OnnxExecutor(DIGITS, provider=CPU_PROVIDER, gpu_memory_share=1e-9)  # a GPU's budget would refuse
    assert executor.machine.provider == CPU_PROVIDER and executor.device == "cpu-1t"
    executor.load("digits-mlp-s")
    assert executor.loaded() == ["digits-mlp-s"]


@pytest.mark.skipif(CUDA_PROVIDER in usable_providers(), reason="CUDA runs here")
def test_a_worker_told_to_compute_on_cuda_where_none_runs_says_so() -> None:
    with pytest.raises(ExecutionError, match="CUDAExecutionProvider does not run here; usable: CPUExecutionProvider"):
        OnnxExecutor(DIGITS, provider=CUDA_PROVIDER)


def test_a_model_onnxruntime_cannot_load_is_an_execution_error(tmp_path) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(ExecutionError, match="cannot load broken.onnx"):
        OnnxExecutor(tmp_path, provider=CPU_PROVIDER).load("broken")
