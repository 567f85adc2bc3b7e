"""``make bench-pipeline``: what the Kafka pipeline adds over model compute, and the scheduler's ceiling.

1. Added latency at 200 queries/s with two real onnxruntime workers: per query, (result received by the
   client - client send) - (compute finished - compute started); p50 and p99.
2. Scheduler ceiling: offered rates rise step by step with workers that emulate the measured CPU profile
   (no payload), until the scheduler no longer keeps up: a rate is sustained when answers arrive at >= 95%
   of the rate actually sent and queries entering in the last quarter of the step waited in the scheduler
   no longer (p50) than 50 ms. ``scheduler_max_qps`` is the highest sustained rate.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.common import write_result
from schemas import Query, ResultStatus
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.profiles import ProfileSet
from shared.settings import Settings
from shared.sim.arrivals import poisson_arrivals
from shared.tensors import encode


def send_poisson(client: MeridianClient, rate: float, duration_s: float, *, rows: np.ndarray | None,
                 rng: np.random.Generator, model: str) -> tuple[dict[str, float], float]:
    """Send at ``rate``; returns query id -> send time, and the send duration."""
    times = poisson_arrivals(rate, max(2, int(rate * duration_s)), rng)
    run = uuid.uuid4().hex[:6]
    sent: dict[str, float] = {}
    start = time.time()
    for index, offset in enumerate(times):
        delay = start + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        inputs = encode(rows[rng.integers(0, len(rows), size=1)]) if rows is not None else None
        query = Query(query_id=f"{run}-{index}", application="digits", model=model, slo_ms=1000.0,
                      batch_size=1, inputs=inputs, sent_at=time.time())
        client.send(query)
        sent[query.query_id] = query.sent_at
    client.flush()
    return sent, time.time() - start


def warm_up(client: MeridianClient, *, rows: np.ndarray | None, model: str) -> None:
    """Until every consumer group has joined, the first answers take seconds: not what is measured."""
    for attempt in range(10):
        sent, _ = send_poisson(client, 50.0, 2.0, rows=rows, rng=np.random.default_rng(100 + attempt), model=model)
        client.wait_for(sent, timeout_s=30)
        slowest = max(client.results[q][1] - sent[q] for q in sent if q in client.results)
        if slowest < 0.2:
            return


def added_latency(stack: LocalStack, launcher: LocalLauncher, variants: list[str], rows: np.ndarray,
                  duration_s: float) -> dict[str, float]:
    scheduler = launcher.start_scheduler(metrics_port=29301)
    for index in range(2):
        launcher.start_worker(f"bench-real-{index}", variants=variants[:1], metrics_port=29302 + index)
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    with MeridianClient(stack.settings()) as client:
        warm_up(client, rows=rows, model=variants[0])
        sent, _ = send_poisson(client, 200.0, duration_s, rows=rows, rng=np.random.default_rng(2), model=variants[0])
        client.wait_for(sent, timeout_s=60)
        added = []
        for query_id in sent:
            if query_id not in client.results:
                continue
            result, received = client.results[query_id]
            stamps = result.timestamps
            if result.status is ResultStatus.OK:
                added.append((received - stamps.client_sent) - (stamps.compute_finished - stamps.compute_started))
    launcher.stop_all()
    added_ms = np.array(added) * 1000.0
    return {"added_latency_ms_p50": round(float(np.percentile(added_ms, 50)), 3),
            "added_latency_ms_p99": round(float(np.percentile(added_ms, 99)), 3),
            "added_latency_answered": len(added), "added_latency_sent": len(sent)}


def scheduler_ceiling(stack: LocalStack, launcher: LocalLauncher, variant: str, rates: list[float],
                      step_s: float) -> tuple[float, list[dict[str, float]]]:
    scheduler = launcher.start_scheduler(metrics_port=29311)
    for index in range(2):
        launcher.start_worker(f"bench-emu-{index}", variants=[variant], metrics_port=29312 + index,
                              emulate="cpu-1t")
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    steps, best = [], 0.0
    with MeridianClient(stack.settings()) as client:
        for index, rate in enumerate(rates):
            if index == 0:
                warm_up(client, rows=None, model=variant)
            sent, duration = send_poisson(client, rate, step_s, rows=None, rng=np.random.default_rng(10 + index),
                                          model=variant)
            client.wait_for(sent, timeout_s=30)
            answered = [client.results[q][0] for q in sent if q in client.results]
            ok = [r for r in answered if r.status is ResultStatus.OK]
            cutoff = min(sent.values()) + 0.75 * duration
            late_waits = [r.timestamps.dispatched - r.timestamps.scheduler_received for r in ok
                          if r.timestamps.client_sent >= cutoff]
            step = {"offered_qps": rate, "sent_qps": round(len(sent) / duration, 1),
                    "answered_ok_qps": round(len(ok) / duration, 1),
                    "late_queue_wait_ms_p50": round(float(np.median(late_waits)) * 1000.0, 2) if late_waits else None}
            sustained = (len(ok) >= 0.95 * len(sent) and late_waits and step["late_queue_wait_ms_p50"] <= 50.0)
            step["sustained"] = bool(sustained)
            steps.append(step)
            print(step, flush=True)
            if not sustained:
                break
            best = step["sent_qps"]
    launcher.stop_all()
    return best, steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of the 200 q/s run")
    parser.add_argument("--step", type=float, default=8.0, help="seconds per rate step")
    parser.add_argument("--rates", default="500,1000,1500,2000,3000,4000,5000,6000")
    args = parser.parse_args(argv)
    settings = Settings()
    profiles = ProfileSet.load(settings.profiles_dir / "digits.json")
    variants = [p.variant for p in sorted(profiles.variants, key=lambda p: p.latency_ms(1))]
    rows = np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="meridian-bench-") as tmp:
        with LocalStack(var_dir=Path(tmp), kafka_port=29092, redis_port=26379) as stack:
            with LocalLauncher(stack.env, Path(tmp) / "logs") as launcher:
                latency = added_latency(stack, launcher, variants, rows, args.duration)
                best, steps = scheduler_ceiling(stack, launcher, variants[0],
                                                [float(r) for r in args.rates.split(",")], args.step)
    write_result("pipeline", {
        **{k: latency[k] for k in ("added_latency_ms_p50", "added_latency_ms_p99")},
        "scheduler_max_qps": best,
        "targets": {"added_latency_ms_p50": 3.0, "added_latency_ms_p99": 10.0, "scheduler_max_qps": 3000},
        "details": {"added_latency": latency, "ceiling_steps": steps, "variant": variants[0],
                    "workers": "2 real onnxruntime (latency); 2 emulating cpu-1t from its measured profile (ceiling)"},
    })


if __name__ == "__main__":
    main()
