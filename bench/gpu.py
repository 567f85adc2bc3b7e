"""``make bench-gpu``: a real GPU worker measured against this machine's CPU, then serving real photographs.

For a machine with a GPU that onnxruntime's CUDA provider runs on (≤ 5 minutes):

1. **Profile**: EfficientNet-Lite0/1/2 (fp32, as built by ``make models-efficientnet``, and fp16 converted
   here by INFaaS' variant generation) and digits-cnn-l, each measured the way a worker's first start
   measures it (`services.worker.executors.OnnxExecutor` loading it with ``measure``): on CUDA, and on the
   CPU with every core it may use as intra-op threads. Per variant and batch size: both latencies and the
   CUDA-against-CPU speed-up; per model, fp16's latency over fp32's on CUDA (where fp16 pays, it is < 1);
   the GPU memory each variant held.
2. **Serve**: a minute of real photographs (one JPEG a query, all on Lite0) through Kafka, the INFaaS
   scheduler and one real worker on CUDA (the demo's photographs act, `services.demo.photos`), as Poisson
   arrivals at 0.6 times the capacity that worker measured (``capacity_qps``: the worker decodes each image
   on one thread before the batch runs, so decoding may bound it). Printed: SLO attainment, and how many
   answers equal Lite0 run in this process on the same file.

Where no CUDA GPU runs here it prints that it has not run and exits 2. ``--rehearse`` runs every step with
the CPU standing in for the GPU (one thread against all cores): a check of the bench itself, whose
speed-ups say nothing of any GPU. Writes ``bench/results/gpu.json`` and ``bench/results/gpu.png`` (the
speed-up per batch size, one line per variant).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS_DIR, save_figure, write_result
from schemas import MeasuredLatency
from services.demo import photos as photos_act
from services.stack import LocalStack
from services.worker.executors import OnnxExecutor
from services.worker.self_measure import MeasurementCache
from shared.modelzoo import efficientnet
from shared.onnx_runtime import CPU_PROVIDER, CUDA_PROVIDER, usable_providers
from shared.settings import REPO_ROOT, Settings

#: the share of the serving worker's measured capacity the minute of photographs is sent at
LOAD = 0.6
SERVE_S = 60.0
DIGITS_MODEL = REPO_ROOT / "profiles" / "digits" / "digits-cnn-l.onnx"


def capacity_qps(measured: MeasuredLatency, slo_ms: float) -> float:
    """One-image queries a second a worker serves at best by its measurement: over the batch sizes it
    measured whose decoding and run together take at most half the SLO, the most images per second
    (``b / (b * image_prepare_ms + latency(b))``); the worker decodes a batch's images one by one."""
    prepare_ms = measured.image_prepare_ms or 0.0
    best = 0.0
    for batch, latency_ms in measured.batch_latency_ms.items():
        took_ms = batch * prepare_ms + latency_ms
        if took_ms <= slo_ms / 2:
            best = max(best, batch / took_ms * 1000.0)
    return best


def models_here(models_dir: Path, out_dir: Path, provider: str) -> dict[str, Path]:
    """Variant name -> model file: the Lite models built here, their fp16 conversions (made in ``out_dir``
    on ``provider``) and digits-cnn-l, each linked into ``out_dir`` (the executors' models directory)."""
    from shared.modelzoo.profiler import static_input_shape
    from shared.modelzoo.variants import generate_variants
    from shared.onnx_runtime import make_session

    found: dict[str, Path] = {}
    for variant in efficientnet.VARIANTS:
        path = models_dir / f"{variant.name}.onnx"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: run `make models-efficientnet` first")
        found[variant.name] = path
        shape = static_input_shape(make_session(path, provider=CPU_PROVIDER))
        made = generate_variants(path, out_dir / "fp16", model_name=variant.name, input_shape=shape,
                                 precisions=("fp16",), optimization_levels=("all",), max_batches=(64,),
                                 providers=[provider])
        for generated in made.variants:
            found[f"{variant.name}-fp16"] = generated.path
        for skipped in made.skipped:
            print(f"no fp16 {variant.name} on {provider}: {skipped.reason}", flush=True)
    found["digits-cnn-l"] = DIGITS_MODEL
    for name, path in found.items():
        (out_dir / f"{name}.onnx").symlink_to(path.resolve())
    return found


def profile(out_dir: Path, variants: list[str], provider: str, threads: int) -> tuple[dict, dict[str, MeasuredLatency]]:
    """Each variant measured as a first start measures it, on ``provider`` with ``threads`` intra-op threads:
    the machine it found, and variant -> what was measured."""
    images = {v.name: efficientnet.preprocessing(v.image_size) for v in efficientnet.VARIANTS}
    executor = OnnxExecutor(out_dir, threads=threads, provider=provider, images=images,
                            cache=MeasurementCache(out_dir / f"measured-{provider}-{threads}"), max_batch=64)
    measured = {}
    for variant in variants:
        executor.load(variant, measure=True)
        measured[variant] = executor.measured()[variant]
        executor.unload(variant)
        print(f"{variant} on {executor.device}: "
              + ", ".join(f"b{b} {ms:.2f}" for b, ms in measured[variant].batch_latency_ms.items()) + " ms",
              flush=True)
    return executor.machine.model_dump(), measured


