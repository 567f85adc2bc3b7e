"""How many variants a GPU worker may hold: each loaded variant holds some of the GPU's memory, and a load
that would take the held total past the worker's share of it is refused.

A variant's footprint is what its session held on the GPU once its largest measured batch had run (the
GPU's used memory before the load and after the measurement, `MeasuredLatency.device_memory_mb`). Before a
variant has been measured on this machine, its footprint is a first guess from its model file: twice the
file (the weights, and as much again for activations and the provider's scratch) and `WORKSPACE_MB` for
cuDNN's workspace. The CPU has no such bound here: a CPU worker's variants share the host's memory.
"""
from __future__ import annotations

from schemas import MeasuredLatency

#: MiB counted for cuDNN's workspace and the provider's arena slack when a variant has not been measured
WORKSPACE_MB = 128.0
#: a not-yet-measured variant is counted as this many times its model file, plus `WORKSPACE_MB`
FILE_FACTOR = 2.0


class DeviceMemoryFull(Exception):
    """A variant's load would take the GPU memory held past the worker's budget."""


def footprint_mb(measured: MeasuredLatency | None, model_bytes: int) -> float:
    """The GPU memory (MiB) a variant holds: as measured here, else the first guess from its file's size."""
    if measured is not None and measured.device_memory_mb is not None:
        return measured.device_memory_mb
    return FILE_FACTOR * model_bytes / 2**20 + WORKSPACE_MB


class DeviceMemory:
    """The footprints of a worker's loaded variants against its budget (MiB)."""

    def __init__(self, budget_mb: float) -> None:
        if budget_mb <= 0:
            raise ValueError(f"`budget_mb` must be > 0, got {budget_mb!r}")
        self.budget_mb = budget_mb
        self._held: dict[str, float] = {}

    @property
    def held_mb(self) -> float:
        return sum(self._held.values())

    def reserve(self, variant: str, mb: float) -> None:
        """Count ``variant`` at ``mb`` (replacing what it was counted at), or raise `DeviceMemoryFull`."""
        others = {name: held for name, held in self._held.items() if name != variant}
        if sum(others.values()) + mb > self.budget_mb:
            holders = ", ".join(f"{name} {held:.0f}" for name, held in sorted(others.items())) or "nothing"
            raise DeviceMemoryFull(f"{variant} needs ~{mb:.0f} MiB of GPU memory; {sum(others.values()):.0f} of the "
                                   f"{self.budget_mb:.0f} MiB this worker may use are held ({holders})")
        self._held[variant] = mb

    def update(self, variant: str, mb: float) -> None:
        """What a loaded variant was measured to hold, counted even where it passes the budget (it is
        loaded already; the next load sees the truth)."""
        self._held[variant] = mb

    def release(self, variant: str) -> None:
        self._held.pop(variant, None)
