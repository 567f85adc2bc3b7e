"""``python -m services.replay``: what arrived in a time range of the queries topic, served again in the
simulator by every policy (or those named), on the fleet the worker events of that range show, or on
another one (``--fleet``: what if I had two more GPUs?). Prints one table, recorded against simulated,
and draws SLO attainment and accuracy over time into a PNG.

Examples::

    python -m services.replay --last 120
    python -m services.replay --since 2026-11-24T21:00:00 --until 2026-11-24T21:05:00 --policies fcfs,proteus
    python -m services.replay --last 300 --fleet cpu-1t=1,g4dn-emu=2
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

from kafka.errors import KafkaError
from tqdm import tqdm

from services.replay.comparison import check_policies, judge, replay
from services.replay.figure import plot_over_time
from services.replay.table import format_table
from shared.adapters.recording import RangeError, record
from shared.catalogue import Catalogue
from shared.policy.registry import dispatch_names
from shared.settings import Settings
from shared.sim.replay import fleet_from_events, live_outcomes, what_if_fleet
from shared.sim.transport import fit_transport, hop_records


def parse_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 time (local time zone unless it names one)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither unix seconds nor an ISO 8601 time") from None


def parse_fleet(text: str) -> dict[str, int]:
    counts = {}
    for part in filter(None, text.split(",")):
        device, _, count = part.partition("=")
        if not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"--fleet wants DEVICE=COUNT[,DEVICE=COUNT...], got {part!r}")
        counts[device.strip()] = int(count)
    if not counts:
        raise argparse.ArgumentTypeError("--fleet names no device")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.replay", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    when = parser.add_argument_group("the range (Kafka keeps it for the topics' retention)")
    when.add_argument("--last", type=float, help="the last SECONDS up to now (or up to --until)")
    when.add_argument("--since", type=parse_time, help="start: unix seconds or ISO 8601")
    when.add_argument("--until", type=parse_time, help="end: unix seconds or ISO 8601 (default: now)")
    parser.add_argument("--policies", default=",".join(dispatch_names()),
                        help=f"comma-separated (default: all of {', '.join(dispatch_names())})")
    parser.add_argument("--fleet", type=parse_fleet, help="DEVICE=COUNT,...: serve on this fleet instead")
    parser.add_argument("--transport", choices=("fit", "none"), default="fit",
                        help="fit the simulator's Kafka hops from the range's answers (default), or none: "
                             "an ideal machine")
    parser.add_argument("--figure", type=Path, help="PNG path (default: var/replay/replay-<end>.png)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = parser.parse_args(argv)
    settings = Settings()
    end = args.until or time.time()
    start = args.since if args.since is not None else (end - args.last if args.last else None)
    if start is None:
        parser.error("give the range: --last SECONDS, or --since (and --until)")
    try:
        names = check_policies(p.strip() for p in args.policies.split(",") if p.strip())
        print(f"reading {datetime.fromtimestamp(start):%Y-%m-%d %H:%M:%S} .. {datetime.fromtimestamp(end):%H:%M:%S}"
              f" from {settings.kafka_bootstrap}", file=sys.stderr)
        recording = record(settings, start, end)
        catalogue = Catalogue.from_settings(settings)
        recorded = fleet_from_events(recording.events)
        queries = [q for _, q in recording.queries]
        applications = sorted({q.application for q in queries})
        workers = (what_if_fleet(recorded, args.fleet, catalogue, applications) if args.fleet
                   else [w.sim_worker() for w in recorded])
        if not workers:
            raise RangeError("no worker heartbeated in the range: give the fleet with --fleet DEVICE=COUNT")
    except (RangeError, ValueError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:
        print(f"replay: cannot read the range from the broker at {settings.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 2
    live = judge(live_outcomes(queries, recording.results), [w.tenure() for w in recorded], catalogue,
                 start_s=start, end_s=end)
    transport = fit_transport(hop_records(recording.results)) if args.transport == "fit" else None
    fleet_text = ", ".join(sorted(f"{w.worker_id} ({w.device})" for w in workers))
    print(f"{len(queries)} queries of {', '.join(applications)}; fleet: {fleet_text}"
          f"{' (what-if)' if args.fleet else ''}; transport: "
          f"{transport.summary_ms() if transport else 'none'}", file=sys.stderr)
    with tqdm(total=len(names), desc="simulating", unit="policy", file=sys.stderr) as bar:
        served = replay(names, queries, workers, settings, catalogue, start_s=start, end_s=end,
                        transport=transport, done=lambda name: (bar.set_postfix_str(name), bar.update()))
    rows = {"recorded (answers at the results topic)": live.card}
    rows |= {f"{n} (simulated)": s.card for n, s in served.items()}
    print(format_table(rows))
    figure = args.figure or settings.var_dir / "replay" / f"replay-{int(end)}.png"
    plot_over_time({name: {"live": live.series, "simulated": s.series} for name, s in served.items()}, figure,
                   title=f"replay of {len(queries)} queries: recorded (solid) against each policy simulated (dashed)")
    print(f"figure: {figure}")
    if args.json:
        args.json.write_text(json.dumps({"recorded": live.card.model_dump(),
                                         "simulated": {n: s.card.model_dump() for n, s in served.items()},
                                         "transport": transport.model_dump() if transport else None}, indent=2))
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
