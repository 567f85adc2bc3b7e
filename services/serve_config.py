"""What to serve, as one YAML file describes it (``infra/serve.yaml``), and how its services start.

``meridian serve --config FILE`` serves it until Ctrl-C; ``make demo`` and the serving benches serve
``infra/serve.yaml`` itself, so what the README promises for one is what the others run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.launcher import LocalLauncher, ManagedProcess
from shared.adapters.dead_letter import describe_validation_error
from shared.settings import REPO_ROOT

#: the configuration ``make demo`` serves
SERVE_YAML = REPO_ROOT / "infra" / "serve.yaml"


class ConfigError(ValueError):
    """The file is missing, not YAML, or not a valid configuration (the message says which, in one line)."""


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
    def load(cls, path: Path = SERVE_YAML) -> "ServeConfig":
        try:
            return cls.model_validate(yaml.safe_load(path.read_text()))
        except FileNotFoundError:
            raise ConfigError(f"no such file: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
        except ValidationError as exc:
            raise ConfigError(f"{path}: {describe_validation_error(exc)}") from None

    def settings_fields(self) -> dict[str, Any]:
        fields = {**self.settings, "applications": self.applications, "scheduler_policy": self.policy,
                  "application_policies": self.application_policies}
        return fields | ({"planner": self.planner} if self.planner else {})


def settings_env(fields: dict[str, object]) -> dict[str, str]:
    """Settings fields as the ``MERIDIAN_*`` environment every process of a run starts with."""
    return {f"MERIDIAN_{name.upper()}": value if isinstance(value, str) else json.dumps(value)
            for name, value in fields.items()}


def start_services(launcher: LocalLauncher, config: ServeConfig, *, metrics_port: int, planner: bool | None = None,
                   extra_env: dict[str, str] | None = None) -> ManagedProcess:
    """The scheduler, the configured workers and the planner (``planner`` None: if the config names one; the
    environment says which), on metrics ports from ``metrics_port`` up; returns the scheduler once every worker
    has joined."""
    scheduler = launcher.start_scheduler(metrics_port=metrics_port, extra_env=extra_env)
    for index, worker in enumerate(config.workers):
        launcher.start_worker(worker.id, variants=worker.variants, emulate=worker.emulate, max_batch=worker.max_batch,
                              metrics_port=metrics_port + 1 + index, extra_env=extra_env)
    if planner is None:
        planner = config.planner is not None
    if planner:
        launcher.start_planner(metrics_port=metrics_port + 1 + len(config.workers), extra_env=extra_env)
    launcher.wait_for_workers(scheduler, len(config.workers), timeout_s=120)
    return scheduler
