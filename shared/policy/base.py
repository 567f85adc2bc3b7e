"""The contracts every policy implements.

Policies decide; services and the simulator act. A policy never reads a clock, the environment, Kafka
or Redis: time comes in as ``now_s`` and state as plain frozen views, and the answer is a plain decision
of ids. The same object runs inside the live scheduler/planner and inside ``shared.sim``.
"""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from schemas.messages import DEFAULT_PRIORITY

if TYPE_CHECKING:
    from schemas import WorkerEvent
    from shared.profiles.format import ProfileSet


class PendingQuery(NamedTuple):
    """A query waiting in a scheduler queue (a named tuple: one is made per query, so it must be cheap)."""

    query_id: str
    application: str
    #: rows in the query; Kairos calls this the query's batch size
    batch_size: int
    #: when the scheduler received it, on the caller's clock (seconds)
    arrival_s: float
    slo_ms: float
    #: variants that may serve it, most preferred first (a named variant gives exactly one)
    candidate_variants: tuple[str, ...]
    #: the share of its SLO the transport takes outside compute (the core's `TransportBudget`: the hop to
    #: the worker, its start, the answer's way back); policies plan compute within the rest
    reserve_s: float = 0.0
    #: its priority class, 1 (served first) to 9: the core's gate (`shared.serving.priorities`) decides
    #: when a policy sees it; policies may ignore it
    priority: int = DEFAULT_PRIORITY

    @property
    def deadline_s(self) -> float:
        """The compute deadline: a batch holding the query must finish computing by then for its answer to
        reach the client within its SLO."""
        return self.arrival_s + self.slo_ms / 1000.0 - self.reserve_s

    @property
    def budget_ms(self) -> float:
        """The compute budget: the SLO less the transport's reserve (a latency to compare with profiles)."""
        return self.slo_ms - self.reserve_s * 1000.0


class WorkerView(NamedTuple):
    """What a policy may know about one worker (a named tuple: policies are shown many per second)."""

    worker_id: str
    #: device type name, the key into profiles (``g4dn.xlarge``, ``cpu-1t`` ...)
    device: str
    variants: tuple[str, ...]
    #: batches dispatched to it and not finished yet
    inflight: int
    #: predicted time until its current work finishes (0 when idle)
    busy_remaining_ms: float
    #: when it last became (or is predicted to become) free, on the caller's clock
    available_at_s: float
    #: most rows one batch may hold
    max_batch: int

    @property
    def idle(self) -> bool:
        return self.inflight == 0


@dataclass(frozen=True, slots=True)
class Assignment:
    """Send these queries, as one batch, to this worker to run on this variant."""

    worker_id: str
    variant: str
    query_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DispatchDecision:
    assignments: tuple[Assignment, ...] = ()
    #: (query id, reason) of queries the policy gives up on; they get an explicit ``dropped`` result
    dropped: tuple[tuple[str, str], ...] = ()
    #: (worker id, variant) the policy wants loaded, for queries it will serve better once it is
    loads: tuple[tuple[str, str], ...] = ()

    @classmethod
    def make_empty(cls) -> "DispatchDecision":
        return _EMPTY_DECISION

    def __bool__(self) -> bool:
        return bool(self.assignments or self.dropped or self.loads)


_EMPTY_DECISION = DispatchDecision()


