"""What the autoscalers read (`AutoscaleState`) and what they decide (`ScaleActions`), as plain frozen data.

The live service builds an `AutoscaleState` from worker events (heartbeats, loads, unloads, batches) and
load statistics; the simulator builds it from its own bookkeeping. Decisions name workers, variants and
applications by id and are applied by whoever holds the machines (a launcher, the simulator).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from shared.infaas.state import InstanceState

__all__ = [
    "AutoscaleState",
    "InstanceSpec",
    "InstanceStatus",
    "LoadInstance",
    "ScaleActions",
    "StartWorker",
    "StopWorker",
    "UnloadInstance",
    "WorkerStatus",
]


@dataclass(frozen=True, slots=True)
class InstanceStatus:
    """One loaded (or loading) variant instance on a worker, over the last monitoring window."""

    variant: str
    #: the application whose queries it serves (INFaaS keeps instance state per application)
    application: str
    #: False while loading: it counts as capacity on the way, not as capacity serving
    ready: bool = True
    state: InstanceState = InstanceState.ACTIVE
    #: rows/s routed to it (its incoming load, queued work included; spec §12.23)
    load_qps: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.load_qps) and self.load_qps >= 0):
            raise ValueError(f"`load_qps` of {self.variant!r} must be finite and >= 0, got {self.load_qps}")


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    worker_id: str
    #: worker type name (`shared.autoscale.catalogue.WorkerType`)
    device: str
    #: False while the machine boots
    ready: bool = True
    #: busy share of its compute resource over the last window (0..1)
    utilization: float = 0.0
    instances: tuple[InstanceStatus, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.utilization <= 1.0:
            raise ValueError(f"`utilization` of {self.worker_id!r} must be in [0, 1], got {self.utilization}")


@dataclass(frozen=True, slots=True)
class AutoscaleState:
    """The fleet and the load at one instant."""

    at_s: float
    workers: tuple[WorkerStatus, ...] = ()
    #: application -> incoming rows/s over the last window (arrival rate x mean query rows)
    demand_qps: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [w.worker_id for w in self.workers]
        if len(set(ids)) != len(ids):
            raise ValueError("`workers` must have unique ids")
        if any(not (math.isfinite(q) and q >= 0) for q in self.demand_qps.values()):
            raise ValueError("`demand_qps` values must be finite and >= 0")


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """An instance to create: this variant, serving this application."""

    variant: str
    application: str


@dataclass(frozen=True, slots=True)
class LoadInstance:
    worker_id: str
    variant: str
    application: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UnloadInstance:
    worker_id: str
    variant: str
    application: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StartWorker:
    """Start a machine of type `device` as `worker_id`, loading `instances` once it is up."""

    worker_id: str
    device: str
    instances: tuple[InstanceSpec, ...] = ()
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StopWorker:
    worker_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScaleActions:
    """One poll's decision. Apply stops and unloads, then starts and loads."""

    loads: tuple[LoadInstance, ...] = ()
    unloads: tuple[UnloadInstance, ...] = ()
    start: tuple[StartWorker, ...] = ()
    stop: tuple[StopWorker, ...] = ()
    #: $/h of the fleet once applied (every worker, booting ones included)
    cost_per_hour: float | None = None

    def __bool__(self) -> bool:
        return bool(self.loads or self.unloads or self.start or self.stop)

    def merge(self, other: ScaleActions) -> ScaleActions:
        """Both decisions; the cost is the later one's when it has one."""
        return ScaleActions(self.loads + other.loads, self.unloads + other.unloads, self.start + other.start,
                            self.stop + other.stop,
                            other.cost_per_hour if other.cost_per_hour is not None else self.cost_per_hour)
