"""Profile an ONNX model the way INFaaS's Variant-Profiler does, on every provider that runs here.

For each usable onnxruntime provider (`shared.onnx_runtime.usable_providers`) the profiler records

- **batch latency** for batch sizes 1, 2, 4, ..., 64: wall time of one `run_batch` call (the call a worker
  makes) on validation inputs, back-to-back after warm-up runs, in rounds over the batch sizes;
  ``batch_latency_ms`` holds the **median** of the repeated runs and ``latency_samples_ms`` the raw
  samples;
- **load latency**: wall time of `make_session` on the model file (median of a few loads; the first one
  also warms the file cache);
- **peak memory**: growth of the resident set size of a fresh child process, from just before it creates
  the session to the peak while it runs the largest batch (Linux ``VmHWM`` after resetting it through
  ``/proc/self/clear_refs``; where that reset is refused, the peak over the process's life, which then
  includes the imports). Host memory only: GPU memory held by a CUDA session is not counted. ``None``
  off Linux;
- **accuracy**: top-1 of the argmax of the first output on a validation ``.npz`` (keys ``x``, ``y``).

Each provider is a device type of `shared.profiles.format`: the CPU with ``n`` intra-op threads is
``cpu-<n>t``, priced at an assumed ``n * 0.0425`` $/h (one vCPU's share of an AWS c5.large, 0.085 $/h
on demand for 2 vCPUs); CUDA is the GPU's key as a worker announces it (``gpu-<its name>``,
`shared.device_identity`), priced like a g4dn.xlarge (0.526 $/h on demand).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shared import imaging
from shared.onnx_runtime import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    make_session,
    run_batch,
    usable_providers,
)
from shared.profiles.format import DeviceType, ImagePreprocessing, VariantProfile

__all__ = [
    "BATCH_SIZES",
    "CPU_PRICE_PER_VCPU_HOUR",
    "GPU_PRICE_PER_HOUR",
    "device_for_provider",
    "load_validation",
    "measure_accuracy",
    "measure_batch_latency",
    "measure_image_prepare_ms",
    "measure_load_latency",
    "measure_peak_memory_mb",
    "profile_model",
]

#: Batch sizes profiled (INFaaS: "batch sizes from 1 to 64 (power of two increments)").
BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Assumed price of one vCPU: half an AWS c5.large (2 vCPUs, 0.085 $/h on demand, us-east-1).
CPU_PRICE_PER_VCPU_HOUR = 0.0425
#: Assumed price of a GPU device: an AWS g4dn.xlarge (one T4, 0.526 $/h on demand, us-east-1).
GPU_PRICE_PER_HOUR = 0.526

_REPO_ROOT = Path(__file__).resolve().parents[2]


def device_for_provider(provider: str, *, intra_op_threads: int = 1) -> DeviceType:
    """The device type a provider stands for: ``cpu-<n>t`` for the CPU with n threads, ``gpu-<name>`` for
    this machine's GPU (the key a real worker on it announces).

    Examples
    --------
    >>> device_for_provider("CPUExecutionProvider")
    DeviceType(name='cpu-1t', kind='cpu', price_per_hour=0.0425, startup_s=None)
    """
    if provider == CPU_PROVIDER:
        return DeviceType(
            name=f"cpu-{intra_op_threads}t",
            kind="cpu",
            price_per_hour=CPU_PRICE_PER_VCPU_HOUR * intra_op_threads,
        )
    if provider == CUDA_PROVIDER:
        from shared.device_identity import describe_machine, device_key

        name = device_key(describe_machine(CUDA_PROVIDER, intra_op_threads))
        return DeviceType(name=name, kind="gpu", price_per_hour=GPU_PRICE_PER_HOUR)
    raise ValueError(f"`provider` must be {CPU_PROVIDER!r} or {CUDA_PROVIDER!r}, got {provider!r}")


def load_validation(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a validation ``.npz`` with ``x`` (model inputs, batch axis first) and ``y`` (int labels)."""
    with np.load(path) as data:
        missing = {"x", "y"} - set(data.files)
        if missing:
            raise ValueError(f"validation file {str(path)!r} lacks key(s) {sorted(missing)}")
        x, y = np.ascontiguousarray(data["x"], dtype=np.float32), data["y"].astype(np.int64)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(
            f"validation file {str(path)!r}: `x` ({len(x)}) and `y` ({len(y)}) must be non-empty and equal"
        )
    return x, y


def measure_accuracy(session, x: np.ndarray, y: np.ndarray, *, batch_size: int = 64) -> float:
    """Top-1 accuracy: the share of rows of `x` whose argmax output equals `y`, run in chunks."""
    correct = 0
    for start in range(0, len(x), batch_size):
        logits = run_batch(session, x[start : start + batch_size])
        correct += int((logits.argmax(axis=1) == y[start : start + batch_size]).sum())
    return correct / len(x)


