"""onnxruntime sessions set up the one way Meridian runs them: few threads, no spinning, real providers.

Workers, the registry and the profiler all load ONNX models through `make_session` and run them through
`run_batch`, so a latency measured by the profiler is the latency a worker sees.

Two facts about this stack shape the code (see ``shared/notes/stack.md``):

- ``onnxruntime-gpu`` lists ``CUDAExecutionProvider`` in ``get_available_providers()`` even on a machine with
  no GPU or no CUDA libraries; a session asked for it then silently falls back to the CPU.
  `usable_providers` therefore probes once whether a session really runs on CUDA.
- On small CPU shares, one intra-op thread per process with spinning off is fastest and stable; a spinning
  thread pool burns the core that another worker process needs.
- On CUDA a batch runs through I/O binding: its input is copied to the GPU once, its output is left there
  by the run and copied back once. On the CPU, ``session.run`` reads the numpy input in place and binding
  adds ~3 us a call (digits-mlp-s: 6.3 against 9.0 us, 2026-12-08), so the CPU runs unbound.
"""

from __future__ import annotations

import functools
import glob
import os
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

__all__ = [
    "CPU_PROVIDER",
    "CUDA_PROVIDER",
    "OptimizationLevel",
    "make_session",
    "provider_named",
    "run_batch",
    "run_bound",
    "session_io_names",
    "usable_providers",
]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"

OptimizationLevel = Literal["all", "basic", "extended", "disabled"]
#: the short names a person gives a provider (``--provider cuda``)
PROVIDER_NAMES = {"cpu": CPU_PROVIDER, "cuda": CUDA_PROVIDER}

_GRAPH_OPTIMIZATION = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

# onnxruntime's default logger severity (0 verbose .. 4 fatal); the library offers no getter.
_ORT_DEFAULT_LOG_SEVERITY = 2
# onnxruntime 1.31 reads ONNX IR versions up to 13; the `onnx` package writes newer ones by default.
_PROBE_IR_VERSION = 8


def _probe_model_bytes() -> bytes:
    """A one-node ONNX model (``y = Relu(x)``, x of shape [1]) used to test a provider."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "meridian-probe", [x], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=_PROBE_IR_VERSION
    )
    return model.SerializeToString()


def _gpu_device_present() -> bool:
    """Whether the machine exposes an NVIDIA device node (Linux) — a cheap precondition for CUDA."""
    if os.name != "posix":
        return True  # no cheap check elsewhere: let the probe decide
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _cuda_session_runs() -> bool:
    """Create a session on CUDA alone and check it kept CUDA and computes ``Relu([-1]) == [0]``."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    # A failed CUDA provider logs through the default logger, not the session's: silence it for the probe.
    ort.set_default_logger_severity(4)
    try:
        session = ort.InferenceSession(_probe_model_bytes(), options, providers=[CUDA_PROVIDER])
        if session.get_providers()[:1] != [CUDA_PROVIDER]:
            return False
        (out,) = session.run(None, {"x": np.array([-1.0], dtype=np.float32)})
        return bool(out.shape == (1,) and out[0] == 0.0)
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return False
    finally:
        ort.set_default_logger_severity(_ORT_DEFAULT_LOG_SEVERITY)


def usable_providers() -> list[str]:
    """The execution providers a session really runs on here, best first.

    ``CUDAExecutionProvider`` is included only if it is compiled in, an NVIDIA device exists, and a probe
    session created on it keeps it and computes correctly (so the CUDA libraries load). The probe runs once
    per process; the result is cached. ``CPUExecutionProvider`` is always last.

    Returns
    -------
    list of str
        E.g. ``["CPUExecutionProvider"]`` on a CPU-only machine. A fresh copy on each call.

    Examples
    --------
    >>> usable_providers()[-1]
    'CPUExecutionProvider'
    """
    return list(_usable_providers())


@functools.cache
def _usable_providers() -> tuple[str, ...]:
    providers = []
    if CUDA_PROVIDER in ort.get_available_providers() and _gpu_device_present() and _cuda_session_runs():
        providers.append(CUDA_PROVIDER)
    providers.append(CPU_PROVIDER)
    return tuple(providers)


#: the CUDA provider's options: cuDNN picks convolution kernels by heuristics, not by timing each one
#: (the default, EXHAUSTIVE, times them again for every new input shape: the first batch of a size not
#: seen before would take a search's hundreds of ms inside some query's deadline); the memory arena grows
#: by what is asked, not in doublings, so the GPU memory a variant holds is what it needs
CUDA_OPTIONS = {"cudnn_conv_algo_search": "HEURISTIC", "arena_extend_strategy": "kSameAsRequested"}


def provider_named(name: str) -> str:
    """``cpu`` or ``cuda`` as onnxruntime names the provider (`ValueError` for any other name)."""
    if name not in PROVIDER_NAMES:
        raise ValueError(f"a provider is one of {sorted(PROVIDER_NAMES)}, got {name!r}")
    return PROVIDER_NAMES[name]


