"""``meridian serve --config FILE``: the local stack, a scheduler, workers and (optionally) a planner,
described by one YAML file, serving until Ctrl-C. ``infra/serve.yaml`` is a commented example."""
from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.cli.common import CommandError, summary
from services.demo.workload import settings_env
from services.launcher import LocalLauncher, ManagedProcess
from services.stack import LocalStack
from shared.adapters.dead_letter import describe_validation_error
from shared.settings import Settings


class WorkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    variants: list[str] = Field(min_length=1)
    #: the device type this worker emulates from its measured profile; none: real onnxruntime inference
    emulate: str | None = None
    max_batch: int | None = Field(default=None, ge=1)


class ServeConfig(BaseModel):
    """What to serve: applications (name -> model families), policies, the fleet and any other setting."""

    model_config = ConfigDict(extra="forbid")

    applications: dict[str, list[str]] = Field(min_length=1)
    #: the dispatch policy of every application not in `application_policies`
    policy: str = "fcfs"
    application_policies: dict[str, str] = Field(default_factory=dict)
    #: a fleet-wide planner (``proteus``, ``kairos``) publishing plans, or none
    planner: str | None = None
    workers: list[WorkerConfig] = Field(min_length=1)
    #: any other `shared.settings.Settings` field, by its name (e.g. ``replan_period_s: 10``)
    settings: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> "ServeConfig":
        try:
            return cls.model_validate(yaml.safe_load(path.read_text()))
        except FileNotFoundError:
            raise CommandError(f"no such file: {path}") from None
        except yaml.YAMLError as exc:
            raise CommandError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
        except ValidationError as exc:
            raise CommandError(f"{path}: {describe_validation_error(exc)}") from None

    def settings_fields(self) -> dict[str, Any]:
        fields = {**self.settings, "applications": self.applications, "scheduler_policy": self.policy,
                  "application_policies": self.application_policies}
        return fields | ({"planner": self.planner} if self.planner else {})


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="start the stack and the services one YAML file describes",
                                 description=summary(__doc__))
    parser.add_argument("--config", type=Path, required=True, help="the YAML file (see infra/serve.yaml)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = ServeConfig.load(args.config)
    fields = config.settings_fields()
    try:
        settings = Settings(**fields)
    except ValidationError as exc:
        raise CommandError(f"{args.config}: {describe_validation_error(exc)}") from None
    env = settings_env(fields)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with LocalStack.from_settings(settings) as stack, \
            LocalLauncher({**stack.env, **env}, settings.var_dir / "logs") as launcher:
        processes = start(launcher, config, settings, env)
        print(f"serving {', '.join(config.applications)} on {len(config.workers)} workers; Kafka "
              f"{settings.kafka_bootstrap}, Prometheus http://127.0.0.1:{stack.prometheus_port}; logs in "
              f"{launcher.log_dir}; Ctrl-C stops", flush=True)
        while not stopping.wait(1.0):
            dead = [p for p in processes if not p.alive()]
            if dead and not stopping.is_set():  # Ctrl-C on a terminal reaches the services too
                raise CommandError(f"{dead[0].name} stopped; its log's end:\n{dead[0].log_tail(15)}", code=1)
    print("stopped everything it started")
    return 0


def start(launcher: LocalLauncher, config: ServeConfig, settings: Settings, env: dict[str, str]
          ) -> list[ManagedProcess]:
    scheduler = launcher.start_scheduler(metrics_port=settings.scheduler_metrics_port, extra_env=env)
    for index, worker in enumerate(config.workers):
        launcher.start_worker(worker.id, variants=worker.variants, emulate=worker.emulate, max_batch=worker.max_batch,
                              metrics_port=settings.fleet_metrics_port_base + index, extra_env=env)
    if config.planner:
        launcher.start_planner(metrics_port=settings.planner_metrics_port, extra_env=env)
    launcher.wait_for_workers(scheduler, len(config.workers), timeout_s=120)
    return list(launcher.processes.values())
