"""The benchmark fleet's profiles: two measured CPU device types and one emulated accelerator.

Run from the repository root (needs the ONNX files of ``var/models``, built by ``shared.modelzoo``, and
the Kairos authors' measured data of the materials folder, ``Settings.kairos_data_dir``)::

    python -m shared.proteus.fleet_profiles --models var/models --kairos-data ../shared/data/kairos --out profiles/proteus-fleet.json

The file holds only the device types the project's own profiles lack, for the variants of
``profiles/digits.json`` and ``profiles/efficientnet-lite.json`` (``cpu-1t``, measured here):

- ``cpu-2t``: **measured** on this machine by `shared.modelzoo.profiler` with 2 intra-op threads;
  accuracy, peak memory and what the model takes (input shape, image preprocessing, the time to prepare
  an image) are copied from the ``cpu-1t`` profile of the same ONNX file (same model);
- ``g4dn-emu``: **emulated**. Its batch-``b`` latency is the measured ``cpu-1t`` latency times
  ``r(b)``, the geometric mean over the five Kairos models of (mean latency on g4dn.xlarge) / (mean
  latency on t3.xlarge) at Kairos batch ``10 b`` (`kairos_speed_ratio`, the Kairos authors' measured
  data in ``../shared/data/kairos``). So the ratio between the two instance types is real data; reading
  one vCPU of this machine as a t3.xlarge and mapping one image to ten recommendation rows are the
  assumptions. The result is GPU-like: r(1) = 0.65, r(64) = 0.19, so batching pays off far more than
  on the CPUs. Preparing an image stays as measured on ``cpu-1t``: the host's CPU decodes it.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

#: the emulated accelerator and the two Kairos instance types whose latency ratio defines it
EMULATED_DEVICE = "g4dn-emu"
RATIO_FAST, RATIO_BASE = "g4dn.xlarge", "t3.xlarge"
#: Kairos rows per image when reading the authors' batch axis (their grid is 10..1000)
KAIROS_ROWS_PER_ITEM = 10
_REPO = Path(__file__).resolve().parents[2]
BASE_PROFILES = (_REPO / "profiles" / "digits.json", _REPO / "profiles" / "efficientnet-lite.json")


def kairos_speed_ratio(batch_sizes: Sequence[int], kairos_data_dir: Path, *, fast: str = RATIO_FAST,
                       base: str = RATIO_BASE) -> dict[int, float]:
    """Geometric-mean latency ratio ``fast / base`` over the Kairos models, per batch size.

    ``kairos_data_dir``: the folder of the Kairos authors' files (the caller's `Settings.kairos_data_dir`).

    Examples
    --------
    >>> from shared.settings import Settings
    >>> r = kairos_speed_ratio([1, 64], Settings().kairos_data_dir)
    >>> 0.5 < r[1] < 1.0 and r[64] < 0.3
    True
    """
    from shared.profiles.kairos import load_kairos_profiles

    kairos = load_kairos_profiles(kairos_data_dir)
    models = sorted({p.variant for p in kairos.variants})
    ratio = {}
    for b in batch_sizes:
        logs = [np.log(kairos.latency_ms(m, fast, KAIROS_ROWS_PER_ITEM * b) / kairos.latency_ms(m, base, KAIROS_ROWS_PER_ITEM * b))
                for m in models]
        ratio[int(b)] = float(np.exp(np.mean(logs)))
    return ratio


def emulate(profile: VariantProfile, ratio: dict[int, float], device: str = EMULATED_DEVICE) -> VariantProfile:
    """``profile`` scaled batch by batch by ``ratio`` onto ``device`` (no samples: not measured)."""
    latency = {b: round(ms * ratio[b], 5) for b, ms in profile.batch_latency_ms.items() if b in ratio}
    return profile.model_copy(update={"device": device, "batch_latency_ms": latency, "latency_samples_ms": None,
                                      "max_batch": max(latency), "measured": False})


def measure_cpu2t(base: VariantProfile, model: Path, batch_sizes: Sequence[int]) -> VariantProfile:
    from shared.modelzoo.profiler import profile_model
    from shared.onnx_runtime import CPU_PROVIDER

    (measured,) = profile_model(model, variant=base.variant, family=base.family, providers=[CPU_PROVIDER],
                                batch_sizes=batch_sizes, intra_op_threads=2, num_warmup=2, num_repeats=12,
                                num_rounds=4, max_seconds=6.0, num_loads=1, measure_memory=False)
    return measured.model_copy(update={"accuracy": base.accuracy, "peak_memory_mb": base.peak_memory_mb,
                                       **_image_fields(base)})


def _image_fields(base: VariantProfile) -> dict:
    """What the cpu-1t profile says of the model's input: the same ONNX file takes the same rows, and
    preparing an image is one thread's work whatever the device (one vCPU's time, as measured there)."""
    return {"input_shape": base.input_shape, "input_dtype": base.input_dtype,
            "image_preprocessing": base.image_preprocessing, "image_prepare_ms": base.image_prepare_ms}


def build(models_dir: Path, batch_sizes: Sequence[int], kairos_data_dir: Path) -> ProfileSet:
    import onnxruntime

    from shared.modelzoo.profiler import CPU_PRICE_PER_VCPU_HOUR, GPU_PRICE_PER_HOUR

    bases = [p for path in BASE_PROFILES for p in ProfileSet.load(path).variants if p.device == "cpu-1t"]
    ratio = kairos_speed_ratio(sorted({b for p in bases for b in p.batch_latency_ms}), kairos_data_dir)
    variants = [measure_cpu2t(p, models_dir / f"{p.variant}.onnx", batch_sizes) for p in bases]
    variants += [emulate(p, ratio) for p in bases]
    ratio_text = ", ".join(f"b{b}: {r:.3f}" for b, r in ratio.items())
    source = (
        "Built by shared.proteus.fleet_profiles for the variants of profiles/digits.json and "
        "profiles/efficientnet-lite.json. cpu-2t: MEASURED by shared.modelzoo.profiler on this machine "
        f"(2 cores shared with other processes; onnxruntime {onnxruntime.__version__}, CPUExecutionProvider, "
        "2 intra-op threads, zero-valued or validation inputs): batch_latency_ms is the median of up to 12 "
        "timed run_batch calls per batch size in 4 rounds; accuracy, peak_memory_mb, the input's shape and "
        "image preprocessing and image_prepare_ms (one thread's work) copied from the cpu-1t profile of the "
        "same ONNX file. g4dn-emu: EMULATED, not measured: latency(b) = measured cpu-1t latency(b) x r(b) "
        "(image_prepare_ms as on cpu-1t: the host's CPU decodes), r(b) = geometric mean over the 5 Kairos "
        "models (ncf, rm2, wnd, mtwnd, "
        "dien) of mean latency on g4dn.xlarge / mean latency on t3.xlarge at Kairos batch 10*b, from the "
        f"Kairos authors' measured data (../shared/data/kairos/latency_mean.json); r = {ratio_text}. "
        "Assumptions: one vCPU here stands for a t3.xlarge and one image for 10 recommendation rows. "
        f"Prices are assumptions: cpu-2t = 2 x {CPU_PRICE_PER_VCPU_HOUR} $/h (two vCPUs of an AWS c5.large), "
        f"g4dn-emu = {GPU_PRICE_PER_HOUR} $/h (AWS g4dn.xlarge on demand)."
    )
    devices = [DeviceType(name="cpu-2t", kind="cpu", price_per_hour=2 * CPU_PRICE_PER_VCPU_HOUR),
               DeviceType(name=EMULATED_DEVICE, kind="gpu", price_per_hour=GPU_PRICE_PER_HOUR)]
    return ProfileSet(source=source, devices=devices, variants=variants)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=_REPO / "var" / "models")
    parser.add_argument("--out", type=Path, default=_REPO / "profiles" / "proteus-fleet.json")
    parser.add_argument("--kairos-data", type=Path, required=True,
                        help="the Kairos authors' files (Settings.kairos_data_dir: <materials>/data/kairos)")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    args = parser.parse_args(argv)
    build(args.models, [int(b) for b in args.batch_sizes.split(",")], args.kairos_data).save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()


def synthetic_profiles(
    family_sizes: Sequence[int] = (5, 4, 4, 5, 4, 5, 12, 3, 4),
    *,
    devices: Sequence[str] = ("cpu", "gpu-a", "gpu-b"),
    seed: int = 0,
) -> ProfileSet:
    """A SYNTHETIC profile set of the paper's size (9 families, 46 variants, 3 device types), for timing.

    Only for measuring how the MILP scales: nothing here is measured. Per family, variant ``k`` of
    ``n`` has normalized accuracy rising from about 0.8 to 1 and a batch-1 CPU latency rising
    log-uniformly over 2..300 ms; the two accelerators run 2-8x faster at batch 1 with flatter batch
    scaling; batches 1..16.
    """
    rng = np.random.default_rng(seed)
    variants = []
    batches = (1, 2, 4, 8, 16)
    speedups = {d: (1.0, 1.0) if i == 0 else (rng.uniform(2, 8), rng.uniform(0.35, 0.6)) for i, d in enumerate(devices)}
    for f, size in enumerate(family_sizes):
        accuracy = np.sort(rng.uniform(0.8, 1.0, size))
        accuracy /= accuracy[-1]
        latency = np.sort(np.exp(rng.uniform(np.log(2.0), np.log(300.0), size)))
        for k in range(size):
            for device, (speedup, exponent) in speedups.items():
                growth = 0.9 if device == devices[0] else exponent
                table = {b: round(latency[k] / speedup * b**growth, 4) for b in batches}
                variants.append(VariantProfile(variant=f"fam{f}-v{k}", family=f"fam{f}", device=device,
                                               accuracy=float(accuracy[k]), batch_latency_ms=table,
                                               max_batch=batches[-1], measured=False))
    return ProfileSet(
        source=f"SYNTHETIC (shared.proteus.fleet_profiles.synthetic_profiles, seed {seed}): for MILP timing only",
        devices=[DeviceType(name=d, kind="cpu" if i == 0 else "gpu", price_per_hour=0.0) for i, d in enumerate(devices)],
        slo_ms={f"fam{f}": 300.0 for f in range(len(family_sizes))},
        variants=variants,
    )
