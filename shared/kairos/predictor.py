"""Online latency prediction per (device, variant, batch bucket) (Kairos §5.1, spec §8.5).

Inference latency is nearly deterministic and almost linear in the batch size (Pearson > 0.99), so Kairos
"starts with a linear model ... [and] quickly transition[s] into a lookup table". Here: a least-squares
line ``a + b * bucket`` per (device, variant) answers until a bucket has ``min_samples`` observations,
then that bucket's running mean does. Profiles, when available, seed the table as already-warm buckets.

A (device, variant) with no observation at all predicts 0 ms: optimistic, so the matcher tries the
unknown instance and learns it. ``noise_frac`` perturbs every prediction with N(0, (noise_frac * L)^2),
the paper's 5%-noise robustness experiment; it never touches the learned state.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shared.kairos.table import LatencyTable
from shared.profiles.format import ProfileSet

#: the authors' grid: sizes round up to a multiple of 10, at most 1000
DEFAULT_GRID = tuple(range(10, 1001, 10))


class _Model:
    """Running state of one (device, variant): bucket means and the sums of a least-squares line."""

    __slots__ = ("min_samples", "count", "mean", "n", "sx", "sy", "sxx", "sxy", "all_warm", "cache")

    def __init__(self, size: int, min_samples: int) -> None:
        self.min_samples = min_samples
        self.count = np.zeros(size, dtype=np.int64)
        self.mean = np.zeros(size)
        self.n = self.sx = self.sy = self.sxx = self.sxy = 0.0
        self.all_warm = False
        self.cache: np.ndarray | None = None

    def add(self, k: int, x: float, y: float, weight: int) -> None:
        self.count[k] += weight
        self.mean[k] += (y - self.mean[k]) * weight / self.count[k]
        self.n += weight
        self.sx += weight * x
        self.sy += weight * y
        self.sxx += weight * x * x
        self.sxy += weight * x * y
        if self.all_warm and self.cache is not None:
            self.cache[k] = self.mean[k]  # the line no longer shows anywhere
        else:
            self.all_warm = bool(self.count.min() >= self.min_samples)
            self.cache = None

    def curve(self, grid: np.ndarray) -> np.ndarray:
        """Prediction for every bucket: the table where warm, else the line (clipped at 0)."""
        if self.cache is None:
            var = self.n * self.sxx - self.sx * self.sx
            if self.n == 0:
                line = np.zeros(len(grid))
            elif var <= 1e-9 * max(1.0, self.n * self.sxx):
                line = np.full(len(grid), self.sy / self.n)
            else:
                slope = (self.n * self.sxy - self.sx * self.sy) / var
                line = np.maximum((self.sy - slope * self.sx) / self.n + slope * grid, 0.0)
            self.cache = np.where(self.count >= self.min_samples, self.mean, line)
        return self.cache


class LatencyPredictor:
    """Learns Lat(device, variant, batch) from completions; see the module docstring.

    Parameters
    ----------
    grid : bucket sizes, increasing; a batch uses the smallest one >= it.
    min_samples : observations after which a bucket's mean replaces the line (spec: 3).
    noise_frac : relative std of the Gaussian noise added to predictions (0 = none).
    seed : seeds that noise.
    """

    def __init__(
        self,
        grid: Sequence[int] = DEFAULT_GRID,
        *,
        min_samples: int = 3,
        noise_frac: float = 0.0,
        seed: int | None = None,
    ) -> None:
        self._grid = np.asarray(grid, dtype=np.int64)
        if self._grid.ndim != 1 or len(self._grid) == 0 or np.any(np.diff(self._grid) <= 0) or self._grid[0] < 1:
            raise ValueError("`grid` must be a non-empty increasing sequence of sizes >= 1")
        if min_samples < 1 or noise_frac < 0:
            raise ValueError(f"`min_samples` must be >= 1 and `noise_frac` >= 0; got {min_samples}, {noise_frac}")
        self._xs = self._grid.astype(np.float64)
        self._min_samples = min_samples
        self._noise_frac = noise_frac
        self._rng = np.random.default_rng(seed)
        self._models: dict[tuple[str, str], _Model] = {}

    @classmethod
    def from_profiles(
        cls,
        profiles: ProfileSet,
        *,
        variants: Sequence[str] | None = None,
        min_samples: int = 3,
        noise_frac: float = 0.0,
        seed: int | None = None,
    ) -> LatencyPredictor:
        """A predictor whose buckets start warm at the profiled means (the artifact's lookup table)."""
        chosen = [p for p in profiles.variants if variants is None or p.variant in variants]
        if not chosen:
            raise ValueError(f"no profile for `variants` {variants!r}")
        grid = sorted({b for p in chosen for b in p.batch_latency_ms})
        predictor = cls(grid, min_samples=min_samples, noise_frac=noise_frac, seed=seed)
        for p in chosen:
            predictor.add_profile(p.device, p.variant, p.batch_latency_ms)
        return predictor

    @property
    def max_batch(self) -> int:
        return int(self._grid[-1])

    def add_profile(self, device: str, variant: str, batch_latency_ms: Mapping[int, float]) -> None:
        """Seed buckets with profiled means, each counting as ``min_samples`` observations."""
        for batch, latency in batch_latency_ms.items():
            self._add(device, variant, int(batch), float(latency), self._min_samples)

    def reseed(self, device: str, variant: str, batch_latency_ms: Mapping[int, float]) -> None:
        """Start (device, variant) afresh from these profiled means (a real worker measured them on its
        machine): what was seeded or learned of it before is forgotten. Sizes beyond the grid are left out."""
        self._models.pop((device, variant), None)
        self.add_profile(device, variant, {b: ms for b, ms in batch_latency_ms.items() if int(b) <= self.max_batch})

    def observe(self, device: str, variant: str, batch_size: int, latency_ms: float) -> None:
        """One measured service time."""
        if not np.isfinite(latency_ms) or latency_ms < 0:
            raise ValueError(f"`latency_ms` must be finite and >= 0, got {latency_ms}")
        self._add(device, variant, batch_size, latency_ms, 1)

    def predict(self, device: str, variant: str, batch_sizes: np.ndarray, *, noisy: bool = True) -> np.ndarray:
        """Predicted latency (ms) of each batch size; ``noisy=False`` skips the noise knob."""
        return self.predict_buckets(device, variant, self._bucket(np.asarray(batch_sizes)), noisy=noisy)

    def buckets(self, batch_sizes: np.ndarray) -> np.ndarray:
        """Grid index of each batch size, for `predict_buckets` (one lookup shared by many devices)."""
        return self._bucket(np.asarray(batch_sizes))

    def predict_buckets(self, device: str, variant: str, index: np.ndarray, *, noisy: bool = True) -> np.ndarray:
        """`predict` for sizes already turned into grid indexes by `buckets`."""
        model = self._models.get((device, variant))
        if model is None:
            return np.zeros(index.shape)
        clean = model.curve(self._xs)[index]
        if noisy and self._noise_frac > 0:
            return np.maximum(clean * (1.0 + self._noise_frac * self._rng.standard_normal(clean.shape)), 0.0)
        return clean

    def at_max_batch(self, device: str, variant: str) -> float:
        """Noise-free prediction for the largest bucket (what heterogeneity coefficients compare)."""
        model = self._models.get((device, variant))
        return 0.0 if model is None else float(model.curve(self._xs)[-1])

    def table(self, variant: str, devices: Sequence[str]) -> LatencyTable:
        """Noise-free predictions over the grid, for the offline math (upper bound, monitor)."""
        return LatencyTable(
            variant=variant,
            devices=tuple(devices),
            grid=self._grid.copy(),
            latency_ms=np.array([self.predict(d, variant, self._grid, noisy=False) for d in devices]),
        )

    def _bucket(self, sizes: np.ndarray) -> np.ndarray:
        index = np.searchsorted(self._grid, sizes, side="left")
        if index.size and (index.max() == len(self._grid) or sizes.min() < 1):
            raise ValueError(f"batch sizes must lie in 1..{self.max_batch}")
        return index

    def _add(self, device: str, variant: str, batch_size: int, latency_ms: float, weight: int) -> None:
        k = int(self._bucket(np.asarray([batch_size]))[0])
        model = self._models.get((device, variant))
        if model is None:
            model = self._models[(device, variant)] = _Model(len(self._grid), self._min_samples)
        model.add(k, float(self._xs[k]), latency_ms, weight)
