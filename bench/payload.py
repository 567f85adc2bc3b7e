"""``make bench-payload``: what real inputs cost on their way through Kafka, and a real vision worker live.

1. The scheduler's CPU per query for an image query (a JPEG of ~100 KB, OIP ``BYTES`` in the binary
   section) against a digits query (one 1x8x8 FP32 row, 256 B) at the same rate, both answered by
   workers that emulate their device (so only the path is measured, not the compute): the scheduler's CPU
   seconds over the run (the kernel's count) per query answered, and their ratio. Bytes through the
   broker per image query: what was produced for it (its query message, its share of the dispatched
   batches' messages, read back from the dispatch topic, and its result) over the client's payload.
2. Added latency of image queries at 20 and 100 q/s, p50 / p99: (result received - client send) less the
   compute and the wait in the scheduler's queue: what the three hops add (client to scheduler, scheduler
   to worker, worker to client), on a worker emulating ``g4dn-emu`` so that 100 q/s is below its capacity.
3. A real onnxruntime worker serving EfficientNet-Lite0 from the shipped photographs, the demo's third act
   (`services.demo.photos`) with every query on Lite0: its SLO attainment at a rate below its capacity;
   each photograph's answer against the same variant run in this process on the same image, and against
   the photograph's subject; one query of 64 photographs (the largest batch of the profile), its rows and
   bytes.

Writes ``bench/results/payload.json`` and draws ``bench/results/payload.png`` (CPU per query and added
latency, image against digits).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, CoreShares, save_figure, write_result
from schemas import Query, ResultStatus, wire
from services.demo import photos as photos_act
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.recording import read_range
from shared.modelzoo import photos
from shared.settings import Settings
from shared.sim.arrivals import poisson_arrivals
from shared.tensors import Inputs, encode_binary, encode_images

APPLICATIONS = {"photos": ["efficientnet-lite"], "digits": ["digits"]}
ENV = {"MERIDIAN_APPLICATIONS": json.dumps(APPLICATIONS)}
SLO_MS = {"photos": 500.0, "digits": 500.0}
MODEL = {"photos": "efficientnet-lite0", "digits": "digits-cnn-xs"}
#: JPEG quality of the image queries: the shipped photographs come to ~100 KB at it
QUALITY = 99
#: ... and of the one query of 64 photographs (~36 KB each), which a query's 4 MiB payload limit must hold
BATCH_QUALITY = 90
#: the emulated device of the image path's worker: one whose capacity (~250 q/s) leaves 100 q/s unqueued
IMAGE_DEVICE = "g4dn-emu"


def payloads(application: str, count: int) -> list[Inputs]:
    if application == "photos":
        return [encode_images([p.jpeg]) for p in photos.augmented(count, seed=5, quality=QUALITY)]
    rows = np.load(Settings().models_dir / "digits-test.npz")["x"].astype(np.float32)
    return [encode_binary(rows[k:k + 1]) for k in range(count)]


def send(client: MeridianClient, application: str, rate: float, duration_s: float, inputs: list[Inputs],
         seed: int) -> dict[str, float]:
    """Poisson arrivals; query id -> send time."""
    times = poisson_arrivals(rate, max(2, int(rate * duration_s)), np.random.default_rng(seed))
    run, sent, start = uuid.uuid4().hex[:6], {}, time.time()
    for index, offset in enumerate(times):
        delay = start + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        payload = inputs[index % len(inputs)]
        query = Query(query_id=f"{application}-{run}-{index}", application=application, model=MODEL[application],
                      slo_ms=SLO_MS[application], batch_size=1, inputs=payload.tensors, sent_at=time.time())
        sent[query.query_id] = client.send(query, payload.binary).sent_at
    client.flush()
    return sent


def added_ms(client: MeridianClient, sent: dict[str, float]) -> np.ndarray:
    """What the path adds to each answered query: client send to answer received, less its compute and its
    wait in the scheduler's queue (received to dispatched), so the hops alone."""
    added = []
    for query_id in sent:
        if query_id in client.results:
            result, received = client.results[query_id]
            stamps = result.timestamps
            if result.status is ResultStatus.OK:
                added.append((received - stamps.client_sent) - (stamps.compute_finished - stamps.compute_started)
                             - (stamps.dispatched - stamps.scheduler_received))
    return np.array(added) * 1000.0


