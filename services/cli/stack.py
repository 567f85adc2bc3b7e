"""``meridian stack up|down|status|reset``: the local Kafka, Redis and Prometheus under ``var/``."""
from __future__ import annotations

import argparse
import shutil

from services.cli.common import CommandError, summary
from services.stack import LocalStack
from shared.settings import Settings

#: what the services keep under ``var/`` beside the components' own state: logs, the scheduler's faust
#: data, Prometheus' scrape targets, the demo's figure
SERVICE_STATE = ("logs", "scheduler", "prometheus", "demo")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("stack", help="start, stop, inspect or clear the local stack",
                                 description=summary(__doc__))
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("up", help="start Kafka, Redis and Prometheus (those not running yet) and leave them up")
    actions.add_parser("down", help="stop all three, whoever started them")
    actions.add_parser("status", help="which components run, where")
    reset = actions.add_parser("reset", help="stop the stack and delete its state: topics, Redis, series, logs")
    reset.add_argument("--yes", action="store_true", help="really delete (without it, say what would go)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stack = LocalStack.from_settings(Settings())
    if args.action == "up":
        try:
            stack.start()
        except RuntimeError as exc:
            raise CommandError(str(exc).splitlines()[0]) from None
        print_status(stack)
    elif args.action == "down":
        stack.shut_down()
        print("stack stopped")
    elif args.action == "status":
        if not print_status(stack):
            return 1
    else:
        reset(stack, really=args.yes)
    return 0


def print_status(stack: LocalStack) -> bool:
    """Print each component's state; True when all run."""
    where = {"kafka": stack.kafka_bootstrap, "redis": f"127.0.0.1:{stack.redis_port}",
             "prometheus": f"http://127.0.0.1:{stack.prometheus_port}"}
    up = {name: stack.running(name) for name in stack.components}
    for name in stack.components:
        print(f"{name:<11} {'up  ' if up[name] else 'down'}  {where[name]}")
    print(f"state in {stack.var_dir}")
    return all(up.values())


def reset(stack: LocalStack, *, really: bool) -> None:
    doomed = [path for path in [*stack.state_dirs(), *(stack.var_dir / name for name in SERVICE_STATE)]
              if path.exists()]
    if not really:
        print("would stop the stack and delete:\n" + "\n".join(f"  {p}" for p in doomed)
              + "\nrun `meridian stack reset --yes` to do it (models and installed tools stay)")
        return
    stack.shut_down()
    for path in doomed:
        shutil.rmtree(path)
    print(f"stack stopped; deleted {len(doomed)} directories under {stack.var_dir} (models and tools kept)")
