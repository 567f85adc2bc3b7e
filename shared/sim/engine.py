"""The one discrete-event engine: the live scheduler's `SchedulerCore` on a virtual clock.

The engine plays everything around the core that Kafka and the worker processes play live, and nothing
the core does itself:

- clients: each workload's queries arrive at their times and are admitted by the core (or rejected);
- workers: each runs the jobs sent to it one after another, as a live worker reads its dispatch topic:
  batches take the time `ProfileServiceTime` gives (the model ``--emulate`` workers replay), variant
  loads the profile's load latency; a finished batch reaches the core as ``batch_finished``;
- the fleet: every ``control_interval_s`` a `FleetController` (a planner's loop, a static plan, an
  autoscaler) is told the arrivals per application and may answer a `FleetPlan` or `FleetCommands`.
  A plan is applied as the live fleet service applies it, by `shared.fleet.reconcile`, and the core
  hears it (`apply_plan`): new workers join after their device's start-up time plus their variants'
  load latency, and the workers the plan no longer wants stop once those have joined
  (make-before-break). Commands (an autoscaler's) are carried out as given. A stopped worker finishes
  the batch it runs. The controller hears every worker event the services would consume;
- wake-ups: when the policy waits on purpose (`next_wakeup_s`), the core steps again at that time;
- transport (optional, ``transport``): the hops of `shared.sim.transport.TransportModel`. A query
  reaches the core a draw of ``to_scheduler`` after its send (in send order per application, as one
  Kafka partition keeps it); a batch or load reaches its worker a draw of ``to_worker`` after the
  core sent it (in order per worker); after a batch's compute the worker sends its results one by one
  (a draw of ``publish_per_row`` each), then takes a draw of ``batch_overhead`` before its next job;
  each answer reaches its client, and the batch's end (sent after its last result) the core and the
  controller, a draw of ``to_client`` after it was sent (worker events in order per worker). Without it,
  messages take no time: an ideal machine;
- heartbeats (optional, ``heartbeat_interval_s``): each joined worker reports its loaded variants and
  busy share every interval, as live workers do, to the core and the controller (for monitors that
  judge workers by them). A worker given what it measured (`SimWorker.measured`) announces it in every
  heartbeat, as a real worker does, and its batches take that long.

After every event the core steps once, exactly as the live scheduler does after every message.

Events are ordered by ``(time, type, sequence)``: completions, then workers ready, then control, then
arrivals, then wake-ups, then heartbeats at the same instant, so a worker freed at ``t`` is visible to a
query arriving at ``t``. Runs are deterministic for a seed.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import NamedTuple

import numpy as np

from shared.catalogue import Catalogue
from schemas import BatchFinished, BatchRefused, VariantLoaded, VariantUnloaded, WorkerHeartbeat, WorkerStopped
from shared.fleet import reconcile
from shared.policy.base import DispatchPolicy, FleetCommands, FleetController, FleetPlan, Placement
from shared.profiles.format import ProfileSet
from shared.profiles.measured import with_measured
from shared.serving.core import CoreConfig, Dispatch, SchedulerCore, Step
from shared.serving.service_time import ProfileServiceTime, ServiceTime
from shared.sim.arrivals import Workload
from shared.sim.transport import TransportModel
from shared.sim.workers import SimWorker


class EventType(IntEnum):
    COMPLETION = 0
    READY = 1
    CONTROL = 2
    ARRIVAL = 3
    WAKEUP = 4
    HEARTBEAT = 5
    #: a message reaches a worker (transport)
    DELIVERY = 6
    #: a worker may start its next job (transport: after its per-batch overhead)
    FREE = 7
    #: a worker event reaches the core and the controller (transport)
    NOTICE = 8


class SimStatus(str, Enum):
    COMPLETED = "completed"
    #: queries were left queued (the queue outgrew `StopRule.max_queue`, or nothing could serve them)
    DIVERGED = "diverged"
    #: more SLO misses than `StopRule.max_misses`: the run can no longer pass
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class StopRule:
    """When to end a run early because its verdict is already known."""

    max_queue: int | None = None
    max_misses: int | None = None


#: (worker id, device, time s) -> factor on its service times (a noisy neighbour), for what-if runs
ServiceFactor = Callable[[str, str, float], float]


class SimQuery(NamedTuple):
    """A simulated client's query: what the core reads of a `Query` message."""

    query_id: str
    application: str
    model: str | None
    batch_size: int
    slo_ms: float
    #: the simulated client sends it as it arrives
    sent_at: float
    accuracy_floor: float | None = None
    priority: int | None = None
    inputs: None = None
    #: the bytes its inputs would add to a batch's message: the core bounds a batch by their sum, live and here
    payload_bytes: int = 0


