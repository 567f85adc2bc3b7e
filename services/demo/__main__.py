"""``make demo`` / ``meridian demo``: the four systems' job on one screen.

Starts the local stack (Kafka, Redis, Prometheus), the scheduler and a mixed fleet, as ``infra/serve.yaml``
says: three workers *emulating* ``cpu-1t``, ``cpu-2t`` and ``g4dn-emu`` from measured profiles (this machine
has no GPU) serve EfficientNet-Lite for ``vision``, a real onnxruntime worker serves ``digits``. One minute
of the Azure LLM trace's shape sends both; vision rises past what the fleet serves with its most accurate
variant and falls again, and INFaaS picks each query's variant as it moves: the table shows accuracy
scaling (which variants served in each phase), what it kept (SLO attainment) and what the running fleet
cost (from the workers' own events). Writes ``var/demo/demo.png``.

Then a second act (`services.demo.bill`): vision alone for three minutes on a deeper swing, its machines started
and stopped by INFaaS' autoscaler, and the bill against a fleet sized for the peak (``var/demo/bill.png``).

And a third (`services.demo.photos`): real photographs, each a JPEG in its query, classified for real by
EfficientNet-Lite0, Lite1 or Lite2 on one onnxruntime worker, as each query's accuracy goal asks; every answer
checked against the same variant run in this process and against what a person would call the photograph.
Then a dozen more through the front door (`services.demo.front_door`): posted over HTTP to the gateway on the
Open Inference Protocol, checked the same way.

And a fourth (`services.demo.priorities`): one worker offered twice what it serves, 40% of its capacity in
priority class 1 and the rest in class 9; the report says how each class fared.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from schemas import Query, Result
from services.demo import bill, fcfs, front_door, photos, priorities
from services.demo.report import Phase, format_rows, format_unanswered, most_accurate, phase_table, phases, plot
from services.demo.workload import (APPLICATIONS, DIGITS_WORKER, EMULATED, SERVED, Sender, schedule, send_and_wait,
                                    top_capacity_qps, vision_rates)
from services.launcher import LocalLauncher
from services.observability.screenshots import shoot_overview, shows_alert
from services.serve_config import settings_env, start_services
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.recording import record
from shared.catalogue import Catalogue
from shared.settings import Settings
from shared.sim.replay import fleet_from_events, live_outcomes
from shared.sim.scorecard import Tenure, accuracies, fleet_cost, longest_silence_s

#: what ``infra/serve.yaml`` serves: vision by INFaaS (a variant per query), digits on its own real worker, first
#: come first served
DEMO_SETTINGS = SERVED.settings_fields()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meridian demo", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--fcfs", action="store_true",
                        help="the quick first smoke test instead: digits on two CPU workers, first come first served")
    parser.add_argument("--speedup", type=float, default=60.0,
                        help="seconds of trace per second of the demo (60: the 59-minute trace in a minute)")
    parser.add_argument("--peak", type=float, default=1.3,
                        help="vision's peak over what the fleet serves with EfficientNet-Lite2 alone")
    parser.add_argument("--out", type=Path, default=None, help="the figure (default var/demo/demo.png)")
    parser.add_argument("--screenshots", action="store_true",
                        help="then draw each overview dashboard panel from Prometheus into var/dashboards/ "
                             "(headless Chromium; what make dashboards-shot runs)")
    parser.add_argument("--no-bill", action="store_true",
                        help="skip the second act: three minutes of vision on INFaaS' autoscaler, the bill "
                             "following the load")
    parser.add_argument("--no-photos", action="store_true",
                        help="skip the third act: real photographs classified by a real onnxruntime worker")
    parser.add_argument("--no-priorities", action="store_true",
                        help="skip the fourth act: two priority classes on one overloaded worker")
    args, rest = parser.parse_known_args(argv)
    if args.fcfs:
        fcfs.main(rest)
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    settings = Settings().model_copy(update=DEMO_SETTINGS)
    catalogue = Catalogue.from_settings(settings)
    capacity = top_capacity_qps(catalogue)
    rates = vision_rates(settings, catalogue, bin_s=args.speedup, peak_over_capacity=args.peak)
    plan = schedule(settings, catalogue, len(rates), bin_s=args.speedup, peak_over_capacity=args.peak)
    print(f"{len(plan)} queries over {len(rates)} s: vision up to {rates.max():.0f} q/s, against {capacity:.0f} q/s "
          "with EfficientNet-Lite2 alone", flush=True)
    with LocalStack.from_settings(settings) as stack:
        print(f"stack: Kafka 127.0.0.1:{stack.kafka_port}, Redis 127.0.0.1:{stack.redis_port}, "
              f"Prometheus http://127.0.0.1:{stack.prometheus_port} (state in {settings.var_dir})", flush=True)
        sent, answers, start, tenures = serve(stack, settings, plan, screenshots=args.screenshots)
        report(catalogue, sent, answers, start, phases(rates, capacity), tenures,
               args.out or settings.var_dir / "demo" / "demo.png")
        if not args.no_bill:
            second_act(stack, settings)
        if not args.no_photos:
            third_act(stack, settings)
        if not args.no_priorities:
            priorities.act(stack.env, settings, metrics_port=settings.scheduler_metrics_port)
    print("\ndemo finished; everything it started is stopped", flush=True)
    return 0


def second_act(stack: LocalStack, demo_settings: Settings) -> None:
    settings = demo_settings.model_copy(update=bill.FIELDS)
    first, peak = (bill.settled_fleet(settings, qps) for qps in (bill.rates(settings)[0], bill.PEAK_QPS))
    plan = bill.schedule(settings)
    print(f"\nact 2, the bill follows the load: {len(plan)} vision queries over {bill.DURATION_S:.0f} s, "
          f"{bill.LOW_QPS:.0f} to {bill.PEAK_QPS:.0f} q/s and back; INFaaS' autoscaler starts and stops the "
          "machines (emulated from their profiles)", flush=True)
    sent, answers, start, tenures = bill.serve(stack, settings, plan, first)
    bill.report(settings, sent, answers, start, tenures, peak, settings.var_dir / "demo" / "bill.png")


def third_act(stack: LocalStack, demo_settings: Settings) -> None:
    settings = photos.fields(demo_settings)
    print(f"\nact 3, real photographs: {photos.DURATION_S:.0f} s at {photos.RATE_QPS:g} q/s, each query one JPEG "
          f"(scikit-image's cat, coffee and rocket, augmented) asking for an accuracy of "
          + ", ".join("none" if g is None else f"{g:.0%}" for g in photos.ACCURACY_GOALS)
          + f"; served by INFaaS on {photos.WORKER} (cpu-1t, real onnxruntime, EfficientNet-Lite0/1/2)", flush=True)
    with photos.running(stack.env, settings.var_dir / "logs" / "photos", settings,
                        metrics_port=settings.scheduler_metrics_port, gateway_port=settings.gateway_port) as client:
        answers = photos.classify(client, settings, rate=photos.RATE_QPS, duration_s=photos.DURATION_S)
        print("\n" + photos.format_answers(answers), flush=True)
        print(front_door.summary(settings.gateway_port, *front_door.through_gateway(settings.gateway_port, settings)),
              flush=True)


def serve(stack: LocalStack, settings: Settings, plan: list[tuple[float, str]], *, screenshots: bool
          ) -> tuple[list[Query], dict[str, tuple[Result, float]], float, list[Tenure]]:
    """Services and the trace sent; the queries, their answers, when sending began, and each worker's
    time in the fleet (from its events, on the answers' clock)."""
    rows = np.load(settings.models_dir / "digits-test.npz")["x"].astype(np.float32)
    with LocalLauncher({**stack.env, **settings_env(DEMO_SETTINGS)}, settings.var_dir / "logs") as launcher:
        start_services(launcher, SERVED, metrics_port=settings.scheduler_metrics_port)
        print("fleet: " + ", ".join(f"{w} ({d}, emulated)" for w, d in EMULATED)
              + f", {DIGITS_WORKER} (cpu-1t, real onnxruntime); scheduler ({served_by()})"
              + (f" and {SERVED.planner} planner" if SERVED.planner else "") + f" up; logs in {launcher.log_dir}",
              flush=True)
        with MeridianClient(settings, applications=list(APPLICATIONS)) as client:
            sender = Sender(client, rows, prefix="demo")
            sender.warm_up()
            print("answers read from " + ", ".join(topics.results_topic(app) for app in APPLICATIONS)
                  + " (this run's queries only)", flush=True)
            start, end, answers = send_and_wait(sender, plan, list(launcher.processes.values()))
        events = record(settings, start, end).events
        if screenshots:
            time.sleep(5)  # the last seconds of load scraped and the rules evaluated
            shots = shoot_overview(f"http://127.0.0.1:{stack.prometheus_port}", settings.var_dir / "dashboards",
                                   range_input="3m")
            print(f"{len(shots)} dashboard panels drawn by Prometheus in {shots[0].parent}"
                  + "".join(f"\n  {p.name}: no data or a query error" for p in shots if shows_alert(p)), flush=True)
    return sender.sent, answers, start, [w.tenure() for w in fleet_from_events(events)]


def served_by() -> str:
    """Which policy serves which application, as ``infra/serve.yaml`` says."""
    return ", ".join(f"{app}: {SERVED.application_policies.get(app, SERVED.policy)}" for app in APPLICATIONS)


def report(catalogue: Catalogue, sent: list[Query], answers: dict[str, tuple[Result, float]], start: float,
           stages: list[Phase], tenures: list[Tenure], figure_path: Path) -> None:
    """The phase table, why queries went unanswered, the bill, the figure and its numbers."""
    outcomes = live_outcomes(sent, answers)
    accuracy = accuracies(catalogue.profiles)
    prices = {d.name: d.price_per_hour for d in catalogue.profiles.devices}
    table = phase_table(outcomes, start, stages, accuracy, tenures, prices)
    print("\n" + format_rows(table))
    silence = longest_silence_s([outcomes.answered_s], start, float(np.max(outcomes.sent_s)))
    print(f"longest stretch with no answer at all: {silence:.2f} s")
    if why := format_unanswered(sent, answers):
        print(why)
    end = start + max(p.end_s for p in stages)
    dollars = fleet_cost(tenures, prices, start, end)
    ok = int(np.count_nonzero(~np.isnan(outcomes.answered_s)))
    print(f"bill: ${dollars:.5f} for the run's {end - start:.0f} s (every running worker at its profile's price), "
          f"${1000 * dollars / max(ok, 1):.6f} per 1,000 queries answered ok")
    figure = plot(outcomes, start, stages, accuracy, most_accurate(catalogue, APPLICATIONS, accuracy), tenures, prices,
                  figure_path)
    figure.with_suffix(".json").write_text(json.dumps(table, indent=2))
    print(f"\nfigure: {figure}\nnumbers: {figure.with_suffix('.json')}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