def _make_session_iv(
    model: str | os.PathLike | bytes, intra_op_threads: int, optimization_level: str, provider: str | None
) -> tuple[str | bytes, str]:
    if isinstance(model, (bytes, bytearray, memoryview)):
        model_arg: str | bytes = bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"`path_or_bytes` {str(path)!r} is not a file")
        model_arg = str(path)
    else:
        raise TypeError(f"`path_or_bytes` must be a path or bytes, got {type(model).__name__}")
    if not isinstance(intra_op_threads, int) or intra_op_threads < 1:
        raise ValueError(f"`intra_op_threads` must be an integer >= 1, got {intra_op_threads!r}")
    if optimization_level not in _GRAPH_OPTIMIZATION:
        raise ValueError(
            f"`optimization_level` must be one of {sorted(_GRAPH_OPTIMIZATION)}, got {optimization_level!r}"
        )
    usable = _usable_providers()
    if provider is None:
        provider = usable[0]
    elif provider not in usable:
        raise ValueError(f"`provider` {provider!r} does not run here; usable providers: {list(usable)}")
    return model_arg, provider


def make_session(
    path_or_bytes: str | os.PathLike | bytes,
    *,
    intra_op_threads: int = 1,
    optimization_level: OptimizationLevel = "all",
    provider: str | None = None,
) -> ort.InferenceSession:
    """Load an ONNX model into an ``onnxruntime.InferenceSession`` with Meridian's settings.

    The session uses ``intra_op_threads`` intra-op threads, one inter-op thread (sequential execution) and
    no spinning (``session.intra_op.allow_spinning=0``, ``session.inter_op.allow_spinning=0``), so an idle
    worker leaves its core to others.

    Parameters
    ----------
    path_or_bytes : path or bytes
        An ``.onnx`` file, or the serialized model.
    intra_op_threads : int, optional
        Threads for one operator. 1 (the default) is best when each worker process owns one core.
    optimization_level : {"all", "basic", "extended", "disabled"}, optional
        onnxruntime graph optimization level.
    provider : str, optional
        An entry of `usable_providers`; ``None`` takes the best one (CUDA where it really works, else
        CPU). A GPU session keeps the CPU provider as fallback for operators CUDA lacks.

    Returns
    -------
    onnxruntime.InferenceSession

    Raises
    ------
    ValueError
        An unknown `optimization_level`, `intra_op_threads` < 1, or a `provider` that does not run here.
    FileNotFoundError
        `path_or_bytes` names no file.
    """
    model_arg, provider = _make_session_iv(path_or_bytes, intra_op_threads, optimization_level, provider)
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = _GRAPH_OPTIMIZATION[optimization_level]
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    providers = [provider] if provider == CPU_PROVIDER else [(provider, CUDA_OPTIONS), CPU_PROVIDER]
    return ort.InferenceSession(model_arg, options, providers=providers)


def session_io_names(session: ort.InferenceSession) -> tuple[str, str]:
    """The names of a session's first input and first output, e.g. ``("input", "logits")``."""
    return session.get_inputs()[0].name, session.get_outputs()[0].name


#: onnxruntime's names of the input types Meridian's queries carry (the Open Inference Protocol's FP32, FP16,
#: INT64, INT32, UINT8) -> numpy's
ONNX_INPUT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                     "tensor(int32)": np.int32, "tensor(uint8)": np.uint8}


def input_dtype(session: ort.InferenceSession) -> np.dtype:
    """The numpy datatype of a session's first input (``ValueError`` for one no query can carry)."""
    onnx_type = session.get_inputs()[0].type
    if onnx_type not in ONNX_INPUT_DTYPES:
        raise ValueError(f"the model takes {onnx_type}; Meridian's queries carry {', '.join(ONNX_INPUT_DTYPES)}")
    return np.dtype(ONNX_INPUT_DTYPES[onnx_type])


def run_batch(session: ort.InferenceSession, inputs: np.ndarray) -> np.ndarray:
    """Run one batch through a single-input model and return its first output.

    Parameters
    ----------
    session : onnxruntime.InferenceSession
        A session from `make_session`.
    inputs : numpy.ndarray
        The batch, batch axis first (for the digits family: ``[N, 1, 8, 8]``). Converted to a contiguous
        array of the model's input datatype (`input_dtype`: float32 for most) if it is not one already.

    Returns
    -------
    numpy.ndarray
        The first output, e.g. logits ``[N, 10]``.

    Raises
    ------
    ValueError
        `inputs` has a different rank than the model input, or an empty batch.
    """
    model_input = session.get_inputs()[0]
    array = np.ascontiguousarray(inputs, dtype=input_dtype(session))
    if array.ndim != len(model_input.shape):
        raise ValueError(
            f"`inputs` must have rank {len(model_input.shape)} ({model_input.shape}), got shape {array.shape}"
        )
    if array.shape[0] == 0:
        raise ValueError("`inputs` is an empty batch")
    if session.get_providers()[0] == CUDA_PROVIDER:
        return run_bound(session, array, "cuda")
    (output,) = session.run([session.get_outputs()[0].name], {model_input.name: array})
    return output


def run_bound(session: ort.InferenceSession, array: np.ndarray, device: Literal["cpu", "cuda"]) -> np.ndarray:
    """One batch through I/O binding: ``array`` (of the model's input type) bound as the first input, the
    first output bound on ``device`` and copied back once the run is done. `run_batch` takes this way on
    CUDA; on ``cpu`` it is the same computation, which is how it is tested where no GPU is."""
    binding = session.io_binding()
    binding.bind_cpu_input(session.get_inputs()[0].name, array)
    binding.bind_output(session.get_outputs()[0].name, device)
    session.run_with_iobinding(binding)
    return binding.copy_outputs_to_cpu()[0]
