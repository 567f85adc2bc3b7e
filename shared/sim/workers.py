"""Simulated workers: what a fleet looks like (service times: `shared.serving.service_time`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas import MeasuredLatency



@dataclass(frozen=True, slots=True)
class SimWorker:
    """One simulated server; it runs one batch at a time."""

    worker_id: str
    device: str
    variants: tuple[str, ...]
    max_batch: int
    #: variant -> what the worker measured on its machine, as a real worker does at its start: its
    #: heartbeats announce it and its batches take that long. None: it replays its device's profile, as an
    #: emulated worker does
    measured: Mapping[str, MeasuredLatency] | None = None


def make_fleet(
    counts: Mapping[str, int], variants: Sequence[str], *, max_batch: int
) -> list[SimWorker]:
    """``counts`` devices of each type, in the mapping's order, each hosting ``variants``.

    Examples
    --------
    >>> [w.worker_id for w in make_fleet({"gpu": 1, "cpu": 2}, ["m"], max_batch=10)]
    ['gpu-0', 'cpu-0', 'cpu-1']
    """
    return [
        SimWorker(worker_id=f"{device}-{k}", device=device, variants=tuple(variants), max_batch=max_batch)
        for device, count in counts.items()
        for k in range(count)
    ]
