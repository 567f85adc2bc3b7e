"""Build the ``digits`` family: train, export to ONNX, profile, and write the profile set.

Run from the repository root (``make models``)::

    python -m shared.modelzoo.build --out profiles/digits --profiles profiles/digits.json

Writes ``<out>/<variant>.onnx`` for every variant of `shared.modelzoo.digits.VARIANTS`, the held-out test
split ``<out>/digits-test.npz`` (keys ``x``, ``y``; the registry's validation set), and the
`shared.profiles.format.ProfileSet` JSON measured by `shared.modelzoo.profiler` on every usable provider.

The files are committed under `SHIPPED_DIR` (3.6 MB), so serving them needs onnxruntime but not torch or
scikit-learn: ``make demo`` copies them into ``var/models`` and a light install is enough
(``tests/unit/test_modelzoo.py`` retrains them and checks the recipe still gives the same weights).

A variant is trained only when its ONNX file is missing or was built from another recipe: each file
carries the `shared.modelzoo.digits.recipe_sha256` it was built from in its metadata. Training is
deterministic, so skipping it changes nothing but the time taken; ``--force`` retrains anyway.
Profiling always runs (latencies belong to the machine at hand).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shared.modelzoo import digits
from shared.modelzoo.profiler import (
    BATCH_SIZES,
    CPU_PRICE_PER_VCPU_HOUR,
    GPU_PRICE_PER_HOUR,
    device_for_provider,
    profile_model,
)
from shared.onnx_runtime import usable_providers
from shared.profiles.format import ProfileSet, VariantProfile

__all__ = ["SHIPPED_DIR", "TEST_SPLIT_FILE", "build_models", "build_profiles", "main"]

logger = logging.getLogger("shared.modelzoo.build")

#: File name of the held-out test split inside the output folder.
TEST_SPLIT_FILE = "digits-test.npz"
#: Where the built family is committed, beside its profile set.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "profiles" / "digits"
#: Default latency SLO of the family (ms): generous next to sub-millisecond inference, so queueing and
#: batching decide whether it is met.
DIGITS_SLO_MS = 50.0


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def _write_test_split(path: Path, split: digits.DigitsSplit) -> None:
    if path.exists():
        with np.load(path) as existing:
            if (
                set(existing.files) == {"x", "y"}
                and np.array_equal(existing["x"], split.x_test)
                and np.array_equal(existing["y"], split.y_test)
            ):
                return
    tmp = path.with_name(path.name + ".tmp.npz")
    digits.save_split_npz(tmp, split.x_test, split.y_test)
    os.replace(tmp, path)


def build_models(
    out: str | os.PathLike, *, variants: Sequence[digits.DigitsVariant] = digits.VARIANTS, force: bool = False
) -> dict[str, Path]:
    """Train and export each variant whose ONNX file is missing or stale; write the test split.

    Returns
    -------
    dict of str to Path
        ``{variant name: .onnx path}``, plus ``"digits-test"`` for the test split ``.npz``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    split = digits.load_split()
    test_path = out / TEST_SPLIT_FILE
    _write_test_split(test_path, split)
    paths: dict[str, Path] = {}
    for variant in variants:
        path = out / f"{variant.name}.onnx"
        recipe = digits.recipe_sha256(variant, split)
        if not force and path.exists():
            try:
                if digits.onnx_metadata(path.read_bytes()).get(digits.RECIPE_METADATA_KEY) == recipe:
                    logger.info("%s: up to date (recipe %s)", variant.name, recipe[:12])
                    paths[variant.name] = path
                    continue
            except Exception:  # noqa: BLE001 - an unreadable file is rebuilt
                logger.warning("%s: unreadable ONNX file, rebuilding", variant.name)
        start = time.perf_counter()
        trained = digits.train_variant(variant, split)
        model_bytes = digits.export_onnx(
            trained.module,
            metadata={
                digits.RECIPE_METADATA_KEY: recipe,
                "meridian.family": digits.FAMILY,
                "meridian.variant": variant.name,
                "meridian.macs": str(variant.macs),
                "meridian.params": str(variant.num_params),
                "meridian.input": "float32 [N,1,8,8], pixel intensity / 16",
            },
        )
        _write_if_changed(path, model_bytes)
        logger.info(
            "%s: trained in %.1f s (best epoch %d, val acc %.4f, test acc %.4f)",
            variant.name,
            time.perf_counter() - start,
            trained.best_epoch,
            trained.val_accuracy,
            trained.test_accuracy,
        )
        paths[variant.name] = path
    paths["digits-test"] = test_path
    return paths


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _source_text(*, num_repeats: int, providers: Sequence[str]) -> str:
    import onnxruntime

    machine = f"{platform.machine()}, {os.cpu_count()} cores, {_cpu_model()}"
    return (
        f"Measured by shared.modelzoo.profiler on this machine ({machine}; providers "
        f"{', '.join(providers)}) with onnxruntime {onnxruntime.__version__}, 1 intra-op thread, spinning "
        f"off. Models: the digits family of shared.modelzoo.digits (scikit-learn load_digits, trained "
        f"deterministically here). accuracy: top-1 on the held-out test split (450 images). "
        f"batch_latency_ms: median of up to {num_repeats} timed back-to-back run_batch calls per batch "
        f"size (10 rounds over the batch sizes, each block after 3 warm-up calls; at most about 2 s per "
        f"model), raw samples in latency_samples_ms; other processes shared the cores. load_latency_ms: "
        f"median of 3 session creations. peak_memory_mb: peak RSS growth of a fresh process loading the "
        f"model and running batch {max(BATCH_SIZES)}. Prices are assumptions, not measurements: cpu-1t = "
        f"{CPU_PRICE_PER_VCPU_HOUR} $/h, one vCPU's share of an AWS c5.large (0.085 $/h on demand, "
        f"2 vCPUs); a GPU (gpu-<its name>) = {GPU_PRICE_PER_HOUR} $/h, an AWS g4dn.xlarge on demand."
    )


