"""``meridian``: one command for what a user does with Meridian.

    meridian demo                      two applications on a mixed fleet, accuracy scaled per query, then the
                                       fleet autoscaled and its bill following the load (make demo)
    meridian stack up|down|status|reset
    meridian serve --config FILE       stack + scheduler + workers + planner from one YAML file
    meridian submit FILE --application A --slo-ms N
    meridian register ...              register a model with the registry (model-less queries)
    meridian status                    workers, plans, queue depth, consumer lag
    meridian switch --application A --policy P   switch one application's dispatch policy while serving
    meridian token add|revoke|list     the gateway's bearer tokens kept in Redis

Every command takes --help. Settings come from MERIDIAN_* environment variables (shared.settings.Settings).
The python -m services.<name> entry points stay for process managers.
"""
from __future__ import annotations

import argparse
import sys

from services.cli import serve, stack, status, submit, token
from services.cli.common import CommandError, summary


def run_demo(args: argparse.Namespace) -> int:
    from services.demo.__main__ import main as demo_main
    return demo_main(args.rest)


def run_register(args: argparse.Namespace) -> int:
    from services.registry.cli import main as register_main
    return register_main(["register", *args.rest], prog="meridian")


def run_switch(args: argparse.Namespace) -> int:
    from services.cli.switch import main as switch_main
    return switch_main(args.rest)


#: commands whose own parser reads the rest of the line (their --help included): help, runner
PASS_THROUGH = {
    "demo": ("start the stack, serve a minute of two applications, then three of one autoscaled; print results",
             run_demo),
    "register": ("register a model (ONNX file + validation set) with the registry", run_register),
    "switch": ("switch one application's dispatch policy in the running schedulers", run_switch),
}


def add_pass_through(commands: argparse._SubParsersAction, name: str) -> None:
    help_text, run = PASS_THROUGH[name]
    commands.add_parser(name, help=help_text, add_help=False).set_defaults(run=run)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="meridian", description=summary(__doc__),
                                  epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_pass_through(commands, "demo")
    stack.add_parser(commands)
    serve.add_parser(commands)
    submit.add_parser(commands)
    add_pass_through(commands, "register")
    status.add_parser(commands)
    add_pass_through(commands, "switch")
    token.add_parser(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    top = parser()
    if argv and argv[0] in PASS_THROUGH:
        args, rest = top.parse_known_args(argv)
        args.rest = rest
    else:
        args = top.parse_args(argv)
    try:
        return args.run(args)
    except CommandError as exc:
        print(f"meridian {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