def speedups(gpu: dict[str, MeasuredLatency], cpu: dict[str, MeasuredLatency]) -> dict[str, dict]:
    """Per variant: both latencies per batch size and the CPU's over the GPU's where both measured it."""
    table = {}
    for variant, on_gpu in gpu.items():
        on_cpu = cpu[variant].batch_latency_ms
        table[variant] = {
            "gpu_ms": on_gpu.batch_latency_ms, "cpu_ms": on_cpu,
            "speedup": {b: round(on_cpu[b] / ms, 2) for b, ms in on_gpu.batch_latency_ms.items() if b in on_cpu},
            "gpu_memory_mb": on_gpu.device_memory_mb, "image_prepare_ms": on_gpu.image_prepare_ms}
    return table


def fp16_over_fp32(gpu: dict[str, MeasuredLatency]) -> dict[str, dict[int, float]]:
    """Per Lite model with an fp16 conversion: fp16's latency over fp32's per batch size, on the GPU."""
    ratios = {}
    for variant in efficientnet.VARIANTS:
        half, full = gpu.get(f"{variant.name}-fp16"), gpu[variant.name]
        if half is not None:
            ratios[variant.name] = {b: round(ms / full.batch_latency_ms[b], 3)
                                    for b, ms in half.batch_latency_ms.items() if b in full.batch_latency_ms}
    return ratios


def serve(root: Path, provider_name: str, rate: float) -> dict:
    """The photographs act at ``rate`` for `SERVE_S`, every query on Lite0, its worker on ``provider_name``."""
    with LocalStack(var_dir=root / "stack", kafka_port=29592, redis_port=26579, prometheus_port=29590) as stack:
        settings = photos_act.fields(stack.settings())
        with photos_act.running(stack.env, root / "logs", settings, metrics_port=29611,
                                provider=provider_name) as client:
            answers = photos_act.classify(client, settings, rate=rate, duration_s=SERVE_S, goals=(None,),
                                          model="efficientnet-lite0", seed=21)
    return {"rate_qps": round(rate, 2), "seconds": SERVE_S, "slo_ms": photos_act.SLO_MS, "sent": len(answers),
            **{key: round(sum(getattr(a, key) for a in answers) / len(answers), 4)
               for key in ("within_slo", "equal_in_process", "names_subject")}}


def plot(table: dict[str, dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6.5, 4))
    for variant, row in table.items():
        if row["speedup"]:
            axis.plot(list(row["speedup"]), list(row["speedup"].values()), marker="o", label=variant)
    axis.axhline(1.0, color="#888", linestyle="--", linewidth=1)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("batch size")
    axis.set_ylabel("CPU latency / GPU latency")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rehearse", action="store_true",
                        help="no GPU: the CPU (one thread) stands in for it, to check the bench itself")
    parser.add_argument("--cpu-threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="intra-op threads of the CPU baseline (default: every core this process may use)")
    args = parser.parse_args(argv)
    on_gpu = CUDA_PROVIDER in usable_providers()
    if not on_gpu and not args.rehearse:
        print("bench-gpu has not run: no GPU that onnxruntime's CUDA provider runs on here "
              f"(usable: {', '.join(usable_providers())}); `--rehearse` checks the bench on the CPU", flush=True)
        sys.exit(2)
    provider, provider_name = (CUDA_PROVIDER, "cuda") if on_gpu else (CPU_PROVIDER, "cpu")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="meridian-bench-gpu-") as tmp:
        root = Path(tmp)
        variants = list(models_here(Settings().models_dir, root, provider))
        gpu_machine, gpu = profile(root, variants, provider, threads=1)
        cpu_machine, cpu = profile(root, variants, CPU_PROVIDER, threads=args.cpu_threads)
        capacity = capacity_qps(gpu["efficientnet-lite0"], photos_act.SLO_MS)
        serving = serve(root, provider_name, LOAD * capacity)
    table = speedups(gpu, cpu)
    title = (f"{gpu_machine['name']} against {args.cpu_threads} threads of {cpu_machine['name']}" if on_gpu else
             f"REHEARSAL on the CPU: 1 thread standing in for a GPU, against {args.cpu_threads}")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    plot(table, title, RESULTS_DIR / "gpu.png")
    write_result("gpu", {
        "ran_on_gpu": on_gpu, "gpu": gpu_machine, "cpu": cpu_machine, "seconds": round(time.monotonic() - began, 1),
        "lite0_capacity_qps": round(capacity, 1), "serving": serving,
        "fp16_over_fp32_on_gpu": fp16_over_fp32(gpu), "variants": table})


if __name__ == "__main__":
    main()
