"""The demo's second act: the bill follows the load.

Vision alone, on the Azure ``conv`` trace's day-scale swing (`shared.sim.arrivals.minute_rates`: `LOW_QPS` to
`PEAK_QPS` and back, its hour compressed into `DURATION_S`), served by the whole of INFaaS: each query's
variant by the scheduler, the machines by its autoscaler (``services.autoscaler``, model- and VM-level), which
starts the profiled device types' machines it finds cheapest for the load (each worker *emulates* its device
from the measured profile and boots in ``autoscaler_worker_startup_s``) and stops them as the load falls. It
starts from the fleet INFaaS' greedy settles at for the first rate and is billed, from the workers' own
events, against the fleet it settles at for the peak held for the whole act: a static fleet sized for the peak.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from schemas import Query, Result
from services.autoscaler.app import autoscale_catalogue
from services.demo.report import format_rows, format_unanswered, most_accurate, phase_table, phases, plot
from services.demo.workload import APPLICATIONS, SERVED, Sender, send_and_wait
from services.launcher import LocalLauncher
from services.serve_config import settings_env
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.adapters.recording import record
from shared.autoscale import GreedyConfig
from shared.autoscale.fluid import settle
from shared.catalogue import Catalogue
from shared.settings import InitialMachine, Settings
from shared.sim.arrivals import held_poisson, load_trace_timestamps, minute_rates
from shared.sim.replay import fleet_from_events, live_outcomes
from shared.sim.scorecard import Tenure, accuracies, fleet_cost

APPLICATION = "vision"
#: about one machine's worth at the bottom, three at the peak: the fleet has room to move
LOW_QPS, PEAK_QPS = 30.0, 300.0
#: minutes of the trace each point of the curve averages
SMOOTH_MIN = 5
#: the act's length: a machine's boot and the monitor's windows take seconds, and a shorter act rises faster
#: than they follow (live, before the core re-anchored batches sent ahead: the peak met its SLO for 84-87% of
#: queries over 120 s, for 95-97% over 180 s; 98.8% over 180 s with it)
DURATION_S = 180.0
SEED = 5
#: ``infra/serve.yaml``'s settings, with
#:
#: * vision the only application: the autoscaler runs every machine of the scheduler's policy, so digits'
#:   worker would be its too;
#: * every machine the autoscaler starts emulated: as real onnxruntime workers, a peak's machines would share
#:   this host's two cores;
#: * ``make bench-cost``'s headroom for INFaaS' autoscaler: its machines serve tens of images a second, not the
#:   paper's GPUs' hundreds, so a second's Poisson count and a boot's rise swing them more than 1.05 covers;
#: * a machine's next batch sent ahead of its end even behind a partial batch: Lite0's batch takes as long per
#:   row at 1 as at 8, so a bigger batch gains nothing, and each one-row batch would idle its machine for a
#:   Kafka round trip.
FIELDS = {**SERVED.settings_fields(), "applications": {APPLICATION: APPLICATIONS[APPLICATION]},
          "application_policies": {}, "local_device": "none",
          "infaas_slack_threshold": 1.15, "infaas_scale_down_threshold": 1.25, "pipeline_partial_batches": True}


class Fleet(NamedTuple):
    #: as ``autoscaler_initial_fleet`` gives them
    machines: tuple[InitialMachine, ...]
    per_hour: float

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(machine.device for machine in self.machines)


def rates(settings: Settings) -> np.ndarray:
    """Vision's rate in each second of the act."""
    curve = _curve(settings)
    return curve[(np.arange(int(DURATION_S)) * len(curve) / DURATION_S).astype(int)]


def schedule(settings: Settings) -> list[tuple[float, str]]:
    """(offset s, application) of every query: Poisson within each held rate of the curve."""
    return [(float(t), APPLICATION) for t in held_poisson(_curve(settings), DURATION_S, SEED)]


def _curve(settings: Settings) -> np.ndarray:
    return minute_rates(load_trace_timestamps(settings.azure_trace("conv")), low_qps=LOW_QPS, peak_qps=PEAK_QPS,
                        smooth_min=SMOOTH_MIN)


def settled_fleet(settings: Settings, qps: float) -> Fleet:
    """The machines INFaaS' greedy autoscaler settles at for a steady ``qps`` of vision, and their $/h."""
    catalogue = autoscale_catalogue(settings)
    state = settle(catalogue, {APPLICATION: qps}, config=GreedyConfig.from_settings(settings))
    prices = {w.name: w.price_per_hour for w in catalogue.worker_types}
    return Fleet(tuple(InitialMachine(device=w.device, variants=[i.variant for i in w.instances])
                       for w in state.workers), sum(prices[w.device] for w in state.workers))


