"""Per-device batching: Proteus's proactive, non-work-conserving rule (§5) and the baselines' rules.

Every policy answers three questions about one worker's queue (queries one variant may serve, in
arrival order) when the worker is idle:

- `num_hopeless`: how many head queries to give up on (dropped explicitly, counted as violations);
- `batch_rows`: how many of the remaining head queries to run now (0 = wait);
- `wake_at_s`: when waiting, the time at which the answer changes even if nothing else happens.

A batch of ``b`` queries costs the profiled latency of the smallest profiled size ``>= b`` (the
project's profile lookup rule), so any ``b`` up to the largest allowed batch may run.

============== ================================================= ===============
policy         runs                                              default ``drop``
============== ================================================= ===============
``proteus``    at the latest start that still admits one more    ``batch``
               query (T_exp(1) - T_proc(q+1)), or at B_max
``nexus``      as soon as the worker is free, min(queue, B_max)  ``batch``
``aimd``       as soon as the worker is free, min(queue, limit); ``alone``
               limit one profiled size up after an on-time full
               batch, one down after a late one
``fixed``      as soon as the worker is free, min(queue, size)   ``alone``
``timer``      at B_max queries, or T_exp(1) - T_proc(B_max)     ``alone``
============== ================================================= ===============

Which head queries are given up on (``drop``): ``batch``, those that would miss their deadline in the
batch the queue forms now, min(queue, B_max) (Nexus's early drop; the authors' artifact does this for
Proteus too); ``alone``, those that would miss it even run alone (the paper's "proactive" minimum);
``lazy``, those queued for more than twice their SLO (Clipper in the artifact). Shrinking a batch
instead of dropping its head would keep every query a little longer but cut throughput exactly when
the device is overloaded, so the default for Proteus is ``batch``.

``B_max`` is the largest batch whose latency is below half the query's SLO on this worker
(`shared.proteus.capacity.max_batch_size`), at least 1.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from shared.policy.base import BatchingPolicy, PendingQuery, WorkerView
from shared.profiles.format import ProfileSet, VariantProfile
from shared.profiles.learned import LearnedProfiles
from shared.proteus.capacity import device_memory, max_batch_size

Drop = Literal["batch", "alone", "lazy"]
_DROPS = ("batch", "alone", "lazy")


class QueueBatching(BatchingPolicy):
    """Shared machinery: profiled latencies, ``B_max``, and the proactive drop rule.

    Parameters
    ----------
    profiles : latency profiles per (variant, device type).
    drop : which head queries to give up on: ``batch``, ``alone`` or ``lazy`` (module docstring);
        default per policy.
    batch_sizes : batch sizes ``B_max`` may take (default: every profiled size).
    memory_mb : optional device memory per device type, for ``B_max``.

    The profiles are corrected by the service times finished batches showed (`LearnedProfiles`): the
    latencies it batches on and ``B_max`` follow what the device delivers.
    """

    name = "queue"
    default_drop: Drop = "alone"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        drop: Drop | None = None,
        batch_sizes: Iterable[int] | None = None,
        memory_mb: Mapping[str, float] | None = None,
    ) -> None:
        drop = drop or self.default_drop
        if drop not in _DROPS:
            raise ValueError(f"`drop` must be one of {_DROPS}, got {drop!r}")
        self.drop = drop
        self._batch_sizes = None if batch_sizes is None else tuple(sorted(set(batch_sizes)))
        self._memory = memory_mb
        self._bmax: dict[tuple[str, str, float, int], int] = {}
        self.on_profiles(profiles)

    def on_profiles(self, profiles: ProfileSet) -> None:
        """Batch on these profiles, corrected afresh by the batches that finish from now on."""
        self.learned = LearnedProfiles(profiles)
        self._profiles = profiles
        self._version = 0
        self._bmax.clear()

    def observe(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        self.learned.observe(device, variant, batch_size, latency_ms)
        if self.learned.version != self._version:
            self._version = self.learned.version
            self._profiles = self.learned.profiles()
            self._bmax.clear()

    def profile(self, worker: WorkerView, variant: str) -> VariantProfile:
        """The (learned) profile batching decides on."""
        return self._profiles.get(variant, worker.device)

    def latency_s(self, worker: WorkerView, variant: str, rows: int) -> float:
        profile = self._profiles.get(variant, worker.device)
        return profile.latency_ms(min(rows, profile.max_batch)) / 1000.0

    def max_rows(self, worker: WorkerView, variant: str, slo_ms: float) -> int:
        key = (worker.device, variant, slo_ms, worker.max_batch)
        b = self._bmax.get(key)
        if b is None:
            profile = self._profiles.get(variant, worker.device)
            b = max_batch_size(profile, slo_ms, batch_sizes=self._batch_sizes,
                               memory_mb=device_memory(self._memory, worker.device))
            b = self._bmax[key] = max(1, min(b, worker.max_batch))
        return b

    def num_hopeless(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        """How many head queries to give up on now, by the ``drop`` rule."""
        k, n = 0, len(queue)
        if self.drop == "lazy":
            while k < n and now_s > queue[k].arrival_s + 2.0 * queue[k].slo_ms / 1000.0:
                k += 1
            return k
        alone = self.latency_s(worker, variant, 1)
        while k < n:
            rows = 1 if self.drop == "alone" else min(n - k, self.max_rows(worker, variant, queue[k].slo_ms))
            if now_s + (alone if rows == 1 else self.latency_s(worker, variant, rows)) <= queue[k].deadline_s:
                break
            k += 1
        return k

    def wake_at_s(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> float | None:
        return None

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        raise NotImplementedError


class ProteusBatching(QueueBatching):
    """Proteus: wait while one more query could still join without the head missing its deadline.

    With ``q`` queries queued and head deadline ``T_exp(1)``, the batch waits until
    ``T_max_wait(q+1) = T_exp(1) - T_proc(q+1)``; an arrival before then makes the test move to
    ``q+2``; once it is past (or ``q`` reached ``B_max``) the ``q`` queries run. A batch shrinks below
    ``q`` only if the worker became free too late for all of them (``fit``).

    Examples
    --------
    >>> from shared.profiles.format import DeviceType, VariantProfile
    >>> profiles = ProfileSet(source="doc", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0)],
    ...     variants=[VariantProfile(variant="m", family="f", device="cpu", max_batch=8,
    ...                              batch_latency_ms={1: 10.0, 2: 15.0, 4: 25.0, 8: 45.0})])
    >>> w = WorkerView("w", "cpu", ("m",), 0, 0.0, 0.0, 8)
    >>> q = [PendingQuery("a", "app", 1, 0.0, 100.0, ("m",))]
    >>> policy = ProteusBatching(profiles)
    >>> policy.batch_rows(0.0, q, w, "m"), policy.wake_at_s(0.0, q, w, "m")   # wait until 0.1 - 0.015
    (0, 0.085)
    >>> policy.batch_rows(0.085, q, w, "m")
    1
    """

    name = "proteus"
    default_drop = "batch"

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        if not queue:
            return 0
        head = queue[0]
        bmax = self.max_rows(worker, variant, head.slo_ms)
        q = min(len(queue), bmax)
        if len(queue) < bmax and now_s < self._next_wait(head, worker, variant, q):
            return 0
        return self._fit(now_s, q, head.deadline_s, worker, variant)

    def wake_at_s(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> float | None:
        if not queue:
            return None
        head = queue[0]
        bmax = self.max_rows(worker, variant, head.slo_ms)
        return None if len(queue) >= bmax else self._next_wait(head, worker, variant, len(queue))

    def _next_wait(self, head: PendingQuery, worker: WorkerView, variant: str, q: int) -> float:
        """``T_max_wait(q+1)``: the latest start of a batch that still includes one more query."""
        return round(head.deadline_s - self.latency_s(worker, variant, q + 1), 9)

    def _fit(self, now_s: float, q: int, deadline: float, worker: WorkerView, variant: str) -> int:
        b = q
        while b > 1 and now_s + self.latency_s(worker, variant, b) > deadline:
            b -= 1
        return b


class NexusBatching(QueueBatching):
    """Nexus's early-drop batching: work-conserving; drop heads that would miss in the batch to run."""

    name = "nexus"
    default_drop = "batch"

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        return min(len(queue), self.max_rows(worker, variant, queue[0].slo_ms)) if queue else 0


