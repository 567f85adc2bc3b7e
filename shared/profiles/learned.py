"""Profiles as the fleet shows them: each profiled latency corrected by what finished batches took.

A profile is measured once, off the serving path; live, a batch also costs what Kafka and the worker
add around its compute (publishing each result and the batch's end, reading the next batch), and a
measured profile may promise less than its device delivers (a noisy measurement, a busier host). A
plan or batch size built on the promise routes more to a worker than it serves. `LearnedProfiles`
keeps, per (variant, device type, profiled batch size), a moving average of the compute that batches
showed, and per device type the overhead a busy worker spends per batch beyond it; `profiles` gives the
profile set with each latency the larger of profiled and learned, plus that overhead. Batches of a size
not seen yet are scaled by the variant's worst observed ratio on that device. Capacity models (the
Proteus planner's B_max / T_proc, its batching and router) read it instead of the bare profiles, in the
simulator and live alike.
"""
from __future__ import annotations

from schemas import BatchFinished
from shared.profiles.format import ProfileSet, VariantProfile

#: a batch that started within this long of the previous batch's end event went straight on: the gap is
#: the worker's overhead per batch, not idle time
BACK_TO_BACK_S = 0.010


class LearnedProfiles:
    """Profiles corrected by observed service times (see the module docstring).

    Parameters
    ----------
    profiles : the measured profiles it starts from (and never goes below).
    weight : of a new observation in the moving averages.
    min_batches : observations of a (variant, device, size) before its average counts.
    tolerance : relative change of a latency that makes `profiles` publish a new set (and `version` move).
    refresh_every : observations between two looks at whether the set moved.
    """

    def __init__(self, profiles: ProfileSet, *, weight: float = 0.1, min_batches: int = 5,
                 tolerance: float = 0.05, refresh_every: int = 25) -> None:
        #: the profiles it was made from
        self.configured = profiles
        #: the profiles it corrects (the configured ones until `rebase`)
        self.base = profiles
        self._weight = weight
        self._min_batches = min_batches
        self._tolerance = tolerance
        self._compute: dict[tuple[str, str, int], list[float]] = {}
        self._overhead_ms: dict[str, float] = {}
        self._last_event_s: dict[str, float] = {}
        self._refresh_every = refresh_every
        self._unseen = 0
        self._current = profiles
        #: moves whenever `profiles` changed
        self.version = 0

    def rebase(self, profiles: ProfileSet) -> None:
        """Correct ``profiles`` from now on (a real worker measured its machine); what batches showed is
        kept for the (variant, device, size) both sets profile, and `version` moves."""
        self.base = profiles
        self._current = self._corrected()
        self.version += 1

    def observe(self, device: str, variant: str, rows: int, compute_ms: float) -> None:
        """A batch of ``rows`` took ``compute_ms`` on ``device``."""
        self._average_compute(device, variant, rows, compute_ms)
        self._refresh()

    def observe_event(self, event: BatchFinished) -> None:
        """A worker's batch-finished event: its compute, and the overhead around it (publishing its results
        and end, and the gap from the previous batch's end when the worker went straight on)."""
        if event.rows:
            self._average_compute(event.device, event.variant, event.rows, event.compute_ms)
        started = event.compute_started_at
        previous = self._last_event_s.get(event.worker_id)
        if started is not None:
            self._last_event_s[event.worker_id] = event.at
        if started is not None and previous is not None and 0.0 <= started - previous <= BACK_TO_BACK_S:
            overhead_ms = 1000.0 * (started - previous + max(0.0, event.at - started - event.compute_ms / 1000.0))
            old = self._overhead_ms.get(event.device)
            self._overhead_ms[event.device] = overhead_ms if old is None else old + self._weight * (overhead_ms - old)
        self._refresh()

    def _average_compute(self, device: str, variant: str, rows: int, compute_ms: float) -> None:
        profile = self.base.find(variant, device)
        if profile is None or rows < 1 or rows > profile.max_batch:
            return
        key = (variant, device, profile.profiled_batch(rows))
        average = self._compute.get(key)
        if average is None:
            self._compute[key] = [compute_ms, 1]
        else:
            average[0] += self._weight * (compute_ms - average[0])
            average[1] += 1

    def overhead_ms(self, device: str) -> float:
        return self._overhead_ms.get(device, 0.0)

    def profiles(self) -> ProfileSet:
        """The corrected profile set (the same object until something moved by more than the tolerance)."""
        return self._current

    def _refresh(self) -> None:
        self._unseen += 1
        if self._unseen < self._refresh_every:
            return
        self._unseen = 0
        candidate = self._corrected()
        if any(self._moved(profile) for profile in candidate.variants):
            self._current = candidate
            self.version += 1

    def _moved(self, profile: VariantProfile) -> bool:
        published = self._current.find(profile.variant, profile.device)
        return published is None or any(
            abs(latency - published.batch_latency_ms[b]) > self._tolerance * published.batch_latency_ms[b]
            for b, latency in profile.batch_latency_ms.items())

    def _corrected(self) -> ProfileSet:
        return self.base.model_copy(update={"variants": [self._corrected_variant(p) for p in self.base.variants]})

    def _corrected_variant(self, profile: VariantProfile) -> VariantProfile:
        learned = {b: average for b in profile.batch_latency_ms
                   if (average := self._compute.get((profile.variant, profile.device, b))) is not None
                   and average[1] >= self._min_batches}
        overhead = self.overhead_ms(profile.device)
        if not learned and not overhead:
            return profile
        ratio = max([1.0, *(learned[b][0] / profile.batch_latency_ms[b] for b in learned)])
        latencies = {b: max(latency, learned[b][0] if b in learned else ratio * latency) + overhead
                     for b, latency in profile.batch_latency_ms.items()}
        return profile.model_copy(update={"batch_latency_ms": latencies})
