"""Load generator: produces queries with Poisson, Gamma or trace-replay arrivals and reports results.

Produces ``meridian.queries``; consumes ``meridian.results``. Inputs are real rows from a ``.npz``
(keys ``x``, ``y``; the digits test split by default) or none for emulated devices.

Run: ``python -m services.loadgen --rate 50 --duration 30 --application digits --model digits``
"""
from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path

import numpy as np

from schemas import Query, Result
from services.loadgen.summary import LoadSummary, summarize
from shared import metrics
from shared.adapters.client import MeridianClient
from shared.settings import Settings
from shared.sim.arrivals import gamma_arrivals, load_trace_timestamps, poisson_arrivals, trace_arrivals
from shared.tensors import encode_binary


def arrival_times(args: argparse.Namespace, rng: np.random.Generator) -> np.ndarray:
    count = max(2, int(args.rate * args.duration))
    if args.arrival == "poisson":
        return poisson_arrivals(args.rate, count, rng)
    if args.arrival == "gamma":
        return gamma_arrivals(args.rate, count, rng, cv=args.cv)
    stamps = load_trace_timestamps(args.trace)
    return trace_arrivals(stamps, args.rate, min(count, len(stamps)))


def run(args: argparse.Namespace, settings: Settings) -> LoadSummary:
    rng = np.random.default_rng(args.seed)
    rows = np.load(args.inputs)["x"].astype(np.float32) if args.inputs else None
    times = arrival_times(args, rng)
    sent: dict[str, tuple[float, float]] = {}
    run_id = uuid.uuid4().hex[:8]
    def observe(result: Result, received: float) -> None:
        if result.query_id in sent:
            metrics.CLIENT_LATENCY.labels(args.application, result.status.value).observe(
                received - sent[result.query_id][0])

    with MeridianClient(settings, applications=[args.application], on_result=observe) as client:
        start = time.time()
        for index, offset in enumerate(times):
            delay = start + offset - time.time()
            if delay > 0:
                time.sleep(delay)
            inputs = None
            if rows is not None:
                inputs = encode_binary(rows[rng.integers(0, len(rows), size=args.batch_size)])
            query = Query(query_id=f"{run_id}-{index}", application=args.application, model=args.model,
                          slo_ms=args.slo_ms, accuracy_floor=args.accuracy_floor, batch_size=args.batch_size,
                          inputs=inputs and inputs.tensors, sent_at=time.time())
            query = client.send(query, inputs.binary if inputs else b"")
            sent[query.query_id] = (query.sent_at, query.slo_ms)
            metrics.CLIENT_QUERIES_SENT.labels(args.application).inc()
        client.flush()
        duration = time.time() - start
        client.wait_for(sent, timeout_s=args.drain_s)
        return summarize(sent, client.results, client.duplicates, duration)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    default_inputs = Settings().models_dir / "digits-test.npz"
    parser = argparse.ArgumentParser(prog="python -m services.loadgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50.0, help="mean queries per second")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of sending")
    parser.add_argument("--arrival", choices=["poisson", "gamma", "trace"], default="poisson")
    parser.add_argument("--cv", type=float, default=2.0, help="coefficient of variation of Gamma gaps")
    parser.add_argument("--trace", type=Path, help="CSV with a TIMESTAMP column (e.g. the Azure LLM trace)")
    parser.add_argument("--application", default="digits")
    parser.add_argument("--model", default="digits", help="model family or a named variant")
    parser.add_argument("--slo-ms", type=float, default=50.0)
    parser.add_argument("--accuracy-floor", type=float, default=None)
    parser.add_argument("--batch-size", type=int, default=1, help="rows per query")
    parser.add_argument("--inputs", type=Path, default=default_inputs, help=".npz with x rows; '' for none")
    parser.add_argument("--no-inputs", dest="inputs", action="store_const", const=None)
    parser.add_argument("--drain-s", type=float, default=15.0, help="how long to wait for the last results")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only the JSON summary")
    args = parser.parse_args(argv)
    if args.arrival == "trace" and args.trace is None:
        parser.error("--arrival trace needs --trace FILE")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings()
    metrics.serve_metrics(settings.loadgen_metrics_port, settings.bind_host)
    metrics.CLIENT_QUERIES_SENT.labels(args.application)
    summary = run(args, settings)
    text = json.dumps(summary.model_dump(), indent=2)
    if args.json:
        print(text)
        return
    print(f"Meridian loadgen: {args.arrival} arrivals at {args.rate:g} q/s for {args.duration:g} s, "
          f"application {args.application!r}, model {args.model!r}, SLO {args.slo_ms:g} ms")
    print(text)


if __name__ == "__main__":
    main()
