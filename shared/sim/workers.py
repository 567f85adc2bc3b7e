"""Simulated workers: what a fleet looks like and how long a batch takes on it.

Service times come from the profile set: the profiled mean of the batch's bucket (deterministic, as the
Kairos paper observes "< 0.5% of mean" variance), or a draw from the measured samples of that bucket.
Draws use the generator the engine passes in, so a run is reproducible from its seed.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from shared.profiles.format import ProfileSet


@dataclass(frozen=True, slots=True)
class SimWorker:
    """One simulated server; it runs one batch at a time."""

    worker_id: str
    device: str
    variants: tuple[str, ...]
    max_batch: int


class ServiceModel(Protocol):
    """How long a batch of ``batch_size`` rows takes on ``device`` running ``variant``."""

    def expected_ms(self, device: str, variant: str, batch_size: int) -> float:
        """What a scheduler would predict; the engine reports busy time from it."""

    def sample_ms(
        self, device: str, variant: str, batch_size: int, rng: np.random.Generator
    ) -> float:
        """The service time the simulated worker actually takes."""


class ProfileServiceModel:
    """Service times from a `ProfileSet`: the bucket mean, or (``sampled=True``) a measured sample.

    Parameters
    ----------
    profiles : latency profiles; a batch uses the smallest profiled size >= it.
    sampled : draw uniformly from ``latency_samples_ms`` instead of using the mean.
    """

    def __init__(self, profiles: ProfileSet, *, sampled: bool = False) -> None:
        self._profiles = profiles
        self._sampled = sampled
        self._tables: dict[tuple[str, str], tuple[list[int], list[float], list[np.ndarray] | None]] = {}

    def expected_ms(self, device: str, variant: str, batch_size: int) -> float:
        batches, means, _ = self._table(device, variant)
        return means[self._bucket(batches, batch_size, device, variant)]

    def sample_ms(
        self, device: str, variant: str, batch_size: int, rng: np.random.Generator
    ) -> float:
        batches, means, samples = self._table(device, variant)
        index = self._bucket(batches, batch_size, device, variant)
        if samples is None:
            return means[index]
        draws = samples[index]
        return float(draws[rng.integers(len(draws))])

    def _table(
        self, device: str, variant: str
    ) -> tuple[list[int], list[float], list[np.ndarray] | None]:
        key = (device, variant)
        table = self._tables.get(key)
        if table is None:
            profile = self._profiles.get(variant, device)
            batches = list(profile.batch_latency_ms)
            means = list(profile.batch_latency_ms.values())
            samples = None
            if self._sampled:
                if profile.latency_samples_ms is None:
                    raise ValueError(
                        f"`sampled=True` needs latency samples; {variant!r} on {device!r} has none"
                    )
                samples = [np.asarray(profile.latency_samples_ms[b]) for b in batches]
            table = self._tables[key] = (batches, means, samples)
        return table

    @staticmethod
    def _bucket(batches: list[int], batch_size: int, device: str, variant: str) -> int:
        index = bisect.bisect_left(batches, batch_size)
        if batch_size < 1 or index == len(batches):
            raise ValueError(
                f"batch size {batch_size} is outside the profile of {variant!r} on {device!r}"
            )
        return index


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
