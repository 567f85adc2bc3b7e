"""``make bench-priorities``: does a high priority class keep its SLO while a low one overloads the fleet?

The demo's fourth act (`services.demo.priorities`: ``vision``, EfficientNet-Lite0 pinned, a 200 ms SLO, on
one worker that emulates ``cpu-1t`` from its measured profile, ~110 q/s), at offered loads of 1x, 2x and 3x
its capacity, 40% of capacity in the high class (1) and the rest in the low class (9). Each policy of
`POLICIES` serves every load live, through the real stack (Kafka, the scheduler, the emulating worker;
Proteus with its planner), and in the simulator on arrivals drawn the same way with the same settings (an
ideal machine: no Kafka hops), with the priority gate and without it
(``priority_hold_share`` infinite: every class shown at once, the baseline). Per point and class: SLO
attainment (answered ok within the SLO, over sent) and goodput (such answers per second); the low class's
goodput against what the high class leaves of the capacity.

RAMSIS is left out: its offline policy set is made for the demo's ``g4dn-emu`` vision worker, not this one
(it serves behind the same gate, which sits in the core in front of every policy).

Writes ``bench/results/priorities.json`` and draws ``bench/results/priorities.png``.
"""
from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common import RESULTS_DIR, save_figure, write_result
from services.demo.priorities import (APPLICATION, FAMILY, SLO_MS, LiveOutcome, capacity_qps, describe, plan, running,
                                      serve, simulated)
from services.stack import LocalStack
from shared.catalogue import Catalogue
from shared.settings import Settings
from shared.sim.scenarios.priorities import ClassMix, ClassOutcome

POLICIES = ("fcfs", "kairos", "infaas", "proteus")
LOADS = (1.0, 2.0, 3.0)
TARGET_HIGH_ATTAINMENT = 0.99
PORTS = {"kafka": 29692, "redis": 26679, "prometheus": 29690, "metrics": 29601}


def live_policy(stack: LocalStack, policy: str, points: dict[float, list[tuple[float, int]]], duration_s: float,
                logs: Path) -> dict[float, LiveOutcome]:
    """Every point served live by ``policy`` on a fresh scheduler and worker, one after another."""
    out = {}
    with running(stack.env, stack.settings(), logs / policy, policy, metrics_port=PORTS["metrics"]) as client:
        for load, sends in points.items():
            out[load] = serve(client, sends, duration_s)
            print(f"{policy} live {load:g}x: {describe(out[load].classes)}, {out[load].shed} shed; the high "
                  f"class's misses: {out[load].high_missed}", flush=True)
    return out


# -- the report ----------------------------------------------------------------------------------------------------
def entry(policy: str, mode: str, mix: ClassMix, outcome: dict[int, ClassOutcome], live: LiveOutcome | None = None
          ) -> dict[str, object]:
    high, low = outcome[mix.high], outcome[mix.low]
    left_qps = mix.capacity_qps - mix.high_qps
    point = {"policy": policy, "mode": mode, "load": mix.load,
             "high": {"sent": high.queries, "slo_attainment": round(high.attainment, 4),
                      "goodput_qps": round(high.goodput_qps, 2)},
             "low": {"sent": low.queries, "slo_attainment": round(low.attainment, 4),
                     "goodput_qps": round(low.goodput_qps, 2),
                     "goodput_of_what_is_left": round(low.goodput_qps / min(left_qps, mix.low_qps), 3)}}
    if live is not None:
        point["low"]["shed"] = live.shed
        point["high"]["missed"] = live.high_missed
    return point


def plot(points: Sequence[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, (high, low) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"live": dict(marker="o", linestyle="none"), "sim": dict(linestyle="-"),
              "sim-no-gate": dict(linestyle=":")}
    for index, policy in enumerate(POLICIES):
        colour = f"C{index}"
        for mode, style in styles.items():
            mine = [p for p in points if p["policy"] == policy and p["mode"] == mode]
            if not mine:
                continue
            loads = [p["load"] for p in mine]
            label = f"{policy} ({mode})"
            high.plot(loads, [100 * p["high"]["slo_attainment"] for p in mine], color=colour, label=label, **style)
            low.plot(loads, [p["low"]["goodput_qps"] for p in mine], color=colour, label=label, **style)
    high.axhline(100 * TARGET_HIGH_ATTAINMENT, color="grey", linewidth=0.8, linestyle="--")
    high.set(xlabel="offered load (x capacity)", ylabel="high class within SLO (%)",
             title="high class (40% of capacity)")
    low.set(xlabel="offered load (x capacity)", ylabel="low class answered within SLO (q/s)",
            title="low class: what the high class leaves")
    high.legend(fontsize=6, ncol=2)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.priorities", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each live point")
    parser.add_argument("--sim-duration", type=float, default=60.0, help="seconds of each simulated point")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--no-live", action="store_true", help="the simulator only")
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    catalogue = Catalogue.from_settings(Settings(applications={APPLICATION: [FAMILY]}))
    capacity = capacity_qps(catalogue)
    mixes = {load: ClassMix(capacity, load) for load in LOADS}
    points: list[dict[str, object]] = []
    for policy in policies:
        for load, mix in mixes.items():
            for mode, gate in (("sim", True), ("sim-no-gate", False)):
                outcome = simulated(policy, catalogue, mix, args.sim_duration, seed=1, gate=gate)
                points.append(entry(policy, mode, mix, outcome))
                print(f"{policy} {mode} {load:g}x: {describe(outcome)}", flush=True)
    if not args.no_live:
        plans = {load: plan(mix, args.duration, seed=2) for load, mix in mixes.items()}
        with tempfile.TemporaryDirectory(prefix="meridian-bench-") as tmp:
            with LocalStack(var_dir=Path(tmp), kafka_port=PORTS["kafka"], redis_port=PORTS["redis"],
                            prometheus_port=PORTS["prometheus"]) as stack:
                for policy in policies:
                    for load, live in live_policy(stack, policy, plans, args.duration, Path(tmp) / "logs").items():
                        points.append(entry(policy, "live", mixes[load], live.classes, live))
    high = {f"{p['policy']} {p['mode']} {p['load']:g}x": p["high"]["slo_attainment"] for p in points
            if p["mode"] != "sim-no-gate"}
    plot(points, RESULTS_DIR / "priorities.png")
    write_result("priorities", {
        "capacity_qps": round(capacity, 1), "slo_ms": SLO_MS, "high_share_of_capacity": ClassMix(capacity, 1).high_share,
        "target_high_slo_attainment": TARGET_HIGH_ATTAINMENT,
        "high_target_met": {key: value >= TARGET_HIGH_ATTAINMENT for key, value in high.items()},
        "points": points})


if __name__ == "__main__":
    main()
