"""shared.onnx_runtime: real providers only, Meridian's session settings, run_batch checks its input."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from shared.onnx_runtime import (
    CPU_PROVIDER,
    make_session,
    run_batch,
    session_io_names,
    usable_providers,
)

RNG = np.random.default_rng(0)
WEIGHT = RNG.normal(size=(4, 3)).astype(np.float32)
BIAS = RNG.normal(size=3).astype(np.float32)


def _affine_model_bytes() -> bytes:
    """``logits = input @ WEIGHT + BIAS`` with a dynamic batch axis (IR 8: onnxruntime 1.31 reads <= 13)."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["logits"]),
        ],
        "affine",
        [x],
        [y],
        initializer=[numpy_helper.from_array(WEIGHT, "w"), numpy_helper.from_array(BIAS, "b")],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()


def test_usable_providers_end_with_cpu_and_are_cached_copies():
    providers = usable_providers()
    assert providers[-1] == CPU_PROVIDER
    assert set(providers) <= {"CUDAExecutionProvider", CPU_PROVIDER}
    providers.append("junk")
    assert usable_providers()[-1] == CPU_PROVIDER


def test_no_cuda_provider_without_a_gpu_device():
    import glob

    if not glob.glob("/dev/nvidia[0-9]*"):
        assert usable_providers() == [CPU_PROVIDER]


@pytest.mark.parametrize("level", ["all", "basic", "extended", "disabled"])
def test_session_from_bytes_matches_numpy(level):
    session = make_session(_affine_model_bytes(), optimization_level=level)
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(run_batch(session, x), x @ WEIGHT + BIAS, rtol=1e-5, atol=1e-5)
    assert session_io_names(session) == ("input", "logits")


def test_session_from_path_uses_one_thread_without_spinning(tmp_path):
    path = tmp_path / "affine.onnx"
    path.write_bytes(_affine_model_bytes())
    session = make_session(path, provider=CPU_PROVIDER)
    assert session.get_providers() == [CPU_PROVIDER]
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert run_batch(session, np.zeros((1, 4), np.float32)).shape == (1, 3)
    assert make_session(str(path), intra_op_threads=2).get_session_options().intra_op_num_threads == 2


def test_run_batch_converts_dtype_and_checks_rank():
    session = make_session(_affine_model_bytes())
    x = RNG.normal(size=(2, 4))  # float64, converted
    np.testing.assert_allclose(
        run_batch(session, x), x.astype(np.float32) @ WEIGHT + BIAS, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="`inputs` must have rank 2"):
        run_batch(session, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="empty batch"):
        run_batch(session, np.zeros((0, 4), np.float32))


def test_make_session_rejects_bad_arguments(tmp_path):
    model = _affine_model_bytes()
    with pytest.raises(ValueError, match="`optimization_level`"):
        make_session(model, optimization_level="max")
    with pytest.raises(ValueError, match="`intra_op_threads`"):
        make_session(model, intra_op_threads=0)
    with pytest.raises(ValueError, match="`provider` 'TensorrtExecutionProvider' does not run here"):
        make_session(model, provider="TensorrtExecutionProvider")
    with pytest.raises(FileNotFoundError, match="`path_or_bytes`"):
        make_session(tmp_path / "missing.onnx")


def test_a_bound_run_computes_what_a_plain_run_does() -> None:
    """`run_bound` is the path `run_batch` takes on CUDA; on the CPU it must give the same numbers."""
    from shared.onnx_runtime import run_bound

    session = make_session(_affine_model_bytes(), provider=CPU_PROVIDER)
    x = RNG.normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_bound(session, x, "cpu"), run_batch(session, x))