def broker_bytes_per_query(settings: Settings, application: str, start_s: float, end_s: float, queries: int,
                           query_bytes: float) -> float:
    """Bytes produced per query in the window: its query, its share of the dispatch messages, its result."""
    dispatched = read_range(settings, lambda name: name.startswith(topics.DISPATCH_PREFIX), start_s, end_s + 5.0,
                            whole=False)
    ours = [len(value) for _, value in dispatched if application in json.loads(wire.unpack(value)[0]).get(
        "queries", [{}])[0].get("application", "")]
    answers = read_range(settings, [topics.results_topic(application)], start_s, end_s + 5.0, whole=False)
    return query_bytes + (sum(ours) + sum(len(value) for _, value in answers)) / max(queries, 1)


def path_cost(stack: LocalStack, launcher: LocalLauncher, rate: float, duration_s: float) -> dict[str, dict]:
    """Part 1 and 2: per application, the scheduler's CPU per query and the bytes per query at ``rate``; for
    images, the added latency at 20 and 100 q/s too."""
    scheduler = launcher.start_scheduler(metrics_port=29401, extra_env=ENV)
    launcher.start_worker("pay-emu-photos", variants=[MODEL["photos"]], emulate=IMAGE_DEVICE, metrics_port=29402,
                          extra_env=ENV)
    launcher.start_worker("pay-emu-digits", variants=[MODEL["digits"]], emulate="cpu-1t", metrics_port=29403,
                          extra_env=ENV)
    launcher.wait_for_workers(scheduler, 2, timeout_s=120)
    settings = stack.settings().model_copy(update={"applications": APPLICATIONS})
    measured: dict[str, dict] = {}
    with MeridianClient(settings, applications=list(APPLICATIONS)) as client:
        for application in ("digits", "photos"):
            inputs = payloads(application, 64)
            client.wait_for(send(client, application, 20.0, 3.0, inputs, seed=1), timeout_s=30)  # warm up
            shares = CoreShares({"scheduler": scheduler.popen.pid})
            start = time.time()
            sent = send(client, application, rate, duration_s, inputs, seed=2)
            client.wait_for(sent, timeout_s=60)
            cores, wall_s = shares.cores()
            answered = sum(1 for q in sent if q in client.results)
            payload = float(np.mean([len(i.binary) for i in inputs]))
            query_bytes = float(np.mean([len(wire.pack(b"{}" * 150, [i.binary])) for i in inputs]))
            measured[application] = {
                "rate_qps": rate, "sent": len(sent), "answered": answered,
                "scheduler_cpu_us_per_query": round(cores["scheduler"] * wall_s / max(answered, 1) * 1e6, 1),
                "payload_bytes": round(payload), "broker_bytes_per_query": round(broker_bytes_per_query(
                    settings, application, start, time.time(), len(sent), query_bytes))}
            print(f"{application} at {rate:g} q/s: {measured[application]}", flush=True)
        for image_rate in (20.0, 100.0):
            added = added_ms(client, send(client, "photos", image_rate, duration_s, payloads("photos", 64), seed=3))
            measured["photos"][f"added_ms_{image_rate:g}qps"] = {
                "p50": round(float(np.percentile(added, 50)), 2), "p99": round(float(np.percentile(added, 99)), 2)}
            print(f"image queries at {image_rate:g} q/s, added latency (ms): "
                  f"{measured['photos'][f'added_ms_{image_rate:g}qps']}", flush=True)
    launcher.stop_all()
    return measured


