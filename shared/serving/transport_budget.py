"""What the transport takes of a query's SLO outside compute: the core's one online model of the live path.

The papers' policies treat a query's whole SLO as queueing and compute. Live, a batch the core sends at
``t`` starts computing a hop later (the dispatch topic, the worker's read and decode, or the end of the
batch before it on a pipelined worker), and its answers reach their clients another hop after the compute
ends (the results are published one by one, then cross Kafka; the batch's end event takes the same way
to the scheduler, after the last of them). `TransportBudget` learns both from every finished batch (the
worker stamps its compute start; the core knows when it dispatched and when it heard the end) and
reserves a high quantile of each: policies then plan compute to end by ``sent + SLO - reserve``
(`PendingQuery.deadline_s`), and nothing in a policy knows Kafka. The simulator's messages travel the
same fitted hops, so it drives the same budget; an ideal simulator measures zero and reserves nothing.

Memory is bounded (the last ``window`` batches), and a delay far beyond its hop's median is a stall of
the machine (a pause of the broker, the collector, a starved CPU): it is counted, not fitted, by the rule
the simulator's transport fit uses too (`without_stalls`).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

#: a delay beyond its hop's median plus this many median absolute deviations (and at least `STALL_FLOOR_S`
#: beyond the median) is a stall, not the hop's latency: a stall holds up the messages of its moment
#: together, so fitted as a hop's tail it would slow every message
STALL_MADS = 30.0
STALL_FLOOR_S = 0.005

#: the two hops a batch's path adds to its compute, as `TransportBudget` measures them
HOPS = ("start", "answer")


def without_stalls(delays_s: Sequence[float] | np.ndarray) -> np.ndarray:
    """The delays (clipped at 0) that are not stalls."""
    values = np.clip(np.asarray(delays_s, dtype=float), 0.0, None)
    if not len(values):
        return values
    median = np.median(values)
    limit = median + max(STALL_MADS * np.median(np.abs(values - median)), STALL_FLOOR_S)
    return values[values <= limit]


class TransportBudget:
    """The reserve a query's compute must leave for the transport, learnt online.

    Parameters
    ----------
    quantile : the quantile of each hop reserved (0.95: the sum of two hops' 95th percentiles leaves
        about one batch in a hundred late at the transport's own tail).
    prior_s : the reserve before ``min_samples`` batches were measured (live, a cold broker's hops).
    window : batches kept (memory is bounded); the quantiles are refitted every ``refit_every``.
    """

    def __init__(self, *, quantile: float = 0.95, prior_s: float = 0.0, window: int = 1024,
                 refit_every: int = 32, min_samples: int = 32) -> None:
        if not 0.0 < quantile <= 1.0:
            raise ValueError(f"`quantile` must be in (0, 1], got {quantile}")
        self.quantile = quantile
        self._samples = {hop: deque(maxlen=window) for hop in HOPS}
        self._refit_every = refit_every
        self._min_samples = min_samples
        self._since_fit = 0
        self._quantiles_s = {hop: prior_s / len(HOPS) for hop in HOPS}
        self.reserve_s = prior_s
        #: stalls left out of the last fit, per hop
        self.stalls = {hop: 0 for hop in HOPS}

    def observe(self, *, start_s: float, answer_s: float) -> None:
        """One finished batch: ``start_s`` from its dispatch to its compute's start, ``answer_s`` from its
        compute's end to the core hearing of it (after its last answer was sent)."""
        self._samples["start"].append(start_s)
        self._samples["answer"].append(answer_s)
        self._since_fit += 1
        if self._since_fit >= self._refit_every and len(self._samples["start"]) >= self._min_samples:
            self._refit()

    def quantiles_ms(self) -> dict[str, float]:
        """Each hop's reserved quantile, in ms (the scheduler exports them)."""
        return {hop: q * 1000.0 for hop, q in self._quantiles_s.items()}

    def _refit(self) -> None:
        self._since_fit = 0
        for hop, samples in self._samples.items():
            kept = without_stalls(samples)
            self.stalls[hop] = len(samples) - len(kept)
            self._quantiles_s[hop] = float(np.quantile(kept, self.quantile)) if len(kept) else 0.0
        self.reserve_s = sum(self._quantiles_s.values())
