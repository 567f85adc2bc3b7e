"""Seeded discrete-event simulation: the live scheduler's `SchedulerCore` and policies on a virtual clock."""
from shared.sim.arrivals import (
    Workload,
    deeprecsys_sizes,
    gamma_arrivals,
    load_trace_timestamps,
    poisson_arrivals,
    poisson_workload,
    trace_arrivals,
    truncated_gaussian_sizes,
)
from shared.sim.engine import EventType, SimQuery, SimResult, SimStatus, StopRule, simulate
from shared.sim.throughput import (
    Scenario,
    ThroughputResult,
    ThroughputStatus,
    allowable_throughput,
    rate_passes,
    search_rate,
)
from shared.sim.workers import SimWorker, make_fleet

__all__ = [
    "EventType",
    "Scenario",
    "SimQuery",
    "SimResult",
    "SimStatus",
    "SimWorker",
    "StopRule",
    "ThroughputResult",
    "ThroughputStatus",
    "Workload",
    "allowable_throughput",
    "deeprecsys_sizes",
    "gamma_arrivals",
    "load_trace_timestamps",
    "make_fleet",
    "poisson_arrivals",
    "poisson_workload",
    "rate_passes",
    "search_rate",
    "simulate",
    "trace_arrivals",
    "truncated_gaussian_sizes",
]