def _batch_of(x: np.ndarray, batch_size: int) -> np.ndarray:
    """The first `batch_size` rows of `x`, cycled if `x` is shorter."""
    index = np.arange(batch_size) % len(x)
    return np.ascontiguousarray(x[index], dtype=np.float32)


def measure_batch_latency(
    session,
    batches: dict[int, np.ndarray],
    *,
    num_warmup: int = 3,
    num_repeats: int = 100,
    num_rounds: int = 10,
    max_seconds: float = 2.0,
) -> dict[int, list[float]]:
    """Wall-clock milliseconds of back-to-back `run_batch` calls, per batch size, over several rounds.

    Each of `num_rounds` rounds visits every batch in `batches` (``{batch size: inputs}``): `num_warmup`
    untimed calls, then a block of ``num_repeats / num_rounds`` timed calls of that batch. Timed calls of
    one batch follow each other (warm caches, as a worker running one batch size sees them), while the
    rounds spread each batch size's samples over time, so a burst of interference from other processes
    does not skew one batch size. Once `max_seconds` have passed, the rounds stop early (at least one
    round runs).
    """
    num_rounds = max(1, min(num_rounds, num_repeats))
    block = -(-num_repeats // num_rounds)
    samples: dict[int, list[float]] = {b: [] for b in batches}
    deadline = time.perf_counter() + max_seconds
    for _ in range(num_rounds):
        for b, inputs in batches.items():
            for _ in range(num_warmup):
                run_batch(session, inputs)
            for _ in range(min(block, num_repeats - len(samples[b]))):
                start = time.perf_counter_ns()
                run_batch(session, inputs)
                samples[b].append((time.perf_counter_ns() - start) / 1e6)
        if time.perf_counter() > deadline:
            break
    return samples


def measure_image_prepare_ms(images: Sequence[bytes], spec: ImagePreprocessing, *, num_rounds: int = 5) -> float:
    """Median wall-clock milliseconds `shared.imaging.prepare` takes per encoded image (decoding, crop,
    resize and normalisation to ``spec``), over ``num_rounds`` timed passes through ``images`` after one
    untimed pass: what a worker adds to a batch for each image it carries."""
    for image in images:
        imaging.prepare(image, spec)
    samples = []
    for _ in range(num_rounds):
        for image in images:
            start = time.perf_counter_ns()
            imaging.prepare(image, spec)
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def measure_load_latency(
    path: str | os.PathLike, *, provider: str, intra_op_threads: int = 1, num_loads: int = 3
) -> float:
    """Median wall-clock milliseconds of `make_session` on `path` over `num_loads` loads."""
    samples = []
    for _ in range(num_loads):
        start = time.perf_counter_ns()
        session = make_session(path, provider=provider, intra_op_threads=intra_op_threads)
        samples.append((time.perf_counter_ns() - start) / 1e6)
        del session
    return statistics.median(samples)


def measure_peak_memory_mb(
    path: str | os.PathLike,
    *,
    provider: str,
    input_shape: Sequence[int],
    batch_size: int = 64,
    intra_op_threads: int = 1,
) -> float | None:
    """Peak resident-set growth (MB) of a fresh process that loads `path` and runs one batch of zeros.

    Runs ``python -m shared.modelzoo.profiler --peak-memory ...`` (see the module docstring for what is
    counted). Returns ``None`` where ``/proc`` is missing (not Linux).
    """
    if not Path("/proc/self/status").exists():
        return None
    command = [
        sys.executable,
        "-m",
        "shared.modelzoo.profiler",
        "--peak-memory",
        str(path),
        "--provider",
        provider,
        "--threads",
        str(intra_op_threads),
        "--shape",
        ",".join(str(d) for d in (batch_size, *input_shape)),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=300)
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_memory_mb"]


def _read_status_kb(field_name: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field_name}")


def _peak_memory_child(path: str, provider: str, threads: int, shape: tuple[int, ...]) -> float:
    """In the child: reset the RSS high-water mark, load, run, and return the growth in MB."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    baseline_kb = _read_status_kb("VmRSS")
    session = make_session(path, provider=provider, intra_op_threads=threads)
    run_batch(session, np.zeros(shape, dtype=np.float32))
    run_batch(session, np.zeros(shape, dtype=np.float32))
    return max(0.0, (_read_status_kb("VmHWM") - baseline_kb) / 1024.0)


def profile_model(
    path: str | os.PathLike,
    *,
    variant: str,
    family: str,
    validation: str | os.PathLike | tuple[np.ndarray, np.ndarray] | None = None,
    providers: Sequence[str] | None = None,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    intra_op_threads: int = 1,
    num_warmup: int = 3,
    num_repeats: int = 100,
    num_rounds: int = 10,
    max_seconds: float = 2.0,
    num_loads: int = 3,
    measure_memory: bool = True,
) -> list[VariantProfile]:
    """Profile one ONNX model on each provider; one `VariantProfile` per provider.

    Parameters
    ----------
    path : path
        The ``.onnx`` file (one input, batch axis first; the first output is the class scores).
    variant, family : str
        Names written into the profiles.
    validation : path or (x, y), optional
        Validation data (an ``.npz`` with ``x`` and ``y``). Gives the accuracy and the inputs timed;
        without it accuracy is ``None`` and zeros of the model's input shape are timed.
    providers : sequence of str, optional
        Providers to profile; default `usable_providers()`.
    batch_sizes : sequence of int, optional
        Batch sizes to time; the largest becomes ``max_batch``.
    num_warmup, num_repeats, num_rounds, max_seconds : optional
        Up to `num_repeats` timed runs per batch size, in `num_rounds` rounds over all batch sizes, each
        block after `num_warmup` untimed runs; rounds stop early after `max_seconds`. See
        `measure_batch_latency`.
    num_loads : int, optional
        Session creations timed for the load latency.
    measure_memory : bool, optional
        Measure peak memory in a child process (about half a second each); ``False`` leaves it ``None``.

    Returns
    -------
    list of VariantProfile
        Device names from `device_for_provider`; ``batch_latency_ms`` holds medians.
    """
    path = Path(path)
    batch_sizes = sorted({int(b) for b in batch_sizes})
    if not batch_sizes or batch_sizes[0] < 1:
        raise ValueError(f"`batch_sizes` must be non-empty integers >= 1, got {batch_sizes}")
    if isinstance(validation, (str, os.PathLike)):
        validation = load_validation(validation)
    providers = list(providers) if providers is not None else usable_providers()

    profiles = []
    for provider in providers:
        device = device_for_provider(provider, intra_op_threads=intra_op_threads)
        load_latency_ms = measure_load_latency(
            path, provider=provider, intra_op_threads=intra_op_threads, num_loads=num_loads
        )
        session = make_session(path, provider=provider, intra_op_threads=intra_op_threads)
        input_shape = static_input_shape(session)
        x_pool = validation[0] if validation is not None else np.zeros((1, *input_shape), dtype=np.float32)
        accuracy = (
            measure_accuracy(session, *validation, batch_size=batch_sizes[-1])
            if validation is not None
            else None
        )
        samples = measure_batch_latency(
            session,
            {b: _batch_of(x_pool, b) for b in batch_sizes},
            num_warmup=num_warmup,
            num_repeats=num_repeats,
            num_rounds=num_rounds,
            max_seconds=max_seconds,
        )
        del session
        peak_memory_mb = (
            measure_peak_memory_mb(
                path,
                provider=provider,
                input_shape=input_shape,
                batch_size=batch_sizes[-1],
                intra_op_threads=intra_op_threads,
            )
            if measure_memory
            else None
        )
        profiles.append(
            VariantProfile(
                variant=variant,
                family=family,
                device=device.name,
                accuracy=accuracy,
                batch_latency_ms={b: round(statistics.median(s), 5) for b, s in samples.items()},
                latency_samples_ms={b: [round(v, 5) for v in s] for b, s in samples.items()},
                load_latency_ms=round(load_latency_ms, 3),
                peak_memory_mb=None if peak_memory_mb is None else round(peak_memory_mb, 2),
                max_batch=batch_sizes[-1],
                measured=True,
                input_shape=input_shape,
                input_dtype="float32",
            )
        )
    return profiles


def static_input_shape(session) -> tuple[int, ...]:
    """The first input's shape without the batch axis; every other axis must be fixed."""
    shape = session.get_inputs()[0].shape[1:]
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(
            f"the model input needs fixed non-batch dimensions, got {session.get_inputs()[0].shape}"
        )
    return tuple(shape)


def main(argv: Sequence[str] | None = None) -> None:
    """``--peak-memory PATH``: the child half of `measure_peak_memory_mb`; prints one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-memory", required=True, metavar="PATH")
    parser.add_argument("--provider", default=CPU_PROVIDER)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shape", required=True, help="comma-separated input shape, batch first")
    args = parser.parse_args(argv)
    shape = tuple(int(d) for d in args.shape.split(","))
    peak = _peak_memory_child(args.peak_memory, args.provider, args.threads, shape)
    print(json.dumps({"peak_memory_mb": peak}))


if __name__ == "__main__":
    main()
