"""A worker's measurement of its own machine, against the committed profiles, and what a restart saves.

Run ``python -m bench.machines`` (``make bench-machines``, ~5 minutes, alone on the machine). Writes
``bench/results/machines.json``, ``machines.png`` and ``machine_shares.png`` and prints the JSON.

For each variant a real worker serves here (the digits family, and EfficientNet-Lite0/1/2 once ``make
models-efficientnet`` or ``make demo`` built them) and for one and two intra-op threads, it does what a
worker's first start does (`services.worker.executors.OnnxExecutor` loading the variant with
``measure``, into an empty `MeasurementCache`) ``STARTS`` times, then what a restart does (a new executor
on the last cache). It reports, per batch size, the measured latency over the committed profile's for
the same variant and device (``cpu-1t`` in ``profiles/digits.json`` and ``profiles/efficientnet-lite.json``,
``cpu-2t`` in ``profiles/proteus-fleet.json``): the median ratio and its spread over the starts; and the
seconds a first start spent loading and measuring against a restart's. In process: no broker, no
scheduler; the workers' measuring code itself.

Then, live (`bench.machine_shares`): a one-thread and a two-thread real worker that measured themselves,
served by each policy through Kafka, and in the simulator with the same announcements: the share of rows
each computed and SLO attainment (``machine_shares.png``; the JSON's ``serving``).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench import machine_shares
from bench.common import RESULTS_DIR, save_figure, write_result
from services.worker.executors import OnnxExecutor
from services.worker.self_measure import MeasurementCache
from shared.profiles.sources import load_profile_source
from shared.settings import Settings

STARTS = 3
THREADS = (1, 2)


def measure(models_dir: Path, variants: list[str], committed, threads: int, images: dict) -> dict[str, dict]:
    """Each variant: its ratios to the committed profile per batch size, first starts' and a restart's s."""
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="meridian-machines-") as scratch:
        for variant in variants:
            runs, first_s = [], []
            for start in range(STARTS):
                cache = MeasurementCache(Path(scratch) / f"{variant}-{threads}-{start}")
                began = time.perf_counter()
                executor = OnnxExecutor(models_dir, threads=threads, images=images, cache=cache)
                executor.load(variant, measure=True)
                first_s.append(time.perf_counter() - began)
                runs.append(executor.measured()[variant])
            began = time.perf_counter()
            restarted = OnnxExecutor(models_dir, threads=threads, images=images, cache=cache)
            restarted.load(variant, measure=True)
            restart_s = time.perf_counter() - began
            assert restarted.measured()[variant] == runs[-1], "a restart measured again"
            profile = committed.find(variant, executor.device)
            ratios = {}
            for batch in runs[0].batch_latency_ms:
                per_start = [run.batch_latency_ms[batch] / profile.batch_latency_ms[batch] for run in runs
                             if profile is not None and batch in run.batch_latency_ms
                             and batch in profile.batch_latency_ms]
                if per_start:
                    ratios[batch] = {"median": statistics.median(per_start), "min": min(per_start),
                                     "max": max(per_start)}
            out[variant] = {
                "device": executor.device, "machine": executor.machine.name,
                "committed_profile": profile is not None,
                "measured_ms": {b: statistics.median(r.batch_latency_ms[b] for r in runs if b in r.batch_latency_ms)
                                for b in runs[0].batch_latency_ms},
                "ratio_to_committed": ratios,
                "image_prepare_ms": runs[-1].image_prepare_ms,
                "first_start_s": {"median": statistics.median(first_s), "max": max(first_s)},
                "restart_s": restart_s,
            }
            print(f"{variant} on {executor.device}: first start {statistics.median(first_s):.2f} s, "
                  f"restart {restart_s:.3f} s, ratio at batch 1 {ratios.get(1, {}).get('median', float('nan')):.2f}",
                  flush=True)
    return out


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for axis, (device, variants) in zip(axes[0], results.items()):
        for variant, found in variants.items():
            ratios = found["ratio_to_committed"]
            if not ratios:
                continue
            batches = list(ratios)
            median = [ratios[b]["median"] for b in batches]
            low = [ratios[b]["median"] - ratios[b]["min"] for b in batches]
            high = [ratios[b]["max"] - ratios[b]["median"] for b in batches]
            axis.errorbar(batches, median, yerr=[low, high], marker="o", capsize=3, label=variant)
        axis.axhline(1.0, color="#888", linestyle="--", linewidth=1)
        axis.set_xscale("log", base=2)
        axis.set_ylim(bottom=0)
        axis.set_xlabel("batch size")
        axis.set_ylabel("self-measured / committed latency")
        axis.set_title(f"{device}: median and range of {STARTS} first starts", fontsize=9)
        axis.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.machines", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    settings = Settings()
    committed = load_profile_source("dir", settings)
    images = {p.variant: p.image_preprocessing for p in committed.variants if p.image_preprocessing is not None}
    variants = sorted({p.variant for p in committed.variants if (settings.models_dir / f"{p.variant}.onnx").is_file()})
    results = {f"cpu-{threads}t": measure(settings.models_dir, variants, committed, threads, images)
               for threads in THREADS}
    summary = {device: {
        "ratio_at_batch_1_median": statistics.median(v["ratio_to_committed"][1]["median"] for v in found.values()
                                                     if 1 in v["ratio_to_committed"]),
        "first_start_s_max": max(v["first_start_s"]["max"] for v in found.values()),
        "restart_s_max": max(v["restart_s"] for v in found.values())} for device, found in results.items()}
    plot(results, RESULTS_DIR / "machines.png")
    with tempfile.TemporaryDirectory(prefix="meridian-machine-shares-") as scratch:
        serving = machine_shares.run(Path(scratch))
    machine_shares.plot(serving, RESULTS_DIR / "machine_shares.png")
    write_result("machines", {"starts": STARTS, "variants": variants, "summary": summary, "devices": results,
                              "serving": serving})


if __name__ == "__main__":
    main()