def real_vision(stack: LocalStack, log_dir: Path, rate: float, duration_s: float) -> dict:
    """Part 3: the demo's real photographs act (`services.demo.photos`), every query on Lite0, then one
    query of 64 photographs."""
    settings = photos_act.fields(stack.settings())
    with photos_act.running(stack.env, log_dir, settings, metrics_port=29411) as client:
        answers = photos_act.classify(client, settings, rate=rate, duration_s=duration_s, goals=(None,),
                                      model=MODEL["photos"], seed=9)
        big = [s.jpeg for s in photos.augmented(64, seed=11, quality=BATCH_QUALITY)]
        inputs = encode_images(big)
        query = Query(query_id=f"photos-64-{uuid.uuid4().hex[:6]}", application="photos", model=MODEL["photos"],
                      slo_ms=60_000.0, batch_size=64, inputs=inputs.tensors, sent_at=time.time())
        client.send(query, inputs.binary)
        client.flush()
        client.wait_for([query.query_id], timeout_s=60)
        largest = client.results.get(query.query_id, (None, 0.0))[0]
    reference = photos_act.InProcess(settings.models_dir)
    outcome = {"rate_qps": rate, "slo_ms": photos_act.SLO_MS, "sent": len(answers),
               **{key: round(sum(getattr(a, key) for a in answers) / len(answers), 4)
                  for key in ("within_slo", "equal_in_process", "names_subject")},
               "largest_batch": {"rows": 64, "bytes": len(inputs.binary),
                                 "status": largest.status.value if largest else "unanswered",
                                 "equal_in_process": bool(largest and largest.predictions
                                                          == reference.top1(MODEL["photos"], big))}}
    print(f"real vision worker at {rate:g} q/s: {outcome}", flush=True)
    return outcome


def plot(measured: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cpu, latency) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = ["digits", "photos"]
    cpu.bar(names, [measured[n]["scheduler_cpu_us_per_query"] for n in names], color=["#888", "#3a7"])
    cpu.set_ylabel("scheduler CPU per query (µs)")
    cpu.set_title(f"at {measured['photos']['rate_qps']:g} q/s: 256 B row vs "
                  f"{measured['photos']['payload_bytes'] / 1000:.0f} KB JPEG", fontsize=9)
    rates = [k for k in measured["photos"] if k.startswith("added_ms_")]
    x = np.arange(len(rates))
    latency.bar(x - 0.2, [measured["photos"][k]["p50"] for k in rates], 0.4, label="p50")
    latency.bar(x + 0.2, [measured["photos"][k]["p99"] for k in rates], 0.4, label="p99")
    latency.set_xticks(x, [k.removeprefix("added_ms_") for k in rates])
    latency.set_ylabel("added latency of an image query (ms)")
    latency.legend()
    for axis in (cpu, latency):
        axis.set_ylim(bottom=0)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.payload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each measured load")
    parser.add_argument("--rate", type=float, default=50.0, help="q/s of the CPU-per-query comparison")
    parser.add_argument("--vision-rate", type=float, default=8.0, help="q/s offered to the real vision worker")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="meridian-bench-") as tmp:
        with LocalStack(var_dir=Path(tmp), kafka_port=29492, redis_port=26479, prometheus_port=29490) as stack:
            with LocalLauncher(stack.env, Path(tmp) / "logs") as launcher:
                measured = path_cost(stack, launcher, args.rate, args.duration)
            vision = real_vision(stack, Path(tmp) / "logs" / "photos", args.vision_rate, args.duration)
    digits, images = measured["digits"], measured["photos"]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    plot(measured, RESULTS_DIR / "payload.png")
    path = write_result("payload", {
        "scheduler_cpu_ratio_image_to_digits": round(images["scheduler_cpu_us_per_query"]
                                                     / digits["scheduler_cpu_us_per_query"], 3),
        "broker_bytes_over_payload_image": round(images["broker_bytes_per_query"] / images["payload_bytes"], 3),
        "path": measured, "real_vision": vision})
    print(path.read_text(), flush=True)


if __name__ == "__main__":
    main()