class DispatchPolicy(ABC):
    """Which queued queries go to which worker, asked by the serving core (`shared.serving`).

    The core owns the queue, the workers and the clock; it tells the policy what changed through the
    ``on_*`` calls below (all optional) and asks `decide` what to do. The same calls, in the same order,
    come from the live scheduler and from the simulator.
    """

    #: the registry name (``fcfs``, ``kairos`` ...)
    name: ClassVar[str]

    def on_query_added(self, query: PendingQuery) -> None:
        """A query joined the queue: admitted, or put back because the worker holding it was lost.

        Called before the `decide` that first sees it.
        """

    def on_query_removed(self, query_id: str) -> None:
        """The core took a queued query away without the policy's say: its deadline can no longer be met."""

    @abstractmethod
    def decide(
        self, now_s: float, queue: Sequence[PendingQuery], workers: Sequence[WorkerView]
    ) -> DispatchDecision:
        """Called after every arrival, completion and worker change, while queries wait and a worker is
        idle, and again while the previous call changed something.

        ``queue`` is in arrival order. Queries not named in the decision stay queued.
        """

    def on_batch_finished(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        """A batch finished, with its measured service time; for policies that learn."""

    def on_worker_joined(self, worker: WorkerView) -> None:
        """A worker appeared, or what it hosts changed (a variant loaded or unloaded)."""

    def on_worker_lost(self, worker_id: str) -> None:
        """A worker stopped or went silent; its unfinished queries come back through `on_query_added`."""

    def on_plan(self, plan: "FleetPlan") -> None:
        """A planner published a plan; for policies that route by one (Proteus)."""

    def on_profiles(self, profiles: ProfileSet) -> None:
        """The catalogue's profiles changed: a real worker announced the latencies it measured on its
        machine (`SchedulerCore.measurements_heard`), or a model was registered. A policy that plans with
        profiles plans with these from now on; it may keep what finished batches taught it of the rest."""

    def on_worker_event(self, event: "WorkerEvent", now_s: float) -> None:
        """Every worker event the core heard, after the core's own calls above; for policies that monitor
        the fleet themselves (INFaaS' monitoring daemon)."""

    def next_wakeup_s(self) -> float | None:
        """When the policy wants `decide` called although nothing happens (non-work-conserving batching)."""
        return None


class BatchingPolicy(ABC):
    """How many rows to put in the next batch for one worker (0 means wait: non-work-conserving)."""

    name: ClassVar[str]

    @abstractmethod
    def batch_rows(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> int:
        """``queue`` holds only queries that ``variant`` may serve, in arrival order."""

    def batch(
        self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str
    ) -> list[PendingQuery]:
        """The next batch: the oldest queries, up to `batch_rows` rows; none means wait."""
        return oldest(queue, self.batch_rows(now_s, queue, worker, variant))

    def observe(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        """Completion feedback, as for dispatch policies."""

    def on_profiles(self, profiles: ProfileSet) -> None:
        """The catalogue's profiles changed, as for dispatch policies."""


def oldest(queue: Sequence[PendingQuery], rows: int) -> list[PendingQuery]:
    """The first queries of ``queue`` up to ``rows`` rows; the first goes even when it alone exceeds them (a
    query is indivisible), none when ``rows`` is 0."""
    if rows <= 0 or not queue:
        return []
    chosen, total = [queue[0]], queue[0].batch_size
    for query in itertools.islice(queue, 1, None):
        if total + query.batch_size > rows:
            break
        chosen.append(query)
        total += query.batch_size
    return chosen


class PlanStatus(str, Enum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    DEGRADED = "degraded"  # demand lowered until the problem became feasible
    INFEASIBLE = "infeasible"


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """What planners see of the load: recent rates and query sizes per application."""

    at_s: float
    arrival_rate_qps: Mapping[str, float]
    batch_sizes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Placement:
    """One worker slot of a plan: a device of this type hosting these variants."""

    device: str
    variants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """A planner's answer: which devices, what runs on each, and how to split each application."""

    status: PlanStatus
    message: str
    placements: tuple[Placement, ...] = ()
    #: application -> variant -> share of its queries
    routing: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    objective: float | None = None
    cost_per_hour: float | None = None

    @property
    def success(self) -> bool:
        return self.status is not PlanStatus.INFEASIBLE

    def device_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for placement in self.placements:
            counts[placement.device] = counts.get(placement.device, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class FleetCommands:
    """Named changes to named workers, carried out as given (an autoscaler's answer); `shared.fleet`
    reconciles a `FleetPlan` instead."""

    #: (new worker id, what it runs)
    start: tuple[tuple[str, Placement], ...] = ()
    stop: tuple[str, ...] = ()
    #: (worker id, variant)
    load: tuple[tuple[str, str], ...] = ()
    unload: tuple[tuple[str, str], ...] = ()


class FleetController(ABC):
    """Changes the fleet while queries flow: a planner's control loop, a static plan, an autoscaler.

    The live planner, fleet and autoscaler services run these pieces; the simulator calls a controller
    directly, every control interval, with the same worker events the services consume.
    """

    @abstractmethod
    def control(self, now_s: float, arrivals: Mapping[str, int]) -> "FleetPlan | FleetCommands | None":
        """``arrivals``: queries per application since the previous call.

        Return a plan (reconciled with the fleet, make-before-break), commands for named workers, or None.
        """

    def on_worker_event(self, event: "WorkerEvent") -> None:
        """A worker event, as workers publish it (heartbeat on joining, batch finished, variant (un)loaded,
        stopped); for controllers that monitor the fleet."""

    def on_query_sizes(self, application: str, sizes: Sequence[int]) -> None:
        """The rows of each of ``application``'s queries since the previous call, before `control`; for
        controllers that plan from the size mix (Kairos)."""


class Planner(ABC):
    """Which fleet, and which variants where, for the load seen."""

    name: ClassVar[str]

    @abstractmethod
    def plan(self, load: LoadSnapshot) -> FleetPlan: ...