class Lifetime(NamedTuple):
    worker_id: str
    device: str
    requested_s: float
    joined_s: float
    stopped_s: float | None


@dataclass(frozen=True)
class SimResult:
    """Per-query outcomes in global arrival order; unserved queries have NaN times and worker -1."""

    status: SimStatus
    message: str
    application: np.ndarray
    slo_ms: np.ndarray
    arrival_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    #: index into `worker_ids` of the worker that served each query
    worker: np.ndarray
    #: the variant that served each query ("" when unserved)
    variant: np.ndarray
    #: query index -> reason, for queries rejected, dropped (by the core or the policy) or left queued
    dropped: dict[int, str]
    worker_ids: tuple[str, ...]
    #: each query's priority class (its workload's, else its application's default)
    priority: np.ndarray
    #: (time, plan) of every plan applied
    plans: tuple[tuple[float, FleetPlan], ...] = ()
    #: every worker of the run: asked for, joined (NaN if never) and stopped (None if still running)
    lifetimes: tuple["Lifetime", ...] = ()

    @property
    def success(self) -> bool:
        return self.status is SimStatus.COMPLETED

    @property
    def latency_ms(self) -> np.ndarray:
        return (self.finish_s - self.arrival_s) * 1000.0

    @property
    def served(self) -> np.ndarray:
        return self.worker >= 0

    @property
    def num_served(self) -> int:
        return int(np.count_nonzero(self.served))

    @property
    def late(self) -> np.ndarray:
        """Served, but after the SLO."""
        with np.errstate(invalid="ignore"):
            return self.served & (self.latency_ms > self.slo_ms)

    @property
    def violated(self) -> np.ndarray:
        """Dropped, never served, or late: the papers' SLO violations."""
        return ~self.served | self.late

    @property
    def num_within_slo(self) -> int:
        return int(np.count_nonzero(~self.violated))

    def fraction_within_slo(self) -> float:
        return self.num_within_slo / len(self.arrival_s)

    def latency_quantile_ms(self, q: float = 0.99) -> float:
        """Latency quantile over all queries, unserved ones counting as infinitely late."""
        lat = np.where(np.isnan(self.latency_ms), np.inf, self.latency_ms)
        return float(np.quantile(lat, q, method="higher"))


