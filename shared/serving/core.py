"""`SchedulerCore`: the one serving loop, driven by Kafka live and by a virtual clock in simulation.

It admits queries (or says why not), keeps them in one queue, shows the policy a lower priority class only
while a higher one leaves room (`PriorityGate`), drops those that can no longer finish in time, tracks
workers from their events, re-queues the work of workers that were lost, and asks the dispatch policy what
to send where. It learns from every finished batch what the transport adds around a compute
(`TransportBudget`) and gives each query the compute deadline that leaves it: the policies plan in the time
the transport leaves them, without knowing Kafka. It reads time only from the
clock it is given and never does I/O: its answer to each `step` is a `Step`, which the caller carries out.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from schemas import (NUMPY_DATATYPES, BatchFinished, BatchRefused, MeasuredLatency, VariantLoaded, VariantUnloaded,
                     WorkerHeartbeat, WorkerStopped)
from shared.catalogue import Catalogue, QueryRejected, Resolution
from shared.policy.base import Assignment, DispatchPolicy, FleetPlan, PendingQuery, WorkerView
from shared.profiles.format import VariantProfile
from shared.profiles.measured import AnnouncedMeasurements
from shared.serving.drift import DriftChange, ProfileDrift
from shared.serving.priorities import PriorityGate
from shared.serving.queue import AdmissionQueue, Queued
from shared.serving.transport_budget import TransportBudget
from shared.serving.wording import duration

if TYPE_CHECKING:
    from shared.settings import Settings

Clock = Callable[[], float]


class AdmissionRequest(Protocol):
    """What the core reads of a query (the `Query` message has it; so does the simulator's query)."""

    query_id: str
    application: str
    model: str | None
    batch_size: int
    slo_ms: float
    accuracy_floor: float | None
    #: its priority class (1 served first, 9 last), or None: its application's default
    priority: int | None
    #: its OIP input tensors (``shape``, ``datatype``), or None
    inputs: Sequence[object] | None
    #: what its inputs add to a dispatched batch's message (bytes)
    payload_bytes: int
    #: the client's send time, on the clock the core is given: the deadline counts from it
    sent_at: float


#: numpy's datatype names (profiles) -> the Open Inference Protocol's (queries)
OIP_DATATYPES = {numpy: oip for oip, numpy in NUMPY_DATATYPES.items()}


class ModelInput(NamedTuple):
    """What a variant's model takes: rows of this shape and datatype, and encoded images if it says how to
    prepare them."""

    row: tuple[int, ...]
    datatype: str
    images: bool

    def accepts(self, row: tuple[int, ...], datatype: str) -> bool:
        if datatype == "BYTES":
            return self.images and not row
        return (row, datatype) == (self.row, self.datatype)

    def __str__(self) -> str:
        rows = f"rows of shape {list(self.row)} of {self.datatype}"
        return f"{rows} or encoded images (BYTES of shape [n])" if self.images else rows


class Rejection(NamedTuple):
    """Why a query is not served."""

    reason: str
    #: the query id is another query's (a duplicate): the answer must not be published under it
    foreign_id: bool = False


#: how often the live scheduler steps the core unasked (drops, silent workers, batches waiting on purpose),
#: and so the step a policy that waits on purpose counts in, live and in a replay of it
STEP_INTERVAL_S = 0.05


@dataclass(frozen=True, slots=True)
class CoreConfig:
    #: a query's deadline is its send time plus this many SLOs; it is dropped once it cannot make it
    drop_after_slo_multiple: float = 1.0
    #: the quantile of each transport hop a query's compute leaves room for (`TransportBudget`), the
    #: reserve before any batch was measured, and the largest share of a query's SLO it may take
    transport_quantile: float = 0.95
    transport_prior_s: float = 0.0
    transport_max_share: float = 0.25
    #: a worker whose full batch in flight (or one that left queries queued) is predicted to finish within
    #: this long is offered its next batch already (at most two in flight), so that it does not idle while a
    #: batch travels to it and its end travels back; 0: one batch at a time (the simulator, whose messages
    #: take no time)
    pipeline_lead_s: float = 0.0
    #: ... behind any batch that was not full too, even one that took every query queued: for machines
    #: whose batch time grows with its rows, where a bigger batch gains nothing and the idle round trip
    #: costs a share of every small batch
    pipeline_partial_batches: bool = False
    #: judge the work queued ahead of a query by what a busy worker's batches were seen to take beyond
    #: their profiled compute: live, Kafka and the host add to every batch
    learn_service_rate: bool = False
    #: a worker silent this long is lost (its unfinished batches are re-queued)
    worker_timeout_s: float = math.inf
    #: prefix of batch ids: unique per scheduler instance, so a restarted one never reuses an id
    batch_id_prefix: str = "b"
    #: a query's ``sent_at`` may be this far ahead of the core's clock or off its message's timestamp
    max_clock_skew_s: float = math.inf
    #: a query id admitted within this window (and among the last ``duplicate_window_size``) is not
    #: served again
    duplicate_window_s: float = 600.0
    duplicate_window_size: int = 200_000
    #: the most payload bytes one batch may carry, so that its message stays under the transport's cap: a
    #: policy's batch beyond it is cut (what is cut off waits at the head of the queue for the next one),
    #: and a query beyond it alone is rejected at admission
    max_batch_payload_bytes: float = math.inf
    #: the priority gate (`shared.serving.priorities`): the most lower-class work shown to the policy, as a
    #: share of the tightest SLO of a higher class about (``math.inf``: no gate, every class shown at once,
    #: the baseline of make bench-priorities); how long a class stays about after its latest query; and the
    #: class of each application's queries that name none
    priority_hold_share: float = 0.35
    priority_memory_s: float = 60.0
    application_priority: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: "Settings", *, batch_id_prefix: str) -> "CoreConfig":
        return cls(drop_after_slo_multiple=settings.drop_after_slo_multiple,
                   transport_quantile=settings.transport_quantile,
                   transport_prior_s=settings.transport_prior_ms / 1000.0,
                   transport_max_share=settings.transport_max_share,
                   pipeline_lead_s=settings.pipeline_lead_ms / 1000.0,
                   pipeline_partial_batches=settings.pipeline_partial_batches, learn_service_rate=True,
                   worker_timeout_s=settings.worker_timeout_s, batch_id_prefix=batch_id_prefix,
                   max_clock_skew_s=settings.max_clock_skew_s, duplicate_window_s=settings.duplicate_window_s,
                   max_batch_payload_bytes=settings.max_batch_payload_bytes,
                   priority_hold_share=settings.priority_hold_share, priority_memory_s=settings.priority_memory_s,
                   application_priority=settings.application_priority)


