"""Generate a RAMSIS policy set offline and write it to Redis (and/or a JSON file).

Run::

    python -m services.ramsis_generate --profiles profiles/digits.json --family digits --slo-ms 1 \\
        --workers 4 8 --min-rate 10000 --max-rate 400000 --num-rates 10 \\
        --redis-url redis://localhost:6379/0

One policy per (K, load) of the grid, then bisection until adjacent policies' expected accuracies
differ by less than ``--threshold``; a progress bar counts the solves. The set is stored under
``--name`` (default ``<family>:<slo>ms``) by `RedisPolicyStore`.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from shared.adapters.ramsis_store import RedisPolicyStore
from shared.profiles.format import ProfileSet
from shared.ramsis.arrivals import ArrivalProcess
from shared.ramsis.generator import PolicyGenerator, generate_policy_set
from shared.ramsis.policy import RamsisPolicy
from shared.ramsis.problem import build_problem, quantile_profiles


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.ramsis_generate", description=__doc__.split("\n")[0])
    parser.add_argument("--profiles", type=Path, required=True, help="profile set JSON (profiles/*.json)")
    parser.add_argument("--family", required=True, help="model family whose variants compete")
    parser.add_argument("--device", help="worker type (default: the family's only device)")
    parser.add_argument("--slo-ms", type=float, help="latency SLO (default: the profile set's for the family)")
    parser.add_argument("--workers", type=int, nargs="+", required=True, help="worker counts K to cover")
    parser.add_argument("--min-rate", type=float, required=True, help="lowest load of the grid, QPS")
    parser.add_argument("--max-rate", type=float, required=True, help="highest load of the grid, QPS")
    parser.add_argument("--num-rates", type=int, default=10, help="initial grid points (default 10)")
    parser.add_argument("--threshold", type=float, default=0.01,
                        help="max expected-accuracy gap between adjacent policies (default 0.01)")
    parser.add_argument("--arrivals", choices=["poisson", "gamma"], default="poisson")
    parser.add_argument("--cv", type=float, default=1.0, help="gap coefficient of variation for gamma")
    parser.add_argument("--discretization", choices=["fixed", "model"], default="fixed")
    parser.add_argument("--delta", type=int, default=100, help="FLD bins Δ (default 100)")
    parser.add_argument("--max-queue", type=int, default=32, help="N_w (default 32)")
    parser.add_argument("--batching", choices=["maximal", "variable"], default="maximal")
    parser.add_argument("--quantile", type=float, default=0.95,
                        help="latency quantile of the measured samples (default p95; 0 keeps the profile as is)")
    parser.add_argument("--redis-url", help="write the set here, e.g. redis://localhost:6379/0")
    parser.add_argument("--prefix", default="meridian:", help="Redis key prefix")
    parser.add_argument("--name", help="policy-set name (default <family>:<slo>ms)")
    parser.add_argument("--output", type=Path, help="also write the set to this JSON file")
    args = parser.parse_args(argv)
    if args.redis_url is None and args.output is None:
        parser.error("give --redis-url and/or --output")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    profiles = ProfileSet.load(args.profiles)
    if args.quantile:
        profiles = quantile_profiles(profiles, quantile=args.quantile)
    slo_ms = args.slo_ms if args.slo_ms is not None else profiles.slo_ms[args.family]
    problem = build_problem(
        profiles, slo_ms=slo_ms, family=args.family, device=args.device, max_queue=args.max_queue,
        discretization=args.discretization, delta=args.delta, batching=args.batching,
    )
    generator = PolicyGenerator(problem, arrivals=ArrivalProcess(args.arrivals, cv=args.cv))
    rates = np.linspace(args.min_rate, args.max_rate, args.num_rates)
    print(f"models {list(problem.models)} (pruned {list(problem.pruned)}), {problem.num_states} states")
    with tqdm(total=len(rates) * len(set(args.workers)), unit="policy") as bar:
        def progress(policy: RamsisPolicy, remaining: int) -> None:
            bar.total = bar.n + 1 + remaining
            bar.set_postfix(K=policy.workers, qps=f"{policy.rate_qps:.0f}", acc=f"{policy.expected_accuracy:.4f}")
            bar.update(1)

        policies = generate_policy_set(
            generator, workers=args.workers, rates_qps=rates, threshold=args.threshold, on_policy=progress
        )
    for k in policies.workers:
        spacing = policies.max_spacing(k)
        note = "" if spacing < args.threshold else f"  (above --threshold {args.threshold}: bisection hit its floor)"
        print(f"K={k}: {len(policies.for_workers(k))} policies, max adjacent accuracy gap {spacing:.4f}{note}")
    name = args.name or f"{args.family}:{slo_ms:g}ms"
    if args.output is not None:
        args.output.write_text(policies.to_json() + "\n")
        print(f"wrote {args.output}")
    if args.redis_url is not None:
        import redis

        RedisPolicyStore(redis.Redis.from_url(args.redis_url), prefix=args.prefix).save(name, policies)
        print(f"stored {len(policies)} policies as {name!r} at {args.redis_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