def simulate(
    workloads: Workload | Sequence[Workload],
    workers: Sequence[SimWorker],
    policy: DispatchPolicy,
    profiles: ProfileSet,
    *,
    service: ServiceTime | None = None,
    controller: FleetController | None = None,
    control_interval_s: float = 1.0,
    config: CoreConfig | None = None,
    startup_s: Mapping[str, float] | None = None,
    service_factor: ServiceFactor | None = None,
    seed: int | None = None,
    stop: StopRule | None = None,
    end_s: float | None = None,
    heartbeat_interval_s: float | None = None,
    transport: TransportModel | None = None,
    fleet_follows_plans: bool = True,
) -> SimResult:
    """Serve ``workloads`` with ``policy`` on ``workers`` (joined at time 0), re-planned by ``controller``.

    Parameters
    ----------
    profiles : what the core's catalogue knows (admission, predictions) and, unless ``service`` is
        given, where service times come from (profiled means).
    service : service and load times of the simulated workers.
    config : the core's drop rule (default: `CoreConfig`'s, as the live default).
    startup_s : seconds from a plan starting a worker of a device type to its first heartbeat (default:
        the profile's `DeviceType.startup_s`), before its variants load.
    service_factor : slows a worker's batches down at times (a noisy neighbour).
    seed : drives sampled service times.
    end_s : stop the run then (default: when nothing is left to happen); later events never happen.
    heartbeat_interval_s : each joined worker heartbeats this often, until the last control (default: only
        when it joins).
    transport : the delays of the live path's messages (default: none, an ideal machine); a query's
        finish time is then when its client holds the answer.
    fleet_follows_plans : False when no fleet service applies the controller's plans: the core hears
        them (routing) but the workers stay as they are.
    """
    return Simulation(workloads, workers, policy, profiles, service=service, controller=controller,
                      control_interval_s=control_interval_s, config=config, startup_s=startup_s,
                      service_factor=service_factor, seed=seed, stop=stop, end_s=end_s,
                      heartbeat_interval_s=heartbeat_interval_s, transport=transport,
                      fleet_follows_plans=fleet_follows_plans).run()


@dataclass(slots=True)
class _Worker:
    """A simulated worker process: its dispatch topic is ``jobs``, run one at a time."""

    index: int
    spec: SimWorker
    placement: Placement
    requested_s: float
    joined_s: float = math.nan
    jobs: deque = field(default_factory=deque)
    running: bool = False
    #: the plan wants it gone: it stops when its current batch ends
    stopping: bool = False
    stopped_s: float | None = None
    #: seconds spent on batches, and its value and the time at the previous heartbeat
    busy_s: float = 0.0
    beat_busy_s: float = 0.0
    beat_at_s: float = 0.0
    #: transport: when the last message to it arrives, and when its last event reaches the core (each
    #: is a Kafka partition: in order)
    delivered_s: float = 0.0
    noticed_s: float = 0.0


