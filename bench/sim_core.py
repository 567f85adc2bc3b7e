"""The one engine's speed, against the separate engines it replaced, on one fixed workload.

Run ``python -m bench.sim_core`` (``make bench-sim-core``). Writes ``bench/results/sim_core.json`` and
``bench/results/sim_core.png`` and prints the JSON.

Workload: 100,000 rm2 queries (DeepRecSys sizes, Poisson at ``RATE_QPS``) on 8 Kairos-profiled workers,
under FCFS and under Kairos. The new engine runs here; the old one runs in a subprocess from a temporary
git worktree of ``OLD_COMMIT`` (the last commit with a simulator loop of its own), on the very same
arrays. Each side is timed around its ``simulate`` call only, best of ``REPEATS``, interleaved.
``same_core_as_live`` compares the class the live scheduler builds (`make_core`) with the class the
engine drives: never a literal.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS_DIR, write_result
from services.scheduler.app import make_core
from shared.catalogue import Catalogue
from shared.policy.registry import make_dispatch
from shared.profiles.kairos import load_kairos_profiles
from shared.settings import Settings
from shared.sim import Workload, deeprecsys_sizes, make_fleet, poisson_arrivals, simulate
from shared.sim.engine import Simulation

OLD_COMMIT = "e3ee05b"
NUM_QUERIES = 100_000
RATE_QPS = 60.0
FLEET = {"g4dn.xlarge": 2, "c5n.2xlarge": 2, "r5n.large": 4}
MODEL = "rm2"
POLICIES = ("fcfs", "kairos")
REPEATS = 2
SEED = 0

#: run by the old commit's interpreter path: its own engine, the same arrays
OLD_RUNNER = """
import json, sys, time
import numpy as np
from shared.profiles.kairos import load_kairos_profiles
from shared.policy.registry import make_dispatch
from shared.sim import ProfileServiceModel, Workload, make_fleet, simulate
arrays = np.load(sys.argv[1])
fleet_counts, model, policy_name, data_dir = json.loads(sys.argv[2])
profiles = load_kairos_profiles(data_dir)
work = Workload(arrays["arrival_s"], arrays["batch_size"], model, profiles.slo_ms[model], (model,))
fleet = make_fleet(fleet_counts, [model], max_batch=1000)
policy = make_dispatch(policy_name, profiles)
started = time.perf_counter()
result = simulate(work, fleet, policy, ProfileServiceModel(profiles), seed=0)
wall = time.perf_counter() - started
print(json.dumps({"wall_s": wall, "within_slo": result.fraction_within_slo()}))
"""


def workload(profiles) -> Workload:
    rng = np.random.default_rng(SEED)
    sizes = deeprecsys_sizes(NUM_QUERIES, rng)
    return Workload(poisson_arrivals(RATE_QPS, NUM_QUERIES, rng), sizes, MODEL, profiles.slo_ms[MODEL], (MODEL,))


def run_new(work: Workload, profiles, policy_name: str) -> dict[str, float]:
    fleet = make_fleet(FLEET, [MODEL], max_batch=1000)
    started = time.perf_counter()
    result = simulate(work, fleet, make_dispatch(policy_name, profiles), profiles, seed=0)
    wall = time.perf_counter() - started
    return {"wall_s": wall, "within_slo": result.fraction_within_slo()}


def run_old(tree: Path, arrays: Path, policy_name: str, data_dir: Path) -> dict[str, float]:
    args = json.dumps([FLEET, MODEL, policy_name, str(data_dir)])
    out = subprocess.run([sys.executable, "-c", OLD_RUNNER, str(arrays), args], cwd=tree, check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def same_core_as_live(profiles, work: Workload) -> bool:
    catalogue = Catalogue(profiles, {MODEL: [MODEL]})
    live = make_core(Settings(scheduler_policy="fcfs"), catalogue)
    simulated = Simulation(work, make_fleet(FLEET, [MODEL], max_batch=1000), make_dispatch("fcfs", profiles),
                           profiles)
    return type(live) is type(simulated.core)


def plot(table: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(table))
    ax.bar(x - 0.2, [v["old_queries_per_wall_s"] for v in table.values()], 0.4, label=f"old engines ({OLD_COMMIT})")
    ax.bar(x + 0.2, [v["queries_per_wall_s"] for v in table.values()], 0.4, label="one core + one engine")
    ax.set_xticks(x, list(table))
    ax.set_ylabel("simulated queries per wall second")
    ax.set_title(f"{NUM_QUERIES:,} queries, {sum(FLEET.values())} workers")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    settings = Settings()
    data_dir = settings.kairos_data_dir
    profiles = load_kairos_profiles(data_dir)
    work = workload(profiles)
    checkout = Path(__file__).resolve().parents[1]
    per_policy: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree, arrays = Path(tmp) / "old", Path(tmp) / "workload.npz"
        np.savez(arrays, arrival_s=work.arrival_s, batch_size=work.batch_size)
        subprocess.run(["git", "-C", str(checkout), "worktree", "add", "--detach", str(tree), OLD_COMMIT],
                       check=True, capture_output=True)
        try:
            for name in POLICIES:
                new, old = [], []
                for _ in range(REPEATS):
                    new.append(run_new(work, profiles, name))
                    old.append(run_old(tree, arrays, name, data_dir))
                best_new, best_old = min(r["wall_s"] for r in new), min(r["wall_s"] for r in old)
                per_policy[name] = {
                    "queries_per_wall_s": round(NUM_QUERIES / best_new),
                    "old_queries_per_wall_s": round(NUM_QUERIES / best_old),
                    "ratio": round(best_old / best_new, 3),
                    "within_slo": round(new[0]["within_slo"], 5),
                    "old_within_slo": round(old[0]["within_slo"], 5),
                }
        finally:
            subprocess.run(["git", "-C", str(checkout), "worktree", "remove", "--force", str(tree)], check=True)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    figure = RESULTS_DIR / "sim_core.png"
    plot(per_policy, figure)
    write_result("sim_core", {
        "workload": {"queries": NUM_QUERIES, "rate_qps": RATE_QPS, "model": MODEL, "fleet": FLEET},
        "old_commit": OLD_COMMIT,
        "queries_per_wall_s": min(v["queries_per_wall_s"] for v in per_policy.values()),
        "old_queries_per_wall_s": min(v["old_queries_per_wall_s"] for v in per_policy.values()),
        "per_policy": per_policy,
        "same_core_as_live": same_core_as_live(profiles, work),
        "figure": str(figure),
    })


if __name__ == "__main__":
    main()
