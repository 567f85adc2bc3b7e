"""The Variant-Generator and Variant-Profiler of INFaaS (spec §4, §6.1) for one registered ONNX model.

From one model, `generate_variants` writes one ``.onnx`` file per combination of

- **precision**: ``fp32`` (the model as given); ``fp16``, weights and activations converted by
  ``onnxruntime.transformers.float16`` with ``keep_io_types=True`` so inputs and outputs stay float32;
  ``int8``, dynamic quantization by ``onnxruntime.quantization.quantize_dynamic`` (int8 weights,
  activations quantized at run time). A precision is skipped, with the reason recorded, when its
  converter fails or no usable provider runs the result. On the CPU provider onnxruntime runs fp16
  nodes that lack an fp16 kernel through inserted fp32 casts: the variant is real (half-size weights,
  its own measured latency and accuracy) but not an fp16 speed-up;
- **graph optimization level** (``basic``, ``all``): a *session option*, not a different graph. It is
  recorded in the file's metadata (`LEVEL_KEY`) and the variant is profiled at that level. Saving an
  offline-optimized graph instead would not be honest here: a worker loading it at level ``all``
  re-optimizes it, so ``basic`` would profile slower than it serves. A worker honours the level by
  reading it with `optimization_level_of`;
- **maximum batch size** (``8``, ``64``): a serving limit recorded in the metadata and the profile
  (onnxruntime needs no per-batch compilation; the graph keeps its dynamic batch axis). A b8 variant's
  profile and peak memory cover batches up to 8 only.

Execution providers are not a naming axis: every variant is profiled on each usable provider
(`shared.onnx_runtime.usable_providers`, CUDA only where it really runs) and gets one profile per device
type, as the profile format expects. Names are ``<model>-<precision>-<opt>-b<maxbatch>``.

`profile_variants` measures every variant with `shared.modelzoo.profiler`'s primitives at the variant's
own optimization level. Variants that differ only in max batch share one graph and one session
setting, so their latencies are measured once up to the largest max batch and each keeps its prefix;
accuracy and load latency are shared the same way; peak memory is measured per max batch (in a child
process at level ``all``: the profiler's child has no level option).
"""
from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from shared.modelzoo.profiler import (
    BATCH_SIZES,
    device_for_provider,
    measure_accuracy,
    measure_batch_latency,
    measure_peak_memory_mb,
)
from shared.onnx_runtime import OptimizationLevel, make_session, run_batch, usable_providers
from shared.profiles.format import VariantProfile

__all__ = [
    "LEVEL_KEY",
    "MAX_BATCHES",
    "MAX_BATCH_KEY",
    "OPTIMIZATION_LEVELS",
    "PRECISIONS",
    "PRECISION_KEY",
    "GeneratedVariant",
    "Generation",
    "ProfilingBudget",
    "SkippedPrecision",
    "VariantSpec",
    "generate_variants",
    "optimization_level_of",
    "profile_variants",
    "variant_name",
]

Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "int8")
OPTIMIZATION_LEVELS: tuple[OptimizationLevel, ...] = ("basic", "all")
MAX_BATCHES: tuple[int, ...] = (8, 64)
LEVEL_KEY = "meridian.optimization_level"
PRECISION_KEY = "meridian.precision"
MAX_BATCH_KEY = "meridian.max_batch"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$")
_MAX_NAME = 128


def variant_name(model_name: str, precision: str, optimization_level: str, max_batch: int) -> str:
    """``<model>-<precision>-<opt>-b<maxbatch>``; raises ValueError if it is not a valid identifier."""
    name = f"{model_name}-{precision}-{optimization_level}-b{max_batch}"
    if len(name) > _MAX_NAME or not _NAME.match(name):
        raise ValueError(f"variant name {name!r} must match {_NAME.pattern} and have at most {_MAX_NAME} "
                         f"characters: shorten `model_name`")
    return name


