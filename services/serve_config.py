"""What to serve, as one YAML file describes it (``infra/serve.yaml``), and how its services start.

``meridian serve --config FILE`` serves it until Ctrl-C; ``make demo`` and the serving benches serve
``infra/serve.yaml`` itself, so what the README and docs/getting-started.md promise for one is what the
others run.
"""
from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.launcher import LocalLauncher, ManagedProcess
from shared.adapters.dead_letter import describe_validation_error
from shared.catalogue import Catalogue
from shared.policy.registry import dispatch_names, planner_names
from shared.settings import REPO_ROOT, Settings

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
    #: intra-op threads of a real worker (its device key is then ``cpu-<threads>t``); none: one
    threads: int | None = Field(default=None, ge=1, le=256)


class GatewayConfig(BaseModel):
    """An Open Inference Protocol gateway (``services.gateway``): REST on ``port``, gRPC on ``grpc_port``."""

    model_config = ConfigDict(extra="forbid")

    port: int = Field(ge=1, le=65535)
    grpc_port: int | None = Field(default=None, ge=1, le=65535)


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
    #: start the registry, so `meridian register` works and each registered application is served by the
    #: ``infaas`` policy (INFaaS' model-less path), its variants loaded on demand by a real worker
    registry: bool = False
    #: an Open Inference Protocol gateway (callers over HTTP and gRPC), or none
    gateway: GatewayConfig | None = None
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


def checked_settings(config: ServeConfig, path: Path) -> Settings:
    """The settings ``config`` gives, once every name in it is one Meridian knows; before anything starts,
    `ConfigError` names the first that is not, where it is in the file, and the closest known names."""

    def refuse(where: str, problem: str, name: str, known: Iterable[str]) -> ConfigError:
        return ConfigError(f"{path}: {where}: {problem}{_closest(name, known)}")

    # the file's own keys for these: setting them twice would leave one of the two unread
    own = {"applications", "scheduler_policy", "application_policies", "planner"}
    for key in config.settings:
        if key not in Settings.model_fields or key in own:
            raise refuse(f"settings.{key}", "no such setting", key, set(Settings.model_fields) - own)
    policies = [("policy", config.policy), *((f"application_policies.{app}", name)
                                             for app, name in config.application_policies.items())]
    for where, name in policies:
        if name not in dispatch_names():
            raise refuse(where, f"no dispatch policy {name!r}", name, dispatch_names())
    for app in config.application_policies:
        if app not in config.applications:
            raise refuse(f"application_policies.{app}", f"no application {app!r}", app, config.applications)
    if config.planner is not None and config.planner not in planner_names():
        raise refuse("planner", f"no planner {config.planner!r}", config.planner, planner_names())
    if config.registry and config.policy != "infaas":
        raise ConfigError(f"{path}: registry: registered applications are served by the default policy, which "
                          f"must then be infaas (INFaaS' model-less path), not {config.policy!r}")
    if config.registry and all(worker.emulate is not None for worker in config.workers):
        raise ConfigError(f"{path}: registry: registered models run on a real worker (one without `emulate`), "
                          "and every worker here is emulated")
    try:
        settings = Settings(**config.settings_fields())
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from None
    catalogue = Catalogue.from_settings(settings)
    families = {p.family for p in catalogue.profiles.variants}
    for app, names in config.applications.items():
        for family in names:
            if not catalogue.variants_of(family):
                raise refuse(f"applications.{app}", f"no model family {family!r} is profiled", family, families)
    served = {v for names in config.applications.values() for family in names for v in catalogue.variants_of(family)}
    devices = [d.name for d in catalogue.profiles.devices]
    for k, worker in enumerate(config.workers):
        where = f"workers[{k}] ({worker.id})"
        if worker.emulate is not None and worker.threads is not None:
            raise ConfigError(f"{path}: {where}: an emulated worker replays its device's profile; `threads` is for "
                              "a real one")
        if worker.emulate is not None and worker.emulate not in devices:
            raise refuse(f"{where}.emulate", f"no device {worker.emulate!r} is profiled", worker.emulate, devices)
        for variant in worker.variants:
            if variant not in served:
                raise refuse(f"{where}.variants", f"{variant!r} is no variant of the families served", variant,
                             served)
    return settings


def _closest(name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return f"; known: {', '.join(names)}" if len(names) <= 12 else ""


def settings_env(fields: dict[str, object]) -> dict[str, str]:
    """Settings fields as the ``MERIDIAN_*`` environment every process of a run starts with."""
    return {f"MERIDIAN_{name.upper()}": value if isinstance(value, str) else json.dumps(value)
            for name, value in fields.items()}


def start_services(launcher: LocalLauncher, config: ServeConfig, *, metrics_port: int, planner: bool | None = None,
                   extra_env: dict[str, str] | None = None) -> ManagedProcess:
    """The scheduler, the configured workers, the planner (``planner`` None: if the config names one; the
    environment says which) and the registry if asked for, on metrics ports from ``metrics_port`` up, and
    once every worker has joined the gateway if asked for; returns the scheduler."""
    scheduler = launcher.start_scheduler(metrics_port=metrics_port, extra_env=extra_env)
    for index, worker in enumerate(config.workers):
        launcher.start_worker(worker.id, variants=worker.variants, emulate=worker.emulate, max_batch=worker.max_batch,
                              threads=worker.threads, metrics_port=metrics_port + 1 + index, extra_env=extra_env)
    if planner is None:
        planner = config.planner is not None
    if planner:
        launcher.start_planner(metrics_port=metrics_port + 1 + len(config.workers), extra_env=extra_env)
    if config.registry:
        launcher.start_registry(metrics_port=metrics_port + 2 + len(config.workers), extra_env=extra_env)
    launcher.wait_for_workers(scheduler, len(config.workers), timeout_s=120)
    if config.gateway is not None:
        launcher.start_gateway(port=config.gateway.port, grpc_port=config.gateway.grpc_port, extra_env=extra_env)
    return scheduler
