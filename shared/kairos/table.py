"""A dense latency table Lat(device, batch bucket) for one model, the input of Kairos's offline math."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.profiles.format import ProfileSet


@dataclass(frozen=True, slots=True, eq=False)
class LatencyTable:
    """``latency_ms[d, k]`` = mean latency (ms) of a batch in bucket ``grid[k]`` on ``devices[d]``.

    A batch ``b`` falls in the smallest grid size ``>= b`` (the authors round up to a multiple of 10).
    """

    variant: str
    devices: tuple[str, ...]
    grid: np.ndarray
    latency_ms: np.ndarray

    def __post_init__(self) -> None:
        if self.latency_ms.shape != (len(self.devices), len(self.grid)):
            raise ValueError(
                f"`latency_ms` must have shape {(len(self.devices), len(self.grid))}, got {self.latency_ms.shape}"
            )
        if len(self.grid) == 0 or np.any(np.diff(self.grid) <= 0) or self.grid[0] < 1:
            raise ValueError("`grid` must be non-empty, increasing and >= 1")
        if not np.all(np.isfinite(self.latency_ms)) or np.any(self.latency_ms <= 0):
            raise ValueError("`latency_ms` must be finite and > 0")

    @classmethod
    def from_profiles(
        cls, profiles: ProfileSet, variant: str, devices: Sequence[str] | None = None
    ) -> LatencyTable:
        """The profiled means of ``variant`` on ``devices`` (default: every device profiled for it)."""
        if devices is None:
            profiled = {p.device for p in profiles.variants if p.variant == variant}
            devices = [d.name for d in profiles.devices if d.name in profiled]
        names = tuple(devices)
        if not names:
            raise ValueError(f"no device is profiled for variant {variant!r}")
        rows = [profiles.get(variant, name).batch_latency_ms for name in names]
        grid = list(rows[0])
        if any(list(row) != grid for row in rows):
            raise ValueError(f"profiles of {variant!r} do not share one batch grid across {names}")
        return cls(
            variant=variant,
            devices=names,
            grid=np.asarray(grid, dtype=np.int64),
            latency_ms=np.array([list(row.values()) for row in rows], dtype=np.float64),
        )

    @property
    def max_batch(self) -> int:
        return int(self.grid[-1])

    def index(self, device: str) -> int:
        try:
            return self.devices.index(device)
        except ValueError:
            raise KeyError(f"device {device!r} is not in the table ({', '.join(self.devices)})") from None

    def bucket(self, batch_sizes: np.ndarray) -> np.ndarray:
        """Grid index of each batch size; raises for sizes outside ``1..max_batch``."""
        sizes = np.asarray(batch_sizes)
        if sizes.size and (sizes.min() < 1 or sizes.max() > self.grid[-1]):
            raise ValueError(f"batch sizes must lie in 1..{self.max_batch}")
        return np.searchsorted(self.grid, sizes, side="left")

    def lookup(self, device: str, batch_sizes: np.ndarray) -> np.ndarray:
        return self.latency_ms[self.index(device)][self.bucket(batch_sizes)]