@dataclass(slots=True)
class Inflight:
    items: list[Queued]
    variant: str
    rows: int
    predicted_start_s: float
    predicted_finish_s: float
    dispatched_s: float
    #: queries of its application were still queued when it was sent: it did not take all the work there was
    left_work: bool = False


@dataclass(slots=True)
class TrackedWorker:
    worker_id: str
    device: str
    emulated: bool
    variants: tuple[str, ...]
    max_batch: int
    last_seen_s: float
    #: when it joined or its last batch's end was heard
    available_at_s: float
    incarnation: str | None = None
    inflight: dict[str, Inflight] = field(default_factory=dict)
    #: when its inflight batches are predicted to finish
    busy_until_s: float = 0.0
    #: the view while idle (None while busy), which only changes with the fields above
    idle_view: WorkerView | None = None
    #: what a batch that waited at the worker was seen to take beyond its profiled compute, from the end
    #: of the batch before it to its own end heard: the worker's and the host's overhead per batch when
    #: busy (moving average)
    overhead_s: float = 0.0

    def view(self, now_s: float, config: CoreConfig) -> WorkerView:
        if not self.inflight:
            if self.idle_view is None:
                self.idle_view = WorkerView(self.worker_id, self.device, self.variants, 0, 0.0, self.available_at_s,
                                            self.max_batch)
            return self.idle_view
        finish = self.busy_until_s
        # a worker about to finish takes its next batch now: to the policy it is free from ``finish`` on
        inflight = 0 if self.takes_next(now_s, config) else len(self.inflight)
        return WorkerView(self.worker_id, self.device, self.variants, inflight,
                          max(0.0, finish - now_s) * 1000.0, finish, self.max_batch)

    def takes_next(self, now_s: float, config: CoreConfig) -> bool:
        """May it be sent a batch now: nothing in flight, or one batch about to finish within the pipeline
        lead that was full or left queries queued behind it (a batch that was not full and left none took
        all the work there was: what arrives since is better batched after it ends), or any batch about to
        finish with ``pipeline_partial_batches``.

        A batch a policy cut short of a backlog (sized by deadlines, `shared.policy.deadlines`) is followed
        at once: on a CPU, whose batch time grows with its rows, a deadline-sized batch is a row or two, and
        waiting for each one's end to travel back held a worker idle for most of its time."""
        if not self.inflight:
            return True
        if len(self.inflight) > 1 or self.busy_until_s - now_s > config.pipeline_lead_s:
            return False
        batch = next(iter(self.inflight.values()))
        return config.pipeline_partial_batches or batch.rows >= self.max_batch or batch.left_work


class Dispatch(NamedTuple):
    """Send these queries, as one batch, to this worker."""

    batch_id: str
    worker_id: str
    incarnation: str | None
    variant: str
    items: tuple[Queued, ...]
    rows: int
    at_s: float
    #: of ``rows``, those that are encoded images (the worker prepares each before the batch runs)
    images: int = 0