class Simulation:
    """One run: the engine around a fresh `SchedulerCore` (``core``); see `simulate` for the arguments."""

    def __init__(self, workloads: Workload | Sequence[Workload], workers: Sequence[SimWorker],
                 policy: DispatchPolicy, profiles: ProfileSet, *, service: ServiceTime | None = None,
                 controller: FleetController | None = None, control_interval_s: float = 1.0,
                 config: CoreConfig | None = None, startup_s: Mapping[str, float] | None = None,
                 service_factor: ServiceFactor | None = None, seed: int | None = None,
                 stop: StopRule | None = None, end_s: float | None = None,
                 heartbeat_interval_s: float | None = None, transport: TransportModel | None = None,
                 fleet_follows_plans: bool = True) -> None:
        if isinstance(workloads, Workload):
            workloads = [workloads]
        if not workloads:
            raise ValueError("`workloads` must not be empty")
        if len({w.worker_id for w in workers}) != len(workers):
            raise ValueError("`workers` must have unique ids")
        if not workers and controller is None:
            raise ValueError("give `workers`, or a `controller` whose plans start some")
        if not control_interval_s > 0:
            raise ValueError(f"`control_interval_s` must be > 0, got {control_interval_s}")
        if heartbeat_interval_s is not None and not heartbeat_interval_s > 0:
            raise ValueError(f"`heartbeat_interval_s` must be > 0, got {heartbeat_interval_s}")
        arrival = np.concatenate([w.arrival_s for w in workloads])
        source = np.concatenate([np.full(len(w), k) for k, w in enumerate(workloads)])
        order = np.argsort(arrival, kind="stable")
        self.arrival = arrival[order]
        self.rows = np.concatenate([w.batch_size for w in workloads])[order].astype(int)
        source = source[order]
        self.application = np.array([workloads[k].application for k in source], dtype=object)
        self.slo_ms = np.array([workloads[k].slo_ms for k in source], dtype=float)
        priorities = [workloads[k].priority for k in source]
        catalogue = _catalogue(workloads, profiles)
        models = [_model_of(w, catalogue) for w in workloads]
        self.model = [models[k] for k in source]
        self.query_fields = list(zip(self.application.tolist(), self.model, self.rows.tolist(), self.slo_ms.tolist(),
                                     priorities))
        self.deadline_s = (self.arrival + self.slo_ms / 1000.0).tolist()
        self.sent_at = self.arrival.tolist()
        self.now = 0.0
        self.core = SchedulerCore(policy, catalogue, config or CoreConfig(), clock=lambda: self.now)
        self.priority = np.array([self.core.priorities.class_of(a, p) for a, p in zip(self.application, priorities)],
                                 dtype=int)
        self.service = service or ProfileServiceTime(profiles)
        #: worker id -> the service times of a worker that measured its machine (`SimWorker.measured`)
        self.measured_service = {
            w.worker_id: ProfileServiceTime(with_measured(
                profiles, {(variant, w.device): latency for variant, latency in w.measured.items()}, {}))
            for w in workers if w.measured}
        self.prices = {d.name: d.price_per_hour for d in profiles.devices}
        self.controller = controller
        self.interval = control_interval_s
        self.heartbeat_interval = heartbeat_interval_s
        #: the last control happens by then; so does the last heartbeat
        self.end_control = float(self.arrival[-1]) + self.interval if len(self.arrival) else 0.0
        self.startup = {d.name: d.startup_s or 0.0 for d in profiles.devices} | dict(startup_s or {})
        self.service_factor = service_factor
        self.end_s = math.inf if end_s is None else end_s
        self.rng = np.random.default_rng(seed)
        self.stop = stop or StopRule()
        self.transport = transport
        #: its own stream, so that a transport changes no service-time draw
        self.hop_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self.fleet_follows_plans = fleet_follows_plans
        #: queries in the order they reach the core, and when
        self.admit_order, self.admit_s = self._admissions()
        m = len(self.arrival)
        #: per query, as lists while running (cheaper to set one by one than arrays)
        self.start_s = [math.nan] * m
        self.finish_s = [math.nan] * m
        self.served_by = [-1] * m
        self.variant_served = [""] * m
        self.dropped: dict[int, str] = {}
        self.misses = 0
        self.plans: list[tuple[float, FleetPlan]] = []
        self.counts: dict[str, int] = {}
        #: each admitted query's rows since the last control, per application
        self.sizes: dict[str, list[int]] = {}
        self.workers: dict[str, _Worker] = {}
        self.order: list[_Worker] = []
        self.starting: set[str] = set()
        self.stops_after_start: list[str] = []
        self.started = 0
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.wakeup_at = -math.inf
        for spec in workers:
            self._add_worker(spec)
            self._push(0.0, EventType.READY, spec.worker_id)

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> SimResult:
        if len(self.arrival):
            self._push(self.admit_s[0], EventType.ARRIVAL, 0)
            if self.controller is not None:
                self._push(min(0.0, float(self.arrival[0])), EventType.CONTROL, None)
        handlers = {EventType.COMPLETION: self._complete, EventType.READY: self._ready,
                    EventType.CONTROL: self._control, EventType.ARRIVAL: self._arrive,
                    EventType.WAKEUP: lambda _: None, EventType.HEARTBEAT: self._heartbeat,
                    EventType.DELIVERY: self._deliver, EventType.FREE: self._free,
                    EventType.NOTICE: lambda notice: notice()}
        status, message = SimStatus.COMPLETED, ""
        heap = self.heap
        while heap and heap[0][0] <= self.end_s:
            now, kind, _, payload = heapq.heappop(heap)
            self.now = now
            handlers[kind](payload)
            if kind == EventType.CONTROL and now + self.interval <= self.end_control:
                self._push(now + self.interval, EventType.CONTROL, None)
            step = self.core.step()
            if step.dispatches or step.dropped or step.loads:
                self._carry_out(step)
            at = self.core.next_wakeup_s()
            if at is not None and at > now and not now < self.wakeup_at <= at:
                self.wakeup_at = at
                self._push(at, EventType.WAKEUP, None)
            verdict = self._verdict() if self.stop.max_queue is not None or self.stop.max_misses is not None else None
            if verdict is not None:
                status, message = verdict
                break
        left = len(self.core.queue)
        for item in list(self.core.queue.waiting()):
            self.dropped[item.payload] = "never dispatched: the run ended with it queued"
        if status is SimStatus.COMPLETED and left:
            status, message = SimStatus.DIVERGED, f"{left} queries never dispatched"
        if not message:
            message = f"{len(self.arrival)} queries, {len(self.dropped)} not served, {len(self.plans)} plans applied"
        return SimResult(status, message, self.application, self.slo_ms, self.arrival, np.array(self.start_s),
                         np.array(self.finish_s), np.array(self.served_by, dtype=np.int64),
                         np.array(self.variant_served, dtype=object), self.dropped,
                         tuple(w.spec.worker_id for w in self.order), self.priority, tuple(self.plans),
                         tuple(Lifetime(w.spec.worker_id, w.spec.device, w.requested_s, w.joined_s, w.stopped_s)
                               for w in self.order))

    def _push(self, time_s: float, kind: EventType, payload: object) -> None:
        heapq.heappush(self.heap, (time_s, int(kind), self.seq, payload))
        self.seq += 1

    # -- clients --------------------------------------------------------------------------------
    def _admissions(self) -> tuple[list[int], list[float]]:
        """Each query reaches the core after its hop, never before one its application sent earlier."""
        if self.transport is None:
            return list(range(len(self.arrival))), self.arrival.tolist()
        reach = self.arrival + self.transport.to_scheduler.draw(self.hop_rng, len(self.arrival))
        for application in set(self.application.tolist()):
            mine = np.flatnonzero(self.application == application)
            reach[mine] = np.maximum.accumulate(reach[mine])
        order = np.argsort(reach, kind="stable")
        return order.tolist(), reach[order].tolist()

    def _arrive(self, k: int) -> None:
        i = self.admit_order[k]
        application, model, rows, slo_ms, priority = self.query_fields[i]
        # the transport's own handle on a query: its index
        rejection = self.core.admit(SimQuery(str(i), application, model, rows, slo_ms, self.sent_at[i],
                                             priority=priority), payload=i)
        if rejection is not None:
            self._drop(i, rejection.reason)
        self.counts[application] = self.counts.get(application, 0) + 1
        if self.controller is not None:
            self.sizes.setdefault(application, []).append(rows)
        if k + 1 < len(self.admit_order):
            self._push(self.admit_s[k + 1], EventType.ARRIVAL, k + 1)

    def _drop(self, i: int, reason: str) -> None:
        self.dropped[i] = reason
        self.misses += 1

    # -- what the core decided ------------------------------------------------------------------
    def _carry_out(self, step: Step) -> None:
        for item, reason in step.dropped:
            self._drop(item.payload, reason)
        for worker_id, variant in step.loads:
            self._send(self.workers[worker_id], ("load", variant))
        for dispatch in step.dispatches:
            self._send(self.workers[dispatch.worker_id], ("batch", dispatch))

    def _send(self, worker: _Worker, job: tuple) -> None:
        """The core's message to a worker: there at once, or after its hop (in order per worker)."""
        if self.transport is None:
            self._enqueue(worker, job)
            return
        worker.delivered_s = max(worker.delivered_s, self.now + float(self.transport.to_worker.draw(self.hop_rng)))
        self._push(worker.delivered_s, EventType.DELIVERY, (worker, job))

    def _deliver(self, message: tuple[_Worker, tuple]) -> None:
        worker, job = message
        if worker.stopped_s is None and not worker.stopping:  # a stopped worker's topic is never read again
            self._enqueue(worker, job)

    def _notice(self, worker: _Worker, notice: Callable[[], None], *, after_s: float | None = None) -> None:
        """A worker event sent now (or at ``after_s``): heard at once, or after its hop (in order per worker)."""
        if self.transport is None:
            notice()
            return
        sent = self.now if after_s is None else after_s
        worker.noticed_s = max(worker.noticed_s, sent + float(self.transport.to_client.draw(self.hop_rng)))
        self._push(worker.noticed_s, EventType.NOTICE, notice)

    def _enqueue(self, worker: _Worker, job: tuple) -> None:
        if worker.running or math.isnan(worker.joined_s):
            worker.jobs.append(job)
        else:
            self._run(worker, *job)

    def _free(self, worker: _Worker) -> None:
        """Its per-batch overhead is over (transport)."""
        if worker.stopping:
            self._stop_now(worker)
        elif worker.stopped_s is None:
            self._next_job(worker)

    def _next_job(self, worker: _Worker) -> None:
        if worker.jobs:
            self._run(worker, *worker.jobs.popleft())
        else:
            worker.running = False

    def _run(self, worker: _Worker, kind: str, job: Dispatch | str) -> None:
        worker.running = True
        device = worker.spec.device
        if kind == "unload":
            self._unloaded(worker, job)
            self._next_job(worker)
            return
        if kind == "load":
            load_ms = self.service.load_ms(device, job)
            self._push(self.now + load_ms / 1000.0, EventType.COMPLETION, (worker.spec.worker_id, job, load_ms))
            return
        if job.variant not in worker.placement.variants:  # unloaded while the batch was on its way: handed back
            refusal = BatchRefused.model_construct(worker_id=worker.spec.worker_id, batch_id=job.batch_id,
                                                   variant=job.variant, reason="not loaded", at=self.now)
            self._notice(worker, lambda: self._tell(refusal))
            self._next_job(worker)
            return
        service = self.measured_service.get(worker.spec.worker_id, self.service)
        service_ms = service.sample_ms(device, job.variant, job.rows, self.rng, job.images)
        if self.service_factor is not None:
            service_ms *= self.service_factor(worker.spec.worker_id, device, self.now)
        for item in job.items:
            i = item.payload
            self.start_s[i] = self.now
            self.served_by[i] = worker.index
            self.variant_served[i] = job.variant
        self._push(self.now + service_ms / 1000.0, EventType.COMPLETION, (worker.spec.worker_id, job, service_ms))

    def _complete(self, payload: tuple[str, Dispatch | str, float]) -> None:
        worker_id, job, service_ms = payload
        worker = self.workers[worker_id]
        if isinstance(job, str):
            worker.placement = Placement(worker.placement.device, tuple(sorted({*worker.placement.variants, job})))
            self._tell(VariantLoaded.model_construct(worker_id=worker_id, variant=job, load_ms=service_ms, at=self.now))
        else:
            worker.busy_s += service_ms / 1000.0
            sent, held = self._answers(len(job.items))
            for item, finish in zip(job.items, held):
                i = item.payload
                self.finish_s[i] = finish
                if finish > self.deadline_s[i]:
                    self.misses += 1
            self._notice(worker, lambda: self._batch_heard(worker, job, service_ms, sent), after_s=sent)
            if self.transport is not None and not worker.stopping:
                self._push(sent + float(self.transport.batch_overhead.draw(self.hop_rng)), EventType.FREE, worker)
                return
        if worker.stopping:
            self._stop_now(worker)
        else:
            self._next_job(worker)

    def _answers(self, count: int) -> tuple[float, list[float]]:
        """When a finished batch's last result is sent, and when each of its answers is held by its client."""
        if self.transport is None:
            return self.now, [self.now] * count
        sent = self.now + np.cumsum(self.transport.publish_per_row.draw(self.hop_rng, count))
        return float(sent[-1]), (sent + self.transport.to_client.draw(self.hop_rng, count)).tolist()

    def _batch_heard(self, worker: _Worker, job: Dispatch, service_ms: float, sent_s: float) -> None:
        """The batch's end event (sent at ``sent_s``, after its last result) reaches the core and controller."""
        self._tell(BatchFinished.model_construct(
            worker_id=worker.spec.worker_id, batch_id=job.batch_id, variant=job.variant, device=worker.spec.device,
            rows=job.rows, compute_ms=service_ms, ok=True, compute_started_at=self.start_s[job.items[0].payload],
            at=sent_s))

    # -- the fleet ------------------------------------------------------------------------------
    def _add_worker(self, spec: SimWorker) -> _Worker:
        worker = _Worker(len(self.order), spec, Placement(spec.device, tuple(sorted(spec.variants))), self.now)
        self.workers[spec.worker_id] = worker
        self.order.append(worker)
        return worker

    def _start(self, worker_id: str, placement: Placement) -> None:
        """The worker heartbeats after its device's start-up and its variants' load latency."""
        if worker_id in self.workers:
            raise ValueError(f"worker {worker_id!r} was started before")
        self._add_worker(SimWorker(worker_id, placement.device, tuple(placement.variants), self._max_batch(placement)))
        ready_s = self.startup.get(placement.device, 0.0) + sum(
            self.service.load_ms(placement.device, v) for v in placement.variants) / 1000.0
        self._push(self.now + ready_s, EventType.READY, worker_id)

    def _ready(self, worker_id: str) -> None:
        worker = self.workers[worker_id]
        if worker.stopped_s is not None:
            return  # stopped before it came up
        worker.joined_s = self.now
        self._beat(worker, busy_fraction=0.0)
        self.starting.discard(worker_id)
        self._stop_once_started()
        self._next_job(worker)
        if self.heartbeat_interval is not None:
            self._push(self.now + self.heartbeat_interval, EventType.HEARTBEAT, worker_id)

    def _heartbeat(self, worker_id: str) -> None:
        """A joined worker's periodic report: what it holds, and its busy share since the previous one."""
        worker = self.workers[worker_id]
        if worker.stopped_s is not None:
            return
        self._beat(worker, min(1.0, (worker.busy_s - worker.beat_busy_s) / max(self.now - worker.beat_at_s, 1e-9)))
        if self.now + self.heartbeat_interval <= self.end_control:
            self._push(self.now + self.heartbeat_interval, EventType.HEARTBEAT, worker_id)

    def _beat(self, worker: _Worker, busy_fraction: float) -> None:
        """What a live worker's heartbeat carries, to the core and the controller."""
        worker.beat_busy_s, worker.beat_at_s = worker.busy_s, self.now
        spec = worker.spec
        self._tell(WorkerHeartbeat.model_construct(
            worker_id=spec.worker_id, incarnation=None, device=spec.device, emulated=True,
            variants=list(worker.placement.variants), max_batch=spec.max_batch, inflight=int(worker.running),
            busy_fraction=busy_fraction, price_per_hour=self.prices.get(spec.device, 0.0),
            measured=dict(spec.measured or {}), at=self.now))

    def _stop_once_started(self) -> None:
        """Make-before-break: the workers a plan gives up stop once all it started have joined."""
        if not self.starting:
            for worker_id in self.stops_after_start:
                self._stop(self.workers[worker_id])
            self.stops_after_start = []

    def _control(self, _: None) -> None:
        counts, self.counts = self.counts, {}
        for application, sizes in self.sizes.items():
            self.controller.on_query_sizes(application, sizes)
        self.sizes = {}
        answer = self.controller.control(self.now, counts)
        if isinstance(answer, FleetCommands):
            self._command(answer)
        elif answer is not None and answer.success:
            self._plan(answer)

    def _plan(self, plan: FleetPlan) -> None:
        self.plans.append((self.now, plan))
        if not self.fleet_follows_plans:
            self.core.apply_plan(plan)
            return
        running = {w.spec.worker_id: w.placement for w in self.order if w.stopped_s is None and not w.stopping}
        changes = reconcile(plan.placements, running)
        for placement in changes.start:
            worker_id = f"{placement.device}-p{self.started}"
            self.started += 1
            self._start(worker_id, placement)
            self.starting.add(worker_id)
        self.stops_after_start = list(changes.stop)
        self._stop_once_started()
        self.core.apply_plan(plan)

    def _command(self, commands: FleetCommands) -> None:
        for worker_id, variant in commands.unload:
            self._enqueue(self.workers[worker_id], ("unload", variant))
        for worker_id in commands.stop:
            self._stop(self.workers[worker_id])
        for worker_id, placement in commands.start:
            self._start(worker_id, placement)
        for worker_id, variant in commands.load:
            self._enqueue(self.workers[worker_id], ("load", variant))

    def _unloaded(self, worker: _Worker, variant: str) -> None:
        worker.placement = Placement(worker.placement.device, tuple(v for v in worker.placement.variants if v != variant))
        self._tell(VariantUnloaded.model_construct(worker_id=worker.spec.worker_id, variant=variant, at=self.now))

    def _max_batch(self, placement: Placement) -> int:
        """A started worker takes the largest batch its device's peers take (the fleet's setting), else its
        variants' largest; one started empty, as a live worker does by default, its device's largest."""
        peers = [w.spec.max_batch for w in self.order if w.spec.device == placement.device]
        device = [p.max_batch for p in self.core.catalogue.profiles.variants if p.device == placement.device]
        return max(peers, default=max(
            (self.core.catalogue.profile(v, placement.device).max_batch for v in placement.variants),
            default=max(device, default=1)))

    def _stop(self, worker: _Worker) -> None:
        if worker.stopped_s is not None or worker.stopping:
            return
        worker.jobs.clear()
        if worker.running:
            worker.stopping = True
        else:
            self._stop_now(worker)

    def _stop_now(self, worker: _Worker) -> None:
        worker.stopping, worker.running = False, False
        worker.jobs.clear()
        worker.stopped_s = self.now
        if math.isnan(worker.joined_s):
            return
        self._notice(worker, lambda: self._stop_heard(worker))

    def _stop_heard(self, worker: _Worker) -> None:
        self._tell(WorkerStopped.model_construct(worker_id=worker.spec.worker_id, at=self.now))

    def _tell(self, event: object) -> None:
        """A worker event reaches the core (as a live scheduler's message would) and the controller."""
        self.core.on_worker_event(event)
        if self.controller is not None:
            self.controller.on_worker_event(event)

    # -- early verdicts -------------------------------------------------------------------------
    def _verdict(self) -> tuple[SimStatus, str] | None:
        stop = self.stop
        if stop.max_queue is not None and len(self.core.queue) > stop.max_queue:
            return SimStatus.DIVERGED, f"queue reached {len(self.core.queue)} > {stop.max_queue}"
        if stop.max_misses is not None and self.misses > stop.max_misses:
            return SimStatus.ABORTED, f"{self.misses} SLO misses > {stop.max_misses}"
        return None


def _catalogue(workloads: Sequence[Workload], profiles: ProfileSet) -> Catalogue:
    """The applications the workloads name, each registered for the families of its candidates."""
    families = {p.variant: p.family for p in profiles.variants}
    applications: dict[str, set[str]] = {}
    for w in workloads:
        unknown = [v for v in w.candidate_variants if v not in families]
        if unknown:
            raise ValueError(f"workload {w.application!r} names variants without a profile: {unknown}")
        applications.setdefault(w.application, set()).update(families[v] for v in w.candidate_variants)
    return Catalogue(profiles, {app: sorted(f) for app, f in applications.items()})


def _model_of(workload: Workload, catalogue: Catalogue) -> str:
    """What its queries ask for, as a live client would: one variant, or a whole family."""
    candidates = workload.candidate_variants
    if len(candidates) == 1:
        return candidates[0]
    family = catalogue.family_of(candidates[0])
    if set(catalogue.variants_of(family)) != set(candidates):
        raise ValueError(f"workload {workload.application!r}: candidates {candidates} are neither one variant "
                         f"nor the whole family {family!r} ({catalogue.variants_of(family)})")
    return family
