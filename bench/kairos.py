"""Kairos on the authors' data: allowable throughput of Kairos, KAIROS+ and the baselines, per model.

Run ``python -m bench.kairos`` (``make bench-kairos``). Writes ``bench/results/kairos.json`` and prints it.

Setting (HPDC'23 §7): budget $2.5/h over g4dn.xlarge (base), c5n.2xlarge, r5n.large, t3.xlarge; the paper's
p99 QoS per model; DeepRecSys query sizes; Poisson arrivals; allowable throughput = the highest rate whose
pooled p99 latency stays within the QoS (`shared.sim.throughput`). Every scheme is a policy object run by
the same simulator. Schemes that need many configuration evaluations (KAIROS+, DRS's threshold hill climb,
the baselines' configuration choice) screen with a cheaper measurement and re-measure their final choice
with the full one; ``settings`` in the output records every such choice.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from bench.common import RESULTS_DIR
from shared.kairos import (
    BatchSizeMonitor,
    KairosDispatch,
    KairosPlanner,
    LatencyTable,
    kairos_cost_matrix,
    kairos_plus,
)
from shared.kairos.baselines import (
    ClockworkDispatch,
    DrsDispatch,
    RibbonDispatch,
    hill_climb_threshold,
    homogeneous_fleet,
    oracle_throughput,
)
from shared.policy.base import DispatchPolicy, LoadSnapshot, PendingQuery, WorkerView
from shared.profiles.format import ProfileSet
from shared.profiles.kairos import KairosPool, load_kairos_pool, load_kairos_profiles
from shared.sim import (
    Scenario,
    allowable_throughput,
    deeprecsys_sizes,
    make_fleet,
    poisson_workload,
)
from shared.settings import REPO_ROOT

MODELS = ("ncf", "rm2", "wnd", "mtwnd", "dien")
RESULTS = RESULTS_DIR / "kairos.json"
FIGURE = RESULTS_DIR / "kairos.png"
#: the bars of the figure: result key -> label, colour
SCHEMES = {
    "homogeneous_qps": ("Homogeneous", "0.65"),
    "ribbon_qps": ("Ribbon", "#9ecae1"),
    "drs_qps": ("DRS", "#4292c6"),
    "clkwrk_qps": ("CLKWRK", "#08519c"),
    "kairos_qps": ("KAIROS", "#e6550d"),
    "kairos_plus_qps": ("KAIROS+", "#fdae6b"),
}


@dataclass(frozen=True, slots=True)
class Measure:
    """How one allowable-throughput measurement is taken."""

    num_queries: int
    seeds: tuple[int, ...]
    rel_tol: float


#: a reported throughput is within 0.5% of the true edge, so two schemes 2% apart are told apart
FULL = Measure(num_queries=10_000, seeds=(0, 1, 2), rel_tol=0.005)
SCREEN = Measure(num_queries=2000, seeds=(0,), rel_tol=0.04)
PLAN_WINDOW = 10_000
PLAN_SEED = 12_345
ORACLE_QUERIES = 10_000
ORACLE_SEED = 777
#: the search starts at this share of the configuration's upper bound (which bounds every scheme)
START_SHARE = 0.6

SETTINGS = {
    "budget_per_hour": None,  # filled from instance.json
    "arrivals": "Poisson (exponential gaps), query sizes: DeepRecSys sampler (spec §5)",
    "service_times": "profiled mean of the batch's 10-grid bucket (authors' latency_mean.json)",
    "pass_rule": "pooled over seeds, >= 99% of queries within QoS and no run diverging",
    "full_measure": {"num_queries": FULL.num_queries, "seeds": list(FULL.seeds), "rel_tol": FULL.rel_tol},
    "screen_measure": {"num_queries": SCREEN.num_queries, "seeds": list(SCREEN.seeds), "rel_tol": SCREEN.rel_tol},
    "plan_window": f"{PLAN_WINDOW} DeepRecSys sizes (seed {PLAN_SEED}) through BatchSizeMonitor",
    "kairos": "KairosPlanner choice (no online evaluation), KairosDispatch defaults: xi=0.98, penalty 10*T_qos "
    "on the cost, no tie-break, penalised pairs dispatched, rows = first 2n; predictor warm from profiles",
    "kairos_plus": "Algorithm 1 over all configs, each evaluated with screen_measure; best re-measured with full",
    "homogeneous": "floor(budget/price) g4dn.xlarge, best of FCFS and Kairos dispatch, scaled by budget/cost",
    "baseline_configs": "each baseline's best (screen_measure) among the Oracle-best configuration, the "
    "homogeneous one and the highest-UB configuration for each base count; its best re-measured with full_measure",
    "drs": "threshold hill-climbed (step 100 -> 10, start = smallest auxiliary QoS limit) per configuration "
    "with screen_measure",
    "oracle": f"sorted-sequence ORCL over {ORACLE_QUERIES} sizes (seed {ORACLE_SEED}), max over all configs",
    "matching_20x20_us_p50": "median wall time of one full KairosDispatch.decide (predictions, cost matrix, LSA, "
    "building the assignments) with 20 queued RM2 queries and 20 instances (5 g4dn, 15 r5n, half busy), 2000 "
    "calls; the cost matrix + LSA alone are under matching_20x20_cost_matrix_and_lsa_only_us_p50",
    "rank_all_configs_s": "slowest over models of KairosPlanner.rank on the 10000-size window (UB of every "
    "config within budget, ranking, similarity rule)",
}


class ModelBench:
    """Everything measured for one model; built in a worker process."""

    def __init__(self, model: str, profiles: ProfileSet, pool: KairosPool) -> None:
        self.model = model
        self.profiles = profiles
        self.pool = pool
        self.qos_ms = profiles.slo_ms[model]
        self.planner = KairosPlanner(
            profiles,
            application=model,
            budget_per_hour=pool.budget_per_hour,
            devices=pool.devices,
            max_counts=pool.max_counts,
        )
        monitor = BatchSizeMonitor(window=PLAN_WINDOW)
        monitor.add_sizes(deeprecsys_sizes(PLAN_WINDOW, np.random.default_rng(PLAN_SEED)))
        self.window = monitor.window()
        self.ranking = self.planner.rank(self.window)
        self.drs_thresholds: dict[tuple[int, ...], int] = {}
        self.ub = {
            tuple(int(c) for c in cfg): float(u) for cfg, u in zip(self.ranking.configs, self.ranking.upper_bounds)
        }

    def throughput(
        self, config: tuple[int, ...], make_policy: Callable[[], DispatchPolicy], measure: Measure
    ) -> float:
        counts = dict(zip(self.ranking.devices, config))
        scenario = Scenario(
            workers=tuple(make_fleet(counts, [self.model], max_batch=self.table.max_batch)),
            profiles=self.profiles,
            make_policy=make_policy,
            make_workload=poisson_workload(
                num_queries=measure.num_queries,
                sizes=deeprecsys_sizes,
                application=self.model,
                slo_ms=self.qos_ms,
                candidate_variants=(self.model,),
            ),
        )
        start = START_SHARE * self.ub[config]
        result = allowable_throughput(scenario, start_qps=start, seeds=measure.seeds, rel_tol=measure.rel_tol)
        return result.rate_qps

    @property
    def table(self) -> LatencyTable:
        return self.planner.table

    def kairos(self) -> KairosDispatch:
        return KairosDispatch(self.profiles)

    def ribbon(self) -> RibbonDispatch:
        return RibbonDispatch(preferred_devices=self.ranking.devices)

    def clockwork(self) -> ClockworkDispatch:
        return ClockworkDispatch(self.profiles)

    def run(self) -> dict:
        load = LoadSnapshot(at_s=0.0, arrival_rate_qps={}, batch_sizes={self.model: tuple(self.window)})
        plan = self.planner.plan(load)
        counts = plan.device_counts()
        chosen = tuple(counts.get(d, 0) for d in self.ranking.devices)
        kairos_qps = self.throughput(chosen, self.kairos, FULL)

        search = kairos_plus(
            self.ranking.configs, self.ranking.upper_bounds, lambda cfg: self.throughput(cfg, self.kairos, SCREEN)
        )
        kairos_plus_qps = self.throughput(search.best_config, self.kairos, FULL) if search.best_config else 0.0

        base_price = self.profiles.device_by_name[self.ranking.devices[0]].price_per_hour
        hom = homogeneous_fleet(base_price, self.pool.budget_per_hour)
        hom_config = (hom.count,) + (0,) * (len(self.ranking.devices) - 1)
        homogeneous_qps = hom.scale * max(
            self.throughput(hom_config, self.ribbon, FULL), self.throughput(hom_config, self.kairos, FULL)
        )

        sizes = deeprecsys_sizes(ORACLE_QUERIES, np.random.default_rng(ORACLE_SEED))
        oracle = {
            cfg: oracle_throughput(
                sizes,
                dict(zip(self.ranking.devices, cfg)),
                self.table,
                qos_ms=self.qos_ms,
                base_devices=[self.ranking.devices[0]],
            ).throughput_qps
            for cfg in self.ub
        }
        oracle_config = max(oracle, key=lambda cfg: (oracle[cfg], -self.ub[cfg]))

        candidates = self._baseline_configs(oracle_config, hom_config)
        ribbon_qps, ribbon_config = self._best_baseline(candidates, lambda cfg: self._screened(cfg, self.ribbon))
        clkwrk_qps, clkwrk_config = self._best_baseline(candidates, lambda cfg: self._screened(cfg, self.clockwork))
        drs_qps, drs_config = self._best_baseline(candidates, self._tuned_drs)
        return {
            "kairos_qps": kairos_qps,
            "kairos_plus_qps": kairos_plus_qps,
            "kairos_plus_evaluated_fraction": search.fraction_evaluated,
            "homogeneous_qps": homogeneous_qps,
            "ribbon_qps": ribbon_qps,
            "drs_qps": drs_qps,
            "clkwrk_qps": clkwrk_qps,
            "oracle_qps": float(oracle[oracle_config]),
            "kairos_config": dict(zip(self.ranking.devices, chosen)),
            "_detail": {
                "kairos_plan": plan.message,
                "kairos_ub": self.ub[chosen],
                "kairos_plus_config": list(search.best_config or ()),
                "kairos_plus_evaluations": len(search.evaluated),
                "oracle_config": list(oracle_config),
                "ribbon_config": list(ribbon_config),
                "drs_config": list(drs_config),
                "drs_threshold": self.drs_thresholds[drs_config],
                "clkwrk_config": list(clkwrk_config),
                "homogeneous_instances": hom.count,
            },
        }

    def _baseline_configs(
        self, oracle_config: tuple[int, ...], hom_config: tuple[int, ...]
    ) -> list[tuple[int, ...]]:
        """The Oracle-best, the homogeneous, and the highest-UB configuration of each base count."""
        picks = [oracle_config] + ([hom_config] if hom_config != oracle_config else [])
        for u in sorted({int(c[0]) for c in self.ranking.configs}):
            top = next(tuple(int(x) for x in c) for c in self.ranking.configs if c[0] == u)
            if top not in picks:
                picks.append(top)
        return picks

    def _screened(
        self, config: tuple[int, ...], make_policy: Callable[[], DispatchPolicy]
    ) -> tuple[Callable[[], DispatchPolicy], float]:
        return make_policy, self.throughput(config, make_policy, SCREEN)

    def _best_baseline(
        self,
        candidates: list[tuple[int, ...]],
        tune: Callable[[tuple[int, ...]], tuple[Callable[[], DispatchPolicy], float]],
    ) -> tuple[float, tuple[int, ...]]:
        """Screen (and tune) the scheme on every candidate; re-measure the best one in full."""
        tuned = {cfg: tune(cfg) for cfg in candidates}
        best = max(tuned, key=lambda cfg: tuned[cfg][1])
        return self.throughput(best, tuned[best][0], FULL), best

    def _tuned_drs(self, config: tuple[int, ...]) -> tuple[Callable[[], DispatchPolicy], float]:
        """Hill-climb the DRS threshold on this configuration, starting at the smallest auxiliary QoS limit."""
        base = self.ranking.devices[0]
        present = [d for d, c in zip(self.ranking.devices[1:], config[1:]) if c]
        start = min([self.ranking.stats.limit[d] for d in present] + [self.table.max_batch])

        def drs_at(threshold: int) -> Callable[[], DispatchPolicy]:
            return lambda: DrsDispatch(threshold=threshold, base_devices={base})

        climb = hill_climb_threshold(
            lambda t: self.throughput(config, drs_at(t), SCREEN), start=start, high=self.table.max_batch
        )
        self.drs_thresholds[config] = climb.threshold
        return drs_at(climb.threshold), climb.value


def bench_model(model: str) -> tuple[str, dict, float]:
    started = time.perf_counter()
    result = ModelBench(model, load_kairos_profiles(), load_kairos_pool()).run()
    return model, result, time.perf_counter() - started


def matching_20x20_us(profiles: ProfileSet, *, calls: int = 2000) -> tuple[float, float]:
    """Median wall time (us) of a full 20 x 20 `KairosDispatch.decide`, and of its cost matrix + LSA alone."""
    rng = np.random.default_rng(3)
    policy = KairosDispatch(profiles)
    sizes = deeprecsys_sizes(20, rng)
    queue = [
        PendingQuery(str(i), "rm2", int(b), 0.001 * i, profiles.slo_ms["rm2"], ("rm2",))
        for i, b in enumerate(sizes)
    ]
    devices = ["g4dn.xlarge"] * 5 + ["r5n.large"] * 15
    workers = [
        WorkerView(f"w{j}", d, ("rm2",), j % 2, 40.0 * (j % 2), 0.0, 1000) for j, d in enumerate(devices)
    ]
    predictor = policy.predictor
    latency = np.array([predictor.predict(d, "rm2", sizes, noisy=False) for d in devices]).T
    coeff = np.array([predictor.at_max_batch("g4dn.xlarge", "rm2") / predictor.at_max_batch(d, "rm2") for d in devices])
    qos, wait = np.full(20, profiles.slo_ms["rm2"]), rng.uniform(0, 50, 20)

    def solve() -> None:
        cost, _ = kairos_cost_matrix(latency, wait, coeff, qos)
        linear_sum_assignment(cost)

    return _median_us(lambda: policy.decide(0.05, queue, workers), calls), _median_us(solve, calls)


def _median_us(call: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e6)


def rank_all_configs_s(profiles: ProfileSet, pool: KairosPool) -> float:
    window = deeprecsys_sizes(PLAN_WINDOW, np.random.default_rng(PLAN_SEED))
    worst = 0.0
    for model in MODELS:
        planner = KairosPlanner(
            profiles, application=model, budget_per_hour=pool.budget_per_hour, devices=pool.devices,
            max_counts=pool.max_counts,
        )
        t = time.perf_counter()
        planner.rank(window)
        worst = max(worst, time.perf_counter() - t)
    return worst


def plot_throughput(models: dict[str, dict], budget_per_hour: float, path: Path) -> None:
    """The paper's Fig. 9 (with Fig. 8's homogeneous reference): allowable throughput of every scheme per
    model, relative to the best homogeneous fleet under the same budget, the Oracle as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4))
    x, width = np.arange(len(models)), 0.8 / len(SCHEMES)
    handles = []
    for k, (key, (label, colour)) in enumerate(SCHEMES.items()):
        ratios = [m[key] / m["homogeneous_qps"] for m in models.values()]
        handles.append(ax.bar(x + (k - (len(SCHEMES) - 1) / 2) * width, ratios, width, label=label, color=colour))
    oracle = [m["oracle_qps"] / m["homogeneous_qps"] for m in models.values()]
    handles.append(ax.hlines(oracle, x - 0.45, x + 0.45, colors="black", linestyles="--", label="Oracle"))
    ax.set_xticks(x, [f"{name.upper()}\n1 = {m['homogeneous_qps']:,.0f} qps" for name, m in models.items()])
    ax.set_ylabel("allowable throughput\n(x best homogeneous fleet)")
    ax.set_ylim(0, 1.3 * max(oracle))
    ax.axhline(1.0, color="0.4", lw=0.6)
    ax.set_title(f"Throughput at p99 within QoS, budget ${budget_per_hour:g}/h", fontsize=10)
    ax.legend(handles=handles, ncol=7, fontsize=8, loc="upper center", columnspacing=1.0, handlelength=1.5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    started = time.perf_counter()
    profiles, pool = load_kairos_profiles(), load_kairos_pool()
    with ProcessPoolExecutor(max_workers=2) as executor:
        finished = list(executor.map(bench_model, MODELS))
    models, per_model, seconds = {}, {}, {}
    for model, result, elapsed in finished:
        per_model[model] = result.pop("_detail")
        models[model] = result
        seconds[model] = round(elapsed, 1)
    matching_us, lsa_us = matching_20x20_us(profiles)
    rank_s = rank_all_configs_s(profiles, pool)
    output = {
        "models": models,
        "matching_20x20_us_p50": matching_us,
        "rank_all_configs_s": rank_s,
        "search_tolerance": FULL.rel_tol,
        "settings": dict(
            SETTINGS,
            budget_per_hour=pool.budget_per_hour,
            matching_20x20_cost_matrix_and_lsa_only_us_p50=lsa_us,
            per_model=per_model,
            wall_time_s={"per_model": seconds, "total": round(time.perf_counter() - started, 1)},
        ),
    }
    plot_throughput(models, pool.budget_per_hour, FIGURE)
    output["figure"] = str(FIGURE.relative_to(REPO_ROOT))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(output, indent=2)
    RESULTS.write_text(text + "\n")
    print(text)
    print(f"wrote {FIGURE}")


if __name__ == "__main__":
    main()
