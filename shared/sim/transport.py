"""What Kafka and the worker processes add to a query's path: the one hop-latency model of the simulator.

Live, a query travels client -> scheduler -> worker -> client as Kafka messages, and each worker spends
some time per batch beyond its model's compute (reading the batch, publishing the result and its event).
A simulator without these is an ideal machine: it answers sooner than live and keeps workers busier.
`TransportModel` holds each hop's measured distribution; `fit_transport` fits it from the per-hop
timestamps every result carries (`HopTimestamps`), so the model is learnt from what a run measured
(``make bench-pipeline``, a fidelity calibration, or the recorded range a replay reads), never typed in.

Hops (seconds):

- ``to_scheduler``: client send -> the scheduler reads the query;
- ``to_worker``: the scheduler dispatches a batch -> the worker reads it;
- ``publish_per_row``: after its compute a worker makes and sends each query's result in turn, so the
  k-th answer of a batch leaves k draws after the compute ended, and the batch-finished event after
  all of them;
- ``batch_overhead``: the worker's own time from sending a batch's last result to starting its next
  batch (event, next read), measured on batches that were waiting for it;
- ``to_client``: a result is sent -> the client holds it. The batch-finished event takes the same path
  to the scheduler, so the scheduler hears of the end after a draw of the same hop.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, Field

from schemas import Result, ResultStatus
from shared.serving.transport_budget import without_stalls

#: quantile levels a hop keeps: every 5% plus the tails that decide a p99
LEVELS = tuple(np.round(np.concatenate([np.arange(0.0, 0.951, 0.05), [0.975, 0.99, 0.995, 1.0]]), 4).tolist())


#: a batch dispatched this long before its worker's previous batch finished had reached the worker by then
#: (the scheduler -> worker hop takes a few milliseconds)
WAITING_S = 0.010


class HopLatency(BaseModel):
    """One hop's delay as quantiles (seconds at `LEVELS`); draws interpolate between them."""

    quantiles_s: list[float] = Field(min_length=len(LEVELS), max_length=len(LEVELS))
    samples: int = Field(ge=0)
    #: samples left out as stalls
    stalls: int = Field(default=0, ge=0)

    @classmethod
    def fit(cls, delays_s: Sequence[float]) -> "HopLatency":
        if not len(delays_s):
            return cls.zero()
        kept = without_stalls(delays_s)
        return cls(quantiles_s=np.quantile(kept, LEVELS).round(7).tolist(), samples=len(kept),
                   stalls=len(delays_s) - len(kept))

    @classmethod
    def zero(cls) -> "HopLatency":
        return cls(quantiles_s=[0.0] * len(LEVELS), samples=0)

    def draw(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray | float:
        return np.interp(rng.random(size), LEVELS, self.quantiles_s)

    def quantile_ms(self, q: float) -> float:
        return float(np.interp(q, LEVELS, self.quantiles_s)) * 1000.0


class TransportModel(BaseModel):
    """Every hop of the live path; `simulate(..., transport=...)` draws from it."""

    to_scheduler: HopLatency
    to_worker: HopLatency
    publish_per_row: HopLatency
    batch_overhead: HopLatency
    to_client: HopLatency

    def summary_ms(self) -> dict[str, dict[str, float]]:
        return {hop: {"p50": round(getattr(self, hop).quantile_ms(0.5), 3),
                      "p99": round(getattr(self, hop).quantile_ms(0.99), 3), "stalls": getattr(self, hop).stalls}
                for hop in TransportModel.model_fields}


class HopRecord(NamedTuple):
    """What one answered query says about its path: its result's `HopTimestamps`, the batch it rode in,
    and when the client received it (seconds on one clock)."""

    worker_id: str
    batch_id: str
    client_sent: float
    scheduler_received: float
    dispatched: float
    worker_received: float
    compute_started: float
    compute_finished: float
    result_sent: float
    client_received: float


def hop_records(answers: Mapping[str, tuple[Result, float]]) -> list[HopRecord]:
    """The answered queries of ``answers`` (query id -> final result, when it was held) with every hop
    stamped."""
    records = []
    for result, held in answers.values():
        t = result.timestamps
        stamps = (t.client_sent, t.scheduler_received, t.dispatched, t.worker_received, t.compute_started,
                  t.compute_finished, t.result_sent)
        if result.status is ResultStatus.OK and None not in stamps and result.worker_id and result.batch_id:
            records.append(HopRecord(result.worker_id, result.batch_id, *stamps, held))
    return records


def fit_transport(records: Iterable[HopRecord]) -> TransportModel:
    """Fit each hop from answered queries (see the module docstring for what each hop spans).

    ``to_worker`` counts once per batch, and only a batch dispatched after its worker had sent the last
    answer of the batch before: one sent sooner was read once that batch was done, so its read measures the
    batch ahead, not the hop. ``batch_overhead`` counts a batch only if it was dispatched at least
    `WAITING_S` before the batch ahead of it on its worker finished: it was waiting in the worker's
    topic, so the worker was never idle in the gap.
    """
    records = list(records)
    batches: dict[tuple[str, str], list[HopRecord]] = {}
    for r in records:
        batches.setdefault((r.worker_id, r.batch_id), []).append(r)
    publish, by_worker = [], {}
    for (worker, _), members in batches.items():
        sent = sorted(r.result_sent for r in members)
        publish += np.diff([members[0].compute_finished, *sent]).tolist()
        by_worker.setdefault(worker, []).append((members[0], sent[-1]))
    overheads, to_worker = [], []
    for runs in by_worker.values():
        runs.sort(key=lambda pair: pair[0].compute_started)
        to_worker.append(runs[0][0].worker_received - runs[0][0].dispatched)
        for (before, last_sent), (after, _) in zip(runs, runs[1:]):
            if after.dispatched <= before.compute_finished - WAITING_S:
                overheads.append(after.compute_started - last_sent)
            if after.dispatched >= last_sent:
                to_worker.append(after.worker_received - after.dispatched)
    return TransportModel(
        to_scheduler=HopLatency.fit([r.scheduler_received - r.client_sent for r in records]),
        to_worker=HopLatency.fit(to_worker),
        publish_per_row=HopLatency.fit(publish), batch_overhead=HopLatency.fit(overheads),
        to_client=HopLatency.fit([r.client_received - r.result_sent for r in records]))
