"""The Model Registrar's work for one registration, free of Kafka: validate, generate, profile, store.

Variant files appear in the models folder only once every variant is profiled, each moved in
atomically, so a worker never loads a half-written file and a failed registration leaves nothing.
Generation runs one precision at a time and profiling one (precision, level) group at a time, the
units of work `shared.modelzoo.variants` measures anyway, so each step can be reported as it ends or starts.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas import RegisteredVariant, RegisterModel, RegistrationProgress, RegistrationReply, RegistrationStage
from services.registry.validation import RegistrationRejected, validate_registration
from shared.infaas.metadata import MetadataStore
from shared.modelzoo.profiler import device_for_provider
from shared.modelzoo.variants import (
    MAX_BATCHES,
    OPTIMIZATION_LEVELS,
    PRECISIONS,
    GeneratedVariant,
    Generation,
    ProfilingBudget,
    SkippedPrecision,
    generate_variants,
    profile_variants,
    variant_name,
)
from shared.profiles.format import ProfileSet, VariantProfile

__all__ = ["REGISTERED_SUBDIR", "Progress", "RegistrarConfig", "register_model"]

#: registered models' profile sets live in ``<profiles_dir>/registered/<model>.json``
REGISTERED_SUBDIR = "registered"


@dataclass(frozen=True)
class RegistrarConfig:
    models_dir: Path
    profiles_dir: Path
    budget: ProfilingBudget = ProfilingBudget()


#: told of each step of a registration as it happens (the registry publishes it to the client)
Progress = Callable[[RegistrationProgress], None]
Report = Callable[[RegistrationStage, str], None]


def _source_text(budget: ProfilingBudget, skipped: str) -> str:
    import onnxruntime

    return (f"Measured at registration by services.registry (shared.modelzoo.variants) with onnxruntime "
            f"{onnxruntime.__version__}, 1 intra-op thread, spinning off, each variant at its own graph "
            f"optimization level. accuracy: top-1 on the registration's validation set. batch_latency_ms: "
            f"median of up to {budget.num_repeats} timed run_batch calls per batch size ({budget.num_rounds} "
            f"rounds, at most about {budget.max_seconds} s per variant graph; other processes shared the "
            f"cores). load_latency_ms: median of {budget.num_loads} session creations. peak_memory_mb: peak "
            f"RSS growth of a fresh process running the max batch (at level all). {skipped}")


def _registered(variant: GeneratedVariant, profile) -> RegisteredVariant:
    return RegisteredVariant(
        variant=profile.variant, device=profile.device, accuracy=profile.accuracy,
        precision=variant.spec.precision, optimization_level=variant.spec.optimization_level,
        max_batch=profile.max_batch, batch_latency_ms=profile.batch_latency_ms,
        load_latency_ms=profile.load_latency_ms, peak_memory_mb=profile.peak_memory_mb)


def _generate(source: Path, out_dir: Path, command: RegisterModel, report: Report) -> Generation:
    """`generate_variants` one precision at a time, reporting each."""
    variants: list[GeneratedVariant] = []
    skipped: list[SkippedPrecision] = []
    for i, precision in enumerate(PRECISIONS, 1):
        part = generate_variants(source, out_dir, model_name=command.model_name, input_shape=command.input_shape,
                                 precisions=[precision])
        variants += part.variants
        skipped += part.skipped
        done = (f"{len(part.variants)} {precision} variants generated" if part.variants
                else f"{precision} skipped: {part.skipped[0].reason}")
        report("generated", f"{done} (precision {i}/{len(PRECISIONS)})")
    return Generation(tuple(variants), tuple(skipped))


def _profile(generation: Generation, command: RegisterModel, validation: tuple[np.ndarray, np.ndarray],
             budget: ProfilingBudget, report: Report) -> list[VariantProfile]:
    """`profile_variants` one (precision, level) group at a time, the variants that share one measurement,
    reporting each before it starts."""
    groups: dict[tuple[str, str], list[GeneratedVariant]] = {}
    for variant in generation.variants:
        groups.setdefault((variant.spec.precision, variant.spec.optimization_level), []).append(variant)
    profiles = []
    for i, members in enumerate(groups.values(), 1):
        devices = ", ".join(device_for_provider(p).name for p in members[0].providers)
        report("profiling", f"profiling {', '.join(v.spec.name for v in members)} on {devices} ({i}/{len(groups)})")
        profiles += profile_variants(Generation(tuple(members), ()), family=command.model_name,
                                     validation=validation, budget=budget)
    return profiles


def register_model(command: RegisterModel, *, config: RegistrarConfig, store: MetadataStore,
                   progress: Progress = lambda _: None) -> RegistrationReply:
    """Register one model; raises `RegistrationRejected` with the reason when it cannot be accepted.

    Writes ``<models_dir>/<variant>.onnx`` for every generated variant, the profile set to
    ``<profiles_dir>/registered/<model>.json``, the static profiles and ``app_id -> model`` to `store`.
    `progress` hears of each step (validated, each precision generated, each group about to be profiled).
    """
    def report(stage: RegistrationStage, message: str) -> None:
        progress(RegistrationProgress(request_id=command.request_id, stage=stage, message=message[:500],
                                      at=time.time()))

    try:
        variant_name(command.model_name, max(PRECISIONS, key=len), max(OPTIMIZATION_LEVELS, key=len), max(MAX_BATCHES))
    except ValueError as exc:
        raise RegistrationRejected(str(exc)) from None
    validated = validate_registration(command)
    report("validated", f"validated {command.model_name}: {len(validated.y)} labelled rows of shape "
                        f"{'x'.join(map(str, command.input_shape))}")
    config.models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=config.models_dir, prefix=".registering-") as workdir:
        source = Path(workdir) / "source.onnx"
        source.write_bytes(validated.model_bytes)
        generation = _generate(source, Path(workdir) / "variants", command, report)
        skipped = "; ".join(f"{s.precision} skipped: {s.reason}" for s in generation.skipped)
        if not generation.variants:
            raise RegistrationRejected(f"no variant could be generated: {skipped}"[:2000])
        profiles = _profile(generation, command, (validated.x, validated.y), config.budget, report)
        providers = sorted({p for v in generation.variants for p in v.providers})
        profile_set = ProfileSet(
            source=_source_text(config.budget, skipped), devices=[device_for_provider(p) for p in providers],
            slo_ms={command.model_name: command.slo_ms}, variants=profiles)
        for variant in generation.variants:
            os.replace(variant.path, config.models_dir / variant.path.name)
    target = config.profiles_dir / REGISTERED_SUBDIR / f"{command.model_name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    profile_set.save(tmp)
    os.replace(tmp, target)
    store.put_profiles(profile_set)
    store.register_model(command.app_id, command.model_name)
    by_name = {v.spec.name: v for v in generation.variants}
    return RegistrationReply(
        request_id=command.request_id, model_name=command.model_name, app_id=command.app_id, status="registered",
        reason=skipped or None, variants=[_registered(by_name[p.variant], p) for p in profiles], at=time.time())