def build_profiles(
    paths: dict[str, Path],
    *,
    validation: str | os.PathLike,
    providers: Sequence[str] | None = None,
    num_repeats: int = 100,
    max_seconds: float = 2.0,
) -> ProfileSet:
    """Profile every ``.onnx`` in `paths` on each provider and gather the family's `ProfileSet`."""
    providers = list(providers) if providers is not None else usable_providers()
    profiles: list[VariantProfile] = []
    for name, path in paths.items():
        if path.suffix != ".onnx":
            continue
        start = time.perf_counter()
        found = profile_model(
            path,
            variant=name,
            family=digits.FAMILY,
            validation=validation,
            providers=providers,
            num_repeats=num_repeats,
            max_seconds=max_seconds,
        )
        for profile in found:
            logger.info(
                "%s on %s: accuracy %.4f, batch 1 %.4f ms, batch 32 %.4f ms, load %.1f ms, memory %s MB "
                "(%.1f s)",
                name,
                profile.device,
                profile.accuracy,
                profile.batch_latency_ms[1],
                profile.batch_latency_ms[32],
                profile.load_latency_ms,
                profile.peak_memory_mb,
                time.perf_counter() - start,
            )
        profiles.extend(found)
    return ProfileSet(
        source=_source_text(num_repeats=num_repeats, providers=providers),
        devices=[device_for_provider(p) for p in providers],
        slo_ms={digits.FAMILY: DIGITS_SLO_MS},
        variants=profiles,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train, export and profile the digits model family.")
    parser.add_argument("--out", default=str(SHIPPED_DIR), help="folder for the .onnx files and the test split")
    parser.add_argument("--profiles", default="profiles/digits.json", help="ProfileSet JSON to write")
    parser.add_argument("--no-profile", action="store_true",
                        help="only train and export (the committed profiles stay as measured)")
    parser.add_argument("--force", action="store_true", help="retrain even when the recipe is unchanged")
    parser.add_argument("--variants", nargs="*", help="only these variants (default: all)")
    parser.add_argument("--repeats", type=int, default=100, help="timed runs per batch size")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    start = time.perf_counter()
    variants = [digits.get_variant(n) for n in args.variants] if args.variants else digits.VARIANTS
    paths = build_models(args.out, variants=variants, force=args.force)
    if args.no_profile:
        logger.info("built %d models in %s in %.1f s", len(variants), args.out, time.perf_counter() - start)
        return
    profile_set = build_profiles(paths, validation=paths["digits-test"], num_repeats=args.repeats)
    save_profiles(profile_set, args.profiles, started=start)


def save_profiles(profile_set: ProfileSet, path: str | Path, *, started: float) -> None:
    """Write a family's measured profiles (the committed file) and say how long the build took."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    profile_set.save(path)
    logger.info("wrote %s (%d profiles) in %.1f s", path, len(profile_set.variants), time.perf_counter() - started)


if __name__ == "__main__":
    main()