@dataclass(frozen=True, slots=True)
class VariantSpec:
    model_name: str
    precision: Precision
    optimization_level: OptimizationLevel
    max_batch: int

    def __post_init__(self) -> None:
        variant_name(self.model_name, self.precision, self.optimization_level, self.max_batch)

    @property
    def name(self) -> str:
        return variant_name(self.model_name, self.precision, self.optimization_level, self.max_batch)


@dataclass(frozen=True, slots=True)
class GeneratedVariant:
    spec: VariantSpec
    path: Path
    #: the usable providers this variant ran on
    providers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SkippedPrecision:
    precision: Precision
    reason: str


@dataclass(frozen=True, slots=True)
class Generation:
    variants: tuple[GeneratedVariant, ...]
    skipped: tuple[SkippedPrecision, ...]


def optimization_level_of(path: str | os.PathLike) -> OptimizationLevel:
    """The graph optimization level a variant file asks for (``all`` when it records none)."""
    import onnx

    props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    level = props.get(LEVEL_KEY, "all")
    if level not in ("disabled", "basic", "extended", "all"):
        raise ValueError(f"{str(path)!r} records an unknown optimization level {level!r}")
    return level


def _convert(model_path: Path, precision: Precision, workdir: Path):
    """The model at `precision` as an ``onnx.ModelProto``; raises on converter failure."""
    import onnx

    if precision == "fp32":
        return onnx.load(str(model_path))
    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16
        from onnxruntime.transformers.onnx_model import OnnxModel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = OnnxModel(convert_float_to_float16(onnx.load(str(model_path)), keep_io_types=True))
        converted.topological_sort()  # the converter appends its input casts after their consumers
        return converted.model
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = workdir / "int8.onnx"
    quantize_dynamic(str(model_path), str(out), weight_type=QuantType.QInt8)
    return onnx.load(str(out))


def _runs_on(model_bytes: bytes, provider: str, input_shape: Sequence[int]) -> str | None:
    """None if a 2-row batch of zeros runs to finite outputs on `provider`, else why not."""
    try:
        session = make_session(model_bytes, provider=provider)
        output = run_batch(session, np.zeros((2, *input_shape), dtype=np.float32))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types; any failure disqualifies
        return f"{type(exc).__name__}: {exc}"[:300]
    if output.shape[:1] != (2,) or not np.isfinite(output).all():
        return f"output of shape {output.shape} is not 2 rows of finite values"
    return None


def _write(model, path: Path, metadata: dict[str, str]) -> None:
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    props = {p.key: p.value for p in copy.metadata_props} | metadata
    del copy.metadata_props[:]
    for key, value in sorted(props.items()):
        copy.metadata_props.add(key=key, value=value)
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(copy, str(tmp))
    os.replace(tmp, path)