@dataclass(slots=True)
class _AimdState:
    variant: str
    #: index of the batch limit in the worker's profiled batch sizes
    level: int = 0
    #: earliest deadline in the batch last sent, until its outcome is known
    pending_deadline: float | None = None
    #: whether that batch used the whole limit (only a full batch tests a larger size)
    pending_full: bool = False


class AimdBatching(QueueBatching):
    """Clipper's AIMD over the profiled batch sizes, as the authors' artifact runs it.

    The limit moves one profiled size up after an on-time batch that used all of it, and one size
    down (halving, on a power-of-two profile) after a batch with a late query. Reactive: it never looks
    at deadlines when deciding, only at whether the previous batch on the worker finished late (learned
    from ``worker.available_at_s`` when the worker is next idle). Work-conserving. Plugged into Proteus
    it drops like Proteus's workers (``alone``); Clipper itself drops only ``lazy``-ily.
    """

    name = "aimd"

    def __init__(self, profiles: ProfileSet, **options: Any) -> None:
        super().__init__(profiles, **options)
        self._state: dict[str, _AimdState] = {}

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        if not queue:
            return 0
        sizes = [b for b in self._profiles.get(variant, worker.device).batch_latency_ms if b <= worker.max_batch] or [1]
        state = self._state.get(worker.worker_id)
        if state is None or state.variant != variant:
            state = self._state[worker.worker_id] = _AimdState(variant)
        if state.pending_deadline is not None and worker.inflight == 0:
            if worker.available_at_s > state.pending_deadline + 1e-9:
                state.level = max(0, state.level - 1)
            elif state.pending_full:
                state.level = min(len(sizes) - 1, state.level + 1)
        limit = sizes[min(state.level, len(sizes) - 1)]
        rows = min(len(queue), limit)
        state.pending_deadline = min(q.deadline_s for q in itertools.islice(queue, rows))
        state.pending_full = rows == limit
        return rows


