"""How long a batch takes on a device: the one model that emulated workers and the simulator share.

Service times come from the measured profile: the profiled mean of the batch's bucket (deterministic, as
the Kairos paper observes "< 0.5% of mean" variance), or a draw from that bucket's measured samples, plus
the profiled time to prepare each encoded image the batch carries (a worker decodes them before it runs).
Draws use the generator the caller passes in, so a run is reproducible from its seed.
"""
from __future__ import annotations

import bisect
from typing import Protocol

import numpy as np

from shared.profiles.format import ProfileSet


class ServiceTime(Protocol):
    """How long a batch of ``batch_size`` rows, ``images`` of them encoded images, takes on ``device``
    running ``variant``."""

    def expected_ms(self, device: str, variant: str, batch_size: int, images: int = 0) -> float:
        """What a scheduler would predict."""

    def sample_ms(self, device: str, variant: str, batch_size: int, rng: np.random.Generator,
                  images: int = 0) -> float:
        """The service time the worker actually takes."""

    def prepare_ms(self, device: str, variant: str, images: int) -> float:
        """How long ``device`` takes to decode and prepare ``images`` encoded images for ``variant``."""

    def load_ms(self, device: str, variant: str) -> float:
        """How long loading ``variant`` takes on ``device``."""


class ProfileServiceTime:
    """Service times from a `ProfileSet`: the bucket mean, or (``sampled=True``) a measured sample.

    Parameters
    ----------
    profiles : latency profiles; a batch uses the smallest profiled size >= it.
    sampled : draw uniformly from ``latency_samples_ms`` instead of using the mean (a profile without
        samples serves its mean).
    """

    def __init__(self, profiles: ProfileSet, *, sampled: bool = False) -> None:
        self._profiles = profiles
        self._sampled = sampled
        self._tables: dict[tuple[str, str], tuple[list[int], list[float], list[np.ndarray] | None, float]] = {}

    def expected_ms(self, device: str, variant: str, batch_size: int, images: int = 0) -> float:
        batches, means, _, prepare_ms = self._table(device, variant)
        return means[self._bucket(batches, batch_size, device, variant)] + images * prepare_ms

    def sample_ms(self, device: str, variant: str, batch_size: int, rng: np.random.Generator,
                  images: int = 0) -> float:
        batches, means, samples, prepare_ms = self._table(device, variant)
        index = self._bucket(batches, batch_size, device, variant)
        if samples is None or not len(samples[index]):
            return means[index] + images * prepare_ms
        draws = samples[index]
        return float(draws[rng.integers(len(draws))]) + images * prepare_ms

    def prepare_ms(self, device: str, variant: str, images: int) -> float:
        return images * self._table(device, variant)[3]

    def load_ms(self, device: str, variant: str) -> float:
        return self._profiles.get(variant, device).load_latency_ms or 0.0

    def _table(self, device: str, variant: str) -> tuple[list[int], list[float], list[np.ndarray] | None, float]:
        key = (device, variant)
        table = self._tables.get(key)
        if table is None:
            profile = self._profiles.get(variant, device)
            batches = list(profile.batch_latency_ms)
            means = list(profile.batch_latency_ms.values())
            samples = None
            if self._sampled and profile.latency_samples_ms is not None:
                samples = [np.asarray(profile.latency_samples_ms.get(b, ())) for b in batches]
            table = self._tables[key] = (batches, means, samples, profile.image_prepare_ms or 0.0)
        return table

    @staticmethod
    def _bucket(batches: list[int], batch_size: int, device: str, variant: str) -> int:
        index = bisect.bisect_left(batches, batch_size)
        if batch_size < 1 or index == len(batches):
            raise ValueError(f"batch size {batch_size} is outside the profile of {variant!r} on {device!r}")
        return index