def generate_variants(
    model_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    model_name: str,
    input_shape: Sequence[int],
    precisions: Sequence[Precision] = PRECISIONS,
    optimization_levels: Sequence[OptimizationLevel] = OPTIMIZATION_LEVELS,
    max_batches: Sequence[int] = MAX_BATCHES,
    providers: Sequence[str] | None = None,
) -> Generation:
    """Write ``<out_dir>/<variant>.onnx`` for every (precision, level, max batch) that runs here.

    Parameters
    ----------
    model_path : path
        A valid ONNX model with one float32 input ``[N, *input_shape]`` (dynamic N).
    out_dir : path
        Created if missing; existing files of the same names are replaced atomically.
    model_name : str
        The prefix of every variant name.
    input_shape : sequence of int
        One row's shape, for the run check.
    precisions, optimization_levels, max_batches : optional
        The axes; see the module docstring.
    providers : sequence of str, optional
        Default `usable_providers()`.

    Returns
    -------
    Generation
        The variants written, and the precisions skipped with the reason.
    """
    import onnx

    model_path, out_dir = Path(model_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    providers = list(providers) if providers is not None else usable_providers()
    # building the specs validates every name before any work
    specs = [VariantSpec(model_name, p, o, int(b))
             for p in precisions for o in optimization_levels for b in max_batches]
    variants, skipped = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for precision in dict.fromkeys(precisions):
            try:
                model = _convert(model_path, precision, Path(workdir))
                onnx.checker.check_model(model)
            except Exception as exc:  # noqa: BLE001 - a converter that fails skips its precision
                skipped.append(SkippedPrecision(precision, f"conversion failed: {type(exc).__name__}: {exc}"[:500]))
                continue
            model_bytes = model.SerializeToString()
            failures = {p: _runs_on(model_bytes, p, input_shape) for p in providers}
            runs_on = tuple(p for p, why in failures.items() if why is None)
            if not runs_on:
                skipped.append(SkippedPrecision(precision, "onnxruntime cannot run it here: " + "; ".join(
                    f"{p}: {why}" for p, why in failures.items())))
                continue
            for spec in (s for s in specs if s.precision == precision):
                path = out_dir / f"{spec.name}.onnx"
                _write(model, path, {LEVEL_KEY: spec.optimization_level, PRECISION_KEY: precision,
                                     MAX_BATCH_KEY: str(spec.max_batch)})
                variants.append(GeneratedVariant(spec, path, runs_on))
    return Generation(tuple(variants), tuple(skipped))


@dataclass(frozen=True, slots=True)
class ProfilingBudget:
    """How hard to profile: registration must finish in seconds, not the minutes of ``make models``."""

    num_warmup: int = 2
    num_repeats: int = 30
    num_rounds: int = 3
    #: per (precision, level, provider): the rounds stop after this long
    max_seconds: float = 0.5
    num_loads: int = 3
    measure_memory: bool = True


def _load_latency_ms(path: Path, provider: str, level: OptimizationLevel, num_loads: int) -> float:
    samples = []
    for _ in range(num_loads):
        start = time.perf_counter_ns()
        make_session(path, provider=provider, optimization_level=level)
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def profile_variants(
    generation: Generation,
    *,
    family: str,
    validation: tuple[np.ndarray, np.ndarray],
    batch_sizes: Sequence[int] = BATCH_SIZES,
    budget: ProfilingBudget = ProfilingBudget(),
) -> list[VariantProfile]:
    """One `VariantProfile` per (variant, usable provider), measured at the variant's own level.

    Accuracy is top-1 on `validation` ``(x, y)``; ``batch_latency_ms`` holds medians for the profiled
    batch sizes up to each variant's max batch (its max batch is always profiled).
    """
    x, y = validation
    groups: dict[tuple[str, str], list[GeneratedVariant]] = {}
    for variant in generation.variants:
        groups.setdefault((variant.spec.precision, variant.spec.optimization_level), []).append(variant)
    profiles = []
    for (_, level), members in groups.items():
        path = members[0].path
        largest = max(v.spec.max_batch for v in members)
        sizes = sorted({b for b in batch_sizes if b <= largest} | {v.spec.max_batch for v in members})
        for provider in members[0].providers:
            device = device_for_provider(provider)
            load_ms = _load_latency_ms(path, provider, level, budget.num_loads)
            session = make_session(path, provider=provider, optimization_level=level)
            accuracy = measure_accuracy(session, x, y, batch_size=largest)
            samples = measure_batch_latency(
                session, {b: np.ascontiguousarray(x[np.arange(b) % len(x)]) for b in sizes},
                num_warmup=budget.num_warmup, num_repeats=budget.num_repeats, num_rounds=budget.num_rounds,
                max_seconds=budget.max_seconds)
            del session
            for variant in members:
                cap = variant.spec.max_batch
                memory = (measure_peak_memory_mb(variant.path, provider=provider, input_shape=x.shape[1:],
                                                 batch_size=cap) if budget.measure_memory else None)
                profiles.append(VariantProfile(
                    variant=variant.spec.name, family=family, device=device.name, accuracy=accuracy,
                    batch_latency_ms={b: round(statistics.median(s), 5) for b, s in samples.items() if b <= cap},
                    latency_samples_ms={b: [round(v, 5) for v in s] for b, s in samples.items() if b <= cap},
                    load_latency_ms=round(load_ms, 3),
                    peak_memory_mb=None if memory is None else round(memory, 2),
                    max_batch=cap, measured=True, input_shape=tuple(x.shape[1:]), input_dtype="float32"))
    return profiles
