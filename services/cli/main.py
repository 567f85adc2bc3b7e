"""``meridian``: one command for what a user does with Meridian.

    meridian demo                      two applications on a mixed fleet, accuracy scaled per query (make demo)
    meridian stack up|down|status|reset
    meridian serve --config FILE       stack + scheduler + workers + planner from one YAML file
    meridian submit FILE --application A --slo-ms N
    meridian register ...              register a model with the registry (model-less queries)
    meridian status                    workers, plans, queue depth, consumer lag

Every command takes --help. Settings come from MERIDIAN_* environment variables (shared.settings.Settings).
The python -m services.<name> entry points stay for process managers.
"""
from __future__ import annotations

import argparse
import sys

from services.cli import serve, stack, status, submit
from services.cli.common import CommandError, summary


def add_demo(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="start the stack, serve a minute of two applications, print results",
                                 add_help=False)
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from services.demo.__main__ import main as demo_main
    return demo_main(args.rest)


def add_register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("register", help="register a model (ONNX file + validation set) with the registry",
                                 add_help=False)
    parser.set_defaults(run=run_register)


def run_register(args: argparse.Namespace) -> int:
    from services.registry.cli import main as register_main
    return register_main(["register", *args.rest], prog="meridian")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="meridian", description=summary(__doc__),
                                  epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo(commands)
    stack.add_parser(commands)
    serve.add_parser(commands)
    submit.add_parser(commands)
    add_register(commands)
    status.add_parser(commands)
    return top


#: commands whose own parser reads the rest of the line (their --help included)
PASS_THROUGH = {"demo", "register"}


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
