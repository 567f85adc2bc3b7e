"""``meridian serve --config FILE``: the local stack, a scheduler, workers and (optionally) a planner,
described by one YAML file, serving until Ctrl-C. ``infra/serve.yaml`` is a commented example."""
from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path


from services.cli.common import CommandError, summary
from services.launcher import LocalLauncher
from services.serve_config import (ConfigError, GatewayConfig, ServeConfig, checked_settings, settings_env,
                                   start_services)
from services.stack import LocalStack


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="start the stack and the services one YAML file describes",
                                 description=summary(__doc__))
    parser.add_argument("--config", type=Path, required=True, help="the YAML file (see infra/serve.yaml)")
    parser.set_defaults(run=run)


def gateway_urls(gateway: GatewayConfig) -> str:
    """Where the gateway answers: its REST URL, and its gRPC address if it opens one."""
    grpc = f" and gRPC 127.0.0.1:{gateway.grpc_port}" if gateway.grpc_port else ""
    return f"http://127.0.0.1:{gateway.port}/v2{grpc}"


def run(args: argparse.Namespace) -> int:
    try:
        config = ServeConfig.load(args.config)
        settings = checked_settings(config, args.config)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    env = settings_env(config.settings_fields())
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with LocalStack.from_settings(settings) as stack, \
            LocalLauncher({**stack.env, **env}, settings.var_dir / "logs") as launcher:
        start_services(launcher, config, metrics_port=settings.scheduler_metrics_port, extra_env=env)
        processes = list(launcher.processes.values())
        print(f"serving {', '.join(config.applications)} on {len(config.workers)} workers; Kafka "
              f"{settings.kafka_bootstrap}, Prometheus http://127.0.0.1:{stack.prometheus_port}"
              + (f", Open Inference Protocol {gateway_urls(config.gateway)}" if config.gateway else "")
              + f"; logs in {launcher.log_dir}; Ctrl-C stops", flush=True)
        while not stopping.wait(1.0):
            dead = [p for p in processes if not p.alive()]
            if dead and not stopping.is_set():  # Ctrl-C on a terminal reaches the services too
                raise CommandError(f"{dead[0].name} stopped; its log's end:\n{dead[0].log_tail(15)}", code=1)
    print("stopped everything it started")
    return 0