class FixedBatching(QueueBatching):
    """A fixed batch size, work-conserving (the "w/o adaptive batching" ablation uses size 1)."""

    name = "fixed"

    def __init__(self, profiles: ProfileSet, *, size: int = 1, **options: Any) -> None:
        super().__init__(profiles, **options)
        if size < 1:
            raise ValueError(f"`size` must be >= 1, got {size}")
        self._size = size

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        return min(len(queue), self._size, worker.max_batch)


class TimerBatching(QueueBatching):
    """INFaaS-style: run at ``B_max`` queries, or when the head can just still finish a ``B_max`` batch."""

    name = "timer"

    def batch_rows(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> int:
        if not queue:
            return 0
        bmax = self.max_rows(worker, variant, queue[0].slo_ms)
        if len(queue) >= bmax or now_s >= self._timer(queue[0], worker, variant, bmax):
            return min(len(queue), bmax)
        return 0

    def wake_at_s(self, now_s: float, queue: Sequence[PendingQuery], worker: WorkerView, variant: str) -> float | None:
        if not queue:
            return None
        bmax = self.max_rows(worker, variant, queue[0].slo_ms)
        return None if len(queue) >= bmax else self._timer(queue[0], worker, variant, bmax)

    def _timer(self, head: PendingQuery, worker: WorkerView, variant: str, bmax: int) -> float:
        return round(head.deadline_s - self.latency_s(worker, variant, bmax), 9)


BATCHING: dict[str, type[QueueBatching]] = {
    cls.name: cls for cls in (ProteusBatching, NexusBatching, AimdBatching, FixedBatching, TimerBatching)
}


def make_batching(name: str, profiles: ProfileSet, **options: Any) -> QueueBatching:
    """A batching policy by name (``proteus``, ``nexus``, ``aimd``, ``fixed``, ``timer``)."""
    try:
        cls = BATCHING[name]
    except KeyError:
        raise ValueError(f"unknown `batching` {name!r}; valid: {', '.join(sorted(BATCHING))}") from None
    return cls(profiles, **options)