class Step(NamedTuple):
    """What the caller must carry out after one `SchedulerCore.step`."""

    dispatches: tuple[Dispatch, ...] = ()
    #: queries answered ``dropped`` by the core or the policy, with the reason
    dropped: tuple[tuple[Queued, str], ...] = ()
    #: (worker id, variant) to load
    loads: tuple[tuple[str, str], ...] = ()


_NOTHING = Step()


class SchedulerCore:
    """The scheduler's state and decisions; see the module docstring.

    Parameters
    ----------
    policy : the dispatch policy; the core tells it every change through its ``on_*`` calls.
    catalogue : applications, families and profiles (admission and drop deadlines).
    config : the drop rule, worker timeout and batch-id prefix.
    clock : seconds, wall or virtual; the only time the core knows.
    """

    def __init__(self, policy: DispatchPolicy, catalogue: Catalogue, config: CoreConfig, *, clock: Clock) -> None:
        self.policy = policy
        self.config = config
        self.queue = AdmissionQueue()
        self.priorities = PriorityGate(hold_share=config.priority_hold_share, memory_s=config.priority_memory_s,
                                       defaults=config.application_priority)
        self.workers: dict[str, TrackedWorker] = {}
        #: how many workers compute for real (queries without inputs may not go there)
        self._real_workers = 0
        #: variants a query without inputs may be served by: never loaded on a real worker, whose first such
        #: load would turn every later query of theirs into a rejection
        self._inputless_variants: set[str] = set()
        #: ids of the workers with nothing in flight
        self._idle: set[str] = set()
        self._clock = clock
        #: the catalogue as configured (and registered), before the workers' measurements
        self._configured = catalogue
        self._catalogue = catalogue
        #: what real workers measured on their machines: the catalogue serves by it
        self._announced = AnnouncedMeasurements()
        #: how far each real worker's batches run from what the catalogue predicts, and its latest changes
        #: (the live scheduler flags them, the simulator has no real worker)
        self.drift = ProfileDrift()
        self.drift_changes: deque[DriftChange] = deque(maxlen=256)
        self._resolutions: dict[tuple, Resolution | str] = {}
        self._fastest: dict[tuple[tuple[str, ...], int, int], float] = {}
        self._profiles: dict[tuple[str, str], VariantProfile | None] = {}
        self._accepted: dict[tuple, tuple[str, ...] | str] = {}
        #: (worker, candidate set) -> (rows, profiled seconds) of every batch size it may run
        self._profiled_batches: dict[tuple[str, tuple[str, ...]], list[tuple[int, float]]] = {}
        #: candidate set -> rows per second the fleet serves of it at best (see `_capacity_rows_per_s`)
        self._capacity: dict[tuple[str, ...], float] = {}
        #: query id -> (admitted at, delivery), oldest first: the duplicate window
        self._recent: OrderedDict[str, tuple[float, Hashable | None]] = OrderedDict()
        self._batches = 0
        self.transport = TransportBudget(quantile=config.transport_quantile, prior_s=config.transport_prior_s)

    @property
    def catalogue(self) -> Catalogue:
        return self._catalogue

    @catalogue.setter
    def catalogue(self, catalogue: Catalogue) -> None:
        """A new catalogue (a model was registered): admission decides afresh, with what real workers
        measured still in it."""
        self._configured = catalogue
        self._use(catalogue.with_measured(self._announced.measured, self._announced.prices))

    def _use(self, catalogue: Catalogue) -> None:
        """Serve by ``catalogue`` from now on, and so does the policy."""
        self._catalogue = catalogue
        self._resolutions.clear()
        self._fastest.clear()
        self._profiles.clear()
        self._accepted.clear()
        self._forget_capacity()
        self.policy.on_profiles(catalogue.profiles)

    # -- queries --------------------------------------------------------------------------------
    def admit(self, query: AdmissionRequest, *, payload: object = None, ack_token: Hashable | None = None,
              delivery: Hashable | None = None, transport_s: float | None = None) -> Rejection | None:
        """Queue a servable query and return None, or return why it is rejected.

        ``delivery`` names the message copy (live: its partition and offset): the same copy read again is
        a redelivery and ignored, another message with a recent query id is a duplicate. ``transport_s``
        is when the transport says the message was made; ``sent_at`` must agree with it. A query that
        can no longer make its deadline is queued all the same: the next `step` drops it, saying by how
        much it would have missed.
        """
        now = self._clock()
        seen = self._recent.get(query.query_id)
        if seen is not None:
            if delivery is not None and seen[1] == delivery:
                return None
            return Rejection(f"duplicate query id: {query.query_id!r} was admitted {duration(now - seen[0])} "
                             f"ago, and a query id is served once", foreign_id=True)
        problem = self._clock_problem(query.sent_at, now, transport_s)
        if problem is not None:
            return Rejection(problem)
        if query.payload_bytes > self.config.max_batch_payload_bytes:
            return Rejection(f"its inputs take {query.payload_bytes:,} bytes, more than the "
                             f"{self.config.max_batch_payload_bytes:,.0f} a batch's message may carry")
        resolution = self._resolve(query)
        if isinstance(resolution, str):
            return Rejection(resolution)
        candidates = self._accepting(resolution.candidates, query.inputs)
        if isinstance(candidates, str):
            return Rejection(candidates)
        if query.inputs is None:
            if self._real_workers and self._real_device_hosts(candidates):
                return Rejection("query has no `inputs` and a real (non-emulated) device may serve it")
            self._inputless_variants.update(candidates)
        self._remember(query.query_id, now, delivery)
        arrival = min(query.sent_at, now)
        reserve = self._reserve_s(query.slo_ms)
        priority = self.priorities.class_of(query.application, query.priority)
        self.priorities.seen(query.application, priority, query.slo_ms, now)
        pending = PendingQuery(query.query_id, query.application, query.batch_size, arrival, query.slo_ms, candidates,
                               reserve, priority)
        images = query.batch_size if query.inputs is not None and query.inputs[0].datatype == "BYTES" else 0
        fastest = self._fastest_s(candidates, query.batch_size, images)
        ahead_until = now + self.queue.rows_waiting(query.application) / self._capacity_rows_per_s(candidates)
        deadline = arrival + self.config.drop_after_slo_multiple * query.slo_ms / 1000.0
        last_start = deadline - fastest - reserve
        drop_at = last_start if ahead_until <= last_start else -math.inf
        item = Queued(pending, payload, ack_token, now, fastest, deadline, drop_at, ahead_until, resolution.note,
                      query.payload_bytes, images)
        if self.priorities.bound_s(query.application, priority, now) < math.inf:
            self.queue.hold(item)  # the next `step` shows it if the higher classes leave room
        else:
            self.queue.push(item)
            self.policy.on_query_added(pending)
        return None

    # -- workers --------------------------------------------------------------------------------
    def on_worker_event(self, event: object) -> None:
        """A worker event message, as the workers publish it (live and in the simulator alike); the policy
        hears it after the core."""
        if isinstance(event, WorkerHeartbeat):
            self.worker_seen(event.worker_id, device=event.device, emulated=event.emulated,
                             variants=tuple(event.variants), max_batch=event.max_batch, incarnation=event.incarnation)
            self.measurements_heard(event.worker_id, event.device, event.measured, event.price_per_hour)
        elif isinstance(event, BatchFinished):
            self.batch_finished(event.worker_id, event.batch_id, event.compute_ms, rows=event.rows,
                                started_s=event.compute_started_at)
        elif isinstance(event, BatchRefused):
            self.batch_refused(event.worker_id, event.batch_id, event.variant)
        elif isinstance(event, VariantLoaded):
            self.variant_changed(event.worker_id, event.variant, loaded=True)
        elif isinstance(event, VariantUnloaded):
            self.variant_changed(event.worker_id, event.variant, loaded=False)
        elif isinstance(event, WorkerStopped):
            self.worker_lost(event.worker_id)
        self.policy.on_worker_event(event, self._clock())

    def worker_seen(self, worker_id: str, *, device: str, emulated: bool, variants: tuple[str, ...],
                    max_batch: int, incarnation: str | None) -> None:
        """A heartbeat: a new worker joins; a known one is alive, and may host other variants now."""
        now = self._clock()
        record = self.workers.get(worker_id)
        if record is not None and record.incarnation != incarnation:
            self.worker_lost(worker_id)  # it restarted: what its previous life held is lost
            record = None
        if record is None:
            record = self.workers[worker_id] = TrackedWorker(worker_id, device, emulated, variants, max_batch,
                                                            last_seen_s=now, available_at_s=now,
                                                            incarnation=incarnation)
            self._idle.add(worker_id)
            self._real_workers += not emulated
            self._forget_capacity()
            self.policy.on_worker_joined(record.view(now, self.config))
            return
        record.last_seen_s = now
        if (record.variants, record.max_batch) != (variants, max_batch):
            record.variants, record.max_batch, record.idle_view = variants, max_batch, None
            self._forget_capacity()
            self.policy.on_worker_joined(record.view(now, self.config))

    def measurements_heard(self, worker_id: str, device: str, measured: Mapping[str, MeasuredLatency],
                           price_per_hour: float) -> None:
        """A real worker's latencies, measured on its machine: its device's profiles become them, for
        admission, drop deadlines and predicted ends alike, and for the policy's own plans (`on_profiles`).
        Where several workers of one device measured a variant, each batch size takes the median of theirs
        (a worker's measurement stays after it left)."""
        if self._announced.heard(worker_id, device, measured, price_per_hour):
            self.drift.forget(worker_id)
            self._use(self._configured.with_measured(self._announced.measured, self._announced.prices))

    def batch_finished(self, worker_id: str, batch_id: str, compute_ms: float, *, rows: int | None = None,
                       started_s: float | None = None) -> None:
        """A batch is done; ``rows`` is how many of its rows were computed (a worker skips expired ones),
        by default all; ``started_s``, when its compute started (on the core's clock), measures the
        transport around it."""
        now = self._clock()
        record = self.workers.get(worker_id)
        batch = record.inflight.pop(batch_id, None) if record is not None else None
        if batch is None:
            return  # a batch of a worker's previous life, or of another scheduler
        if started_s is not None:
            self.transport.observe(start_s=started_s - batch.dispatched_s,
                                   answer_s=now - started_s - compute_ms / 1000.0)
            self._reanchor(record, ended_s=started_s + compute_ms / 1000.0, predicted_s=batch.predicted_finish_s)
        if self.config.learn_service_rate and batch.dispatched_s < record.available_at_s:
            # it was waiting at the worker when the batch before it ended, so the worker went from one to
            # the other: whatever the gap holds beyond the profiled compute slows a busy worker down
            taken = now - record.available_at_s
            overhead = max(0.0, taken - (batch.predicted_finish_s - batch.predicted_start_s))
            record.overhead_s += 0.2 * (overhead - record.overhead_s)
            self._capacity.clear()
        if not record.emulated and (rows is None or rows == batch.rows):
            change = self.drift.observe(worker_id, batch.variant, compute_ms,
                                        (batch.predicted_finish_s - batch.predicted_start_s) * 1000.0)
            if change is not None:
                self.drift_changes.append(change)
        self._batch_left(worker_id, record, now)
        computed = batch.rows if rows is None else rows
        if computed:
            self.policy.on_batch_finished(record.device, batch.variant, computed, compute_ms)

    @staticmethod
    def _reanchor(record: TrackedWorker, *, ended_s: float, predicted_s: float) -> None:
        """A batch ended after its predicted finish: those sent on behind it start that much later too. Each
        was predicted from the one before it, so without this a worker busy batch after batch drifts by
        every batch's overhead beyond its profile, and the batches sent ahead of its end wait ever longer at it
        (on make demo's autoscaled CPU machines, 80-90 ms of a 300 ms SLO after a few seconds at the peak)."""
        late = ended_s - predicted_s
        if late <= 0.0:
            return  # an early end is not moved up: the next batch may not have reached the worker yet
        for behind in record.inflight.values():
            behind.predicted_start_s += late
            behind.predicted_finish_s += late

    def batch_failed(self, worker_id: str, batch_id: str) -> None:
        """The batch could not be sent (the transport refused its message): the worker never got it, so it
        is free again; its queries are the caller's to answer."""
        record = self.workers.get(worker_id)
        if record is not None and record.inflight.pop(batch_id, None) is not None:
            self._batch_left(worker_id, record, self._clock())

    def batch_refused(self, worker_id: str, batch_id: str, variant: str) -> None:
        """The worker no longer held the batch's variant (an autoscaler unloaded it while the batch was on its
        way): it answered none of the queries, so they go back to the head of the queue, and the worker is
        not sent that variant again until it says it holds it."""
        record = self.workers.get(worker_id)
        batch = record.inflight.pop(batch_id, None) if record is not None else None
        if batch is None:
            return
        self._batch_left(worker_id, record, self._clock())
        self.variant_changed(worker_id, variant, loaded=False)
        self._requeue(batch.items)

    def _batch_left(self, worker_id: str, record: TrackedWorker, now: float) -> None:
        """A batch left the worker (finished or handed back): it is free now unless more are on their way."""
        record.last_seen_s = record.available_at_s = now
        record.idle_view = None
        if record.inflight:
            record.busy_until_s = max(b.predicted_finish_s for b in record.inflight.values())
        else:
            self._idle.add(worker_id)

    def variant_changed(self, worker_id: str, variant: str, *, loaded: bool) -> None:
        record = self.workers.get(worker_id)
        if record is None:
            return
        hosted = set(record.variants)
        hosted.add(variant) if loaded else hosted.discard(variant)
        record.variants, record.idle_view = tuple(sorted(hosted)), None
        self._forget_capacity()
        self.policy.on_worker_joined(record.view(self._clock(), self.config))

    def worker_lost(self, worker_id: str) -> None:
        """Forget the worker; its unfinished queries go back to the head of the queue.

        Their messages were acknowledged at dispatch, so only this memory holds them now; results are
        de-duplicated by query id should the lost worker have answered some after all.
        """
        record = self.workers.pop(worker_id, None)
        if record is None:
            return
        self._idle.discard(worker_id)
        self._real_workers -= not record.emulated
        self.drift.forget(worker_id)
        self._forget_capacity()
        self.policy.on_worker_lost(worker_id)
        self._requeue([i for batch in record.inflight.values() for i in batch.items])

    def _requeue(self, items: Sequence[Queued]) -> None:
        """Dispatched queries back to the head of the queue, their messages already acknowledged."""
        self._push_front([Queued(i.pending, i.payload, None, i.admitted_s, i.fastest_s, i.deadline_s, i.drop_at_s,
                                 note=i.note, payload_bytes=i.payload_bytes, images=i.images) for i in items])

    def _push_front(self, items: list[Queued]) -> None:
        self.queue.push_front(items)
        for item in items:
            self.policy.on_query_added(item.pending)

    def release(self, moved: Callable[[Hashable], bool]) -> int:
        """Let go of the waiting queries whose message another scheduler owns now (``moved(delivery)``),
        unanswered: their messages were not acknowledged, so the new owner reads and serves them. Queries
        whose message was acknowledged already (put back from a lost worker) stay. Returns how many."""
        gone = [item for item in self.queue.waiting() if item.ack_token is not None
                and item.pending.query_id in self._recent and moved(self._recent[item.pending.query_id][1])]
        for item in gone:
            query_id = item.pending.query_id
            self.queue.pop(query_id)
            del self._recent[query_id]  # should the partition come back, the query is admitted afresh
            if not item.held:
                self.policy.on_query_removed(query_id)
        return len(gone)

    def apply_plan(self, plan: FleetPlan) -> None:
        """A planner's plan: the fleet follows it elsewhere; routing policies hear it here."""
        if plan.success:
            self.policy.on_plan(plan)

    # -- decisions ------------------------------------------------------------------------------
    def step(self) -> Step:
        """Lose silent workers, drop hopeless queries, then carry out the policy's decisions.

        The policy is asked again while its last answer changed something and a worker is still idle.
        """
        now = self._clock()
        if self.config.worker_timeout_s < math.inf:
            silent = [w.worker_id for w in self.workers.values() if now - w.last_seen_s > self.config.worker_timeout_s]
            for worker_id in silent:
                self.worker_lost(worker_id)
        hopeless = self.queue.pop_hopeless(now)
        dropped = [(item, self._hopeless_reason(item)) for item in hopeless]
        for item in hopeless:
            if not item.held:
                self.policy.on_query_removed(item.pending.query_id)
        if self.queue.held:
            dropped.extend(self._show_held(now))
        if not dropped and not (self.queue.items and self._any_takes_next(now)):
            return _NOTHING
        dispatches: list[Dispatch] = []
        loads: list[tuple[str, str]] = []
        for _ in range(len(self.workers) + 1):
            if self.queue.held and dispatches:
                dropped.extend(self._show_held(now))  # the batches sent leave room for more
            if not self.queue.items or not self._any_takes_next(now):
                break
            decision = self.policy.decide(now, self.queue.view,
                                          [w.idle_view or w.view(now, self.config) for w in self.workers.values()])
            if not decision:
                break
            if decision.loads:
                loads.extend((w, v) for w, v in decision.loads if self._may_load(w, v))
            if decision.dropped:
                dropped.extend((self.queue.pop(query_id), reason) for query_id, reason in decision.dropped)
            for assignment in decision.assignments:
                dispatches.append(self._dispatch(assignment, now))
        return Step(tuple(dispatches), tuple(dropped), tuple(loads))

    def next_wakeup_s(self) -> float | None:
        """When `step` must run although nothing arrives (the policy is waiting to fill a batch)."""
        return self.policy.next_wakeup_s()

    def depth_by_application(self) -> dict[str, int]:
        return {**{app: 0 for app in self._catalogue.applications}, **self.queue.depth_by_application()}

    # -- internals ------------------------------------------------------------------------------
    def _show_held(self, now: float) -> list[tuple[Queued, str]]:
        """Show the policy the held queries the higher classes leave room for, highest class first and newest
        first (the oldest have the least time left: under overload they are the ones shed); shed those that
        could no longer start in time behind the work shown. Returns the shed."""
        shed: list[tuple[Queued, str]] = []
        for application in self.queue.held_applications():
            for priority in self.queue.held_classes(application):
                if not self._show_class(application, priority, now, shed):
                    break  # the shown work is at this class's bound: the classes below it wait too
        return shed

    def _show_class(self, application: str, priority: int, now: float, shed: list[tuple[Queued, str]]) -> bool:
        """Show ``application``'s held queries of class ``priority`` while the shown work is within the class's
        bound (the work shown and what the soonest free worker was sent), shedding (into ``shed``) those that
        would start too late. False: some stay held."""
        bound = self.priorities.bound_s(application, priority, now)
        while (item := self.queue.newest_held(application, priority)) is not None:
            candidates = item.pending.candidate_variants
            ahead_s = (self.queue.rows_waiting(application) / self._capacity_rows_per_s(candidates)
                       + self._soonest_free_s(candidates, now))
            if ahead_s > bound:
                return False
            if now + ahead_s > item.drop_at_s:
                shed.append((self.queue.pop(item.pending.query_id), self._shed_reason(item)))
            else:
                self.queue.show(item.pending.query_id)
                item.ahead_until_s = now + ahead_s
                self.policy.on_query_added(item.pending)
        return True

    def _soonest_free_s(self, candidates: tuple[str, ...], now: float) -> float:
        """How long until the first worker hosting a candidate finishes what it was sent: a query of a higher
        class arriving now waits that long as well as for the work shown."""
        wanted = set(candidates)
        return min((max(0.0, w.busy_until_s - now) if w.inflight else 0.0 for w in self.workers.values()
                    if not wanted.isdisjoint(w.variants)), default=0.0)

    def _any_takes_next(self, now: float) -> bool:
        if self._idle:
            return True
        return self.config.pipeline_lead_s > 0.0 and any(w.takes_next(now, self.config) for w in self.workers.values())

    def _dispatch(self, assignment: Assignment, now: float) -> Dispatch:
        worker = self.workers.get(assignment.worker_id)
        variant = assignment.variant
        if worker is None or not worker.takes_next(now, self.config) or variant not in worker.variants:
            raise ValueError(f"assignment {assignment!r} to an unknown, busy or unfit worker")
        items = [self.queue.pop(query_id) for query_id in assignment.query_ids]
        rows = images = 0
        for item in items:
            rows += item.pending.batch_size
            images += item.images
            if variant not in item.pending.candidate_variants:
                raise ValueError(f"query {item.pending.query_id!r} may not run on {variant!r}")
        if not items or rows > worker.max_batch:
            raise ValueError(f"bad assignment {assignment!r} for worker {worker.worker_id!r}")
        fits = self._fitting(items)
        if fits < len(items):
            rows -= sum(item.pending.batch_size for item in items[fits:])
            images -= sum(item.images for item in items[fits:])
            self._push_front(items[fits:])
            items = items[:fits]
        batch_id = f"{self.config.batch_id_prefix}-{self._batches}"
        self._batches += 1
        starts = max(now, worker.busy_until_s) if worker.inflight else now  # after the batch it is finishing
        finish = self._predicted_finish_s(worker, variant, rows, images, starts)
        left_work = self.queue.rows_waiting(items[0].pending.application) > 0
        worker.inflight[batch_id] = Inflight(items, variant, rows, starts, finish, now, left_work)
        worker.busy_until_s, worker.idle_view = finish, None
        self._idle.discard(worker.worker_id)
        return Dispatch(batch_id, worker.worker_id, worker.incarnation, variant, tuple(items), rows, now, images)

    def _fitting(self, items: list[Queued]) -> int:
        """How many of ``items``, in order, one batch's message carries (at least one: no admitted query is
        larger than a batch may be)."""
        limit, carried = self.config.max_batch_payload_bytes, 0
        for count, item in enumerate(items):
            carried += item.payload_bytes
            if carried > limit and count:
                return count
        return len(items)

    def _resolve(self, query: AdmissionRequest) -> Resolution | str:
        key = (query.application, query.model, query.batch_size, query.slo_ms, query.accuracy_floor)
        resolution = self._resolutions.get(key)
        if resolution is None:
            try:
                resolution = self._catalogue.resolve(*key)
            except QueryRejected as exc:
                resolution = str(exc)
            if len(self._resolutions) > 65_536:
                self._resolutions.clear()
            self._resolutions[key] = resolution
        return resolution

    def _may_load(self, worker_id: str, variant: str) -> bool:
        worker = self.workers.get(worker_id)
        return worker is not None and (worker.emulated or variant not in self._inputless_variants)

    def _real_device_hosts(self, variants: tuple[str, ...]) -> bool:
        return any(not w.emulated and not set(w.variants).isdisjoint(variants) for w in self.workers.values())

    def _predicted_finish_s(self, worker: TrackedWorker, variant: str, rows: int, images: int, now_s: float) -> float:
        key = (variant, worker.device)
        profile = self._profiles.get(key, ...)
        if profile is ...:
            profile = self._profiles[key] = self._catalogue.profile(variant, worker.device)
        try:
            return now_s + profile.latency_ms(rows, images) / 1000.0
        except (AttributeError, ValueError):  # no profile, or none at this size: no prediction
            return now_s

    def _fastest_s(self, variants: tuple[str, ...], rows: int, images: int) -> float:
        key = (variants, rows, images)
        fastest = self._fastest.get(key)
        if fastest is None:
            latencies = [p.latency_ms(rows, images) for v in variants for p in self._catalogue.profiles_of(v)
                         if rows <= max(p.batch_latency_ms)]
            fastest = self._fastest[key] = min(latencies, default=0.0) / 1000.0
        return fastest

    def _shed_reason(self, item: Queued) -> str:
        """Why a query held back behind the priority gate is dropped: it can no longer start in time."""
        query, now = item.pending, self._clock()
        higher = self.priorities.higher_about(query.application, query.priority, now)
        classes = "class " + ", ".join(map(str, higher)) if higher else "a higher class"
        return (f"shed for higher priorities: held back {duration(now - item.admitted_s)} as priority class "
                f"{query.priority} while {classes} of {query.application!r} kept the fleet busy, it can no longer "
                f"start in time for its {query.slo_ms:g} ms SLO")

    def _hopeless_reason(self, item: Queued) -> str:
        if item.held:
            return self._shed_reason(item)
        now = self._clock()
        start = max(now, item.ahead_until_s)
        needs = [f"{item.fastest_s * 1000:.3g} ms on its fastest variant"]
        if item.ahead_until_s > now:
            needs.insert(0, f"{duration(item.ahead_until_s - now)} for the work queued ahead of it")
        margin = item.pending.reserve_s
        if margin > 0.0:
            needs.append(f"{duration(margin)} for the transport (the hop to the worker and the answer's way back)")
        missed = start + item.fastest_s + margin - item.deadline_s
        return (f"would miss its deadline by {duration(missed)}: sent {duration(now - item.pending.arrival_s)} ago "
                f"with a {item.pending.slo_ms:g} ms SLO, it needs {', '.join(needs)}")

    def _reserve_s(self, slo_ms: float) -> float:
        return min(self.transport.reserve_s, self.config.transport_max_share * slo_ms / 1000.0)

    def _clock_problem(self, sent_at: float, now: float, transport_s: float | None) -> str | None:
        limit = self.config.max_clock_skew_s
        if sent_at > now + limit:
            return (f"`sent_at` is {duration(sent_at - now)} ahead of the scheduler's clock; the clocks of clients "
                    f"and services may differ by at most {duration(limit)}")
        if transport_s is not None and abs(sent_at - transport_s) > limit:
            side = "before" if sent_at < transport_s else "after"
            return (f"`sent_at` is {duration(abs(sent_at - transport_s))} {side} the time the message was produced; "
                    f"they may differ by at most {duration(limit)}")
        return None

    def _accepting(self, candidates: tuple[str, ...], inputs: Sequence[object] | None) -> tuple[str, ...] | str:
        """The candidates whose model takes rows like the query's, or why none does: a numeric tensor's rows
        must be the model's, and encoded images (``BYTES`` of shape ``[n]``) go to models that say how to
        prepare them."""
        if inputs is None:
            return candidates
        tensor = inputs[0]
        row, datatype = tuple(tensor.shape[1:]), tensor.datatype
        key = (candidates, row, datatype)
        accepted = self._accepted.get(key)
        if accepted is None:
            takes = {v: self._input_of(v) for v in candidates}
            accepted = tuple(v for v, spec in takes.items() if spec is None or spec.accepts(row, datatype))
            if not accepted:
                expected = " or ".join(sorted({str(spec) for spec in takes.values() if spec is not None}))
                given = "encoded images" if datatype == "BYTES" and not row else f"rows of shape {list(row)} of {datatype}"
                accepted = f"`inputs` are {given}, but the model takes {expected}"
            self._accepted[key] = accepted
        return accepted

    def _input_of(self, variant: str) -> ModelInput | None:
        for profile in self._catalogue.profiles_of(variant):
            if profile.input_shape is not None:
                datatype = OIP_DATATYPES.get(profile.input_dtype or "float32", profile.input_dtype or "float32")
                return ModelInput(tuple(profile.input_shape), datatype, profile.image_preprocessing is not None)
        return None

    def _remember(self, query_id: str, now: float, delivery: Hashable | None) -> None:
        recent = self._recent
        recent[query_id] = (now, delivery)
        horizon = now - self.config.duplicate_window_s
        while recent and (len(recent) > self.config.duplicate_window_size or next(iter(recent.values()))[0] < horizon):
            recent.popitem(last=False)

    def _forget_capacity(self) -> None:
        self._profiled_batches.clear()
        self._capacity.clear()

    def _capacity_rows_per_s(self, candidates: tuple[str, ...]) -> float:
        """Rows per second the workers hosting a candidate serve at best (their best batch size, each
        batch taking its profiled compute plus the overhead seen): the work queued ahead of a query takes
        at least its rows over this."""
        capacity = self._capacity.get(candidates)
        if capacity is not None:
            return capacity
        capacity = 0.0
        for worker in self.workers.values():
            key = (worker.worker_id, candidates)
            batches = self._profiled_batches.get(key)
            if batches is None:
                batches = self._profiled_batches[key] = [
                    (b, latency / 1000.0) for v in candidates if v in worker.variants
                    if (p := self._catalogue.profile(v, worker.device)) is not None
                    for b, latency in p.batch_latency_ms.items() if b <= worker.max_batch]
            capacity += max((b / (latency_s + worker.overhead_s) for b, latency_s in batches), default=0.0)
        capacity = self._capacity[candidates] = capacity or math.inf
        return capacity