def serve(stack: LocalStack, settings: Settings, plan: list[tuple[float, str]], first: Fleet
          ) -> tuple[list[Query], dict[str, tuple[Result, float]], float, list[Tenure]]:
    """The scheduler, the registry (INFaaS' monitoring daemon) and the autoscaler, which starts ``first``; then
    the plan sent. The queries, their answers, when sending began, and each worker's time in the fleet."""
    fleet = [machine.model_dump() for machine in first.machines]
    env = {**stack.env, **settings_env({**FIELDS, "autoscaler_initial_fleet": fleet})}
    with LocalLauncher(env, settings.var_dir / "logs" / "bill") as launcher:
        scheduler = launcher.start_scheduler(metrics_port=settings.scheduler_metrics_port)
        launcher.start_registry(metrics_port=settings.registry_metrics_port)
        launcher.start_service("autoscaler", "services.autoscaler", metrics_port=settings.autoscaler_metrics_port)
        launcher.wait_for_workers(scheduler, len(first.devices), timeout_s=120)
        print(f"INFaaS' autoscaler up, its first fleet running: {_named(first)}; logs in {launcher.log_dir}",
              flush=True)
        with MeridianClient(settings, applications=[APPLICATION]) as client:
            sender = Sender(client, np.zeros((1, 1), dtype=np.float32), prefix="bill")
            sender.warm_up((APPLICATION,))
            start, end, answers = send_and_wait(sender, plan, list(launcher.processes.values()))
        events = record(settings, start, end).events
    return sender.sent, answers, start, [w.tenure() for w in fleet_from_events(events)]


def report(settings: Settings, sent: list[Query], answers: dict[str, tuple[Result, float]], start: float,
           tenures: list[Tenure], peak: Fleet, figure_path: Path) -> dict[str, object]:
    """The phase table, the bill against the fleet sized for the peak, the figure; returns the numbers."""
    catalogue = Catalogue.from_settings(settings)
    outcomes = live_outcomes(sent, answers)
    accuracy = accuracies(catalogue.profiles)
    prices = {d.name: d.price_per_hour for d in catalogue.profiles.devices}
    stages = phases(rates(settings), PEAK_QPS / 2)
    table = phase_table(outcomes, start, stages, accuracy, tenures, prices)
    print("\n" + format_rows(table))
    if why := format_unanswered(sent, answers):
        print(why)
    bill = following_bill(tenures, prices, start, DURATION_S, peak,
                          ok=int(np.count_nonzero(~np.isnan(outcomes.answered_s))))
    print(bill_line(bill, peak))
    figure = plot(outcomes, start, stages, accuracy, most_accurate(catalogue, settings.applications, accuracy), tenures,
                  prices, figure_path,
                  title="make demo, act 2: INFaaS' autoscaler follows vision's load, and the bill follows it",
                  fixed_fleet=(f"the fleet sized for the peak ({_named(peak)})", peak.per_hour))
    numbers = {"phases": table, "bill": bill}
    figure.with_suffix(".json").write_text(json.dumps(numbers, indent=2))
    print(f"figure: {figure}\nnumbers: {figure.with_suffix('.json')}", flush=True)
    return numbers


def following_bill(tenures: list[Tenure], prices: dict[str, float], start_s: float, duration_s: float, peak: Fleet,
                   *, ok: int) -> dict[str, float]:
    """Dollars over the act: the running workers', and the peak-sized fleet's held for as long, each also per
    1,000 queries answered ok (the same answers: the peak-sized fleet would have answered no more)."""
    dollars = fleet_cost(tenures, prices, start_s, start_s + duration_s)
    static = peak.per_hour * duration_s / 3600.0
    per_1000 = 1000.0 / max(ok, 1)
    return {"dollars": round(dollars, 6), "dollars_per_1000_ok": round(dollars * per_1000, 6),
            "peak_fleet_dollars": round(static, 6), "peak_fleet_dollars_per_1000_ok": round(static * per_1000, 6),
            "answered_ok": ok, "cheaper_than_peak_fleet_x": round(static / dollars, 3) if dollars > 0 else None}


def bill_line(bill: dict[str, float], peak: Fleet) -> str:
    saving = bill["cheaper_than_peak_fleet_x"]
    return (f"bill: ${bill['dollars']:.5f} for the act's {DURATION_S:.0f} s, ${bill['dollars_per_1000_ok']:.6f} per "
            f"1,000 queries answered ok; the fleet sized for the peak ({_named(peak)}, ${peak.per_hour:.4f}/h) "
            f"would have cost ${bill['peak_fleet_dollars']:.5f}, ${bill['peak_fleet_dollars_per_1000_ok']:.6f} per "
            f"1,000 ok: " + (f"following the load cost {saving:.2f}x less" if saving else "no worker ran"))


def _named(fleet: Fleet) -> str:
    counts = {d: fleet.devices.count(d) for d in dict.fromkeys(fleet.devices)}
    return ", ".join(f"{n} x {d}" for d, n in counts.items())
