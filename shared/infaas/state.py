"""The variant-instance state machine of INFaaS Fig. 4 (spec §5), as a pure transition function.

States: Inactive (not loaded), Active (loaded, below peak), Overloaded (at peak throughput) and
Interfered (not overloaded but slower than profiled). The monitoring loop calls `next_state` once per
window for each instance with what it observed; the dispatcher avoids Overloaded and Interfered ones.

Edges (`TRANSITIONS`, Fig. 4):

- Inactive -Loaded-> Active
- Active -QPS >= peak-> Overloaded;  Overloaded -QPS < peak-> Active
- Active -Contended-> Interfered;  Interfered -Mitigated-> Active
- Overloaded -Contended; QPS < peak-> Interfered
- Active / Overloaded / Interfered -Unloaded-> Inactive

The paper gives no thresholds; the defaults follow spec §12.7-8 (see `StateThresholds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

__all__ = ["InstanceState", "InstanceWindow", "StateThresholds", "TRANSITIONS", "next_state"]


class InstanceState(str, Enum):
    INACTIVE = "inactive"
    ACTIVE = "active"
    OVERLOADED = "overloaded"
    INTERFERED = "interfered"


_I, _A, _O, _X = InstanceState.INACTIVE, InstanceState.ACTIVE, InstanceState.OVERLOADED, InstanceState.INTERFERED
#: the edges of Fig. 4 (staying in a state is always allowed)
TRANSITIONS: frozenset[tuple[InstanceState, InstanceState]] = frozenset(
    {(_I, _A), (_A, _O), (_O, _A), (_A, _X), (_X, _A), (_O, _X), (_A, _I), (_O, _I), (_X, _I)})


@dataclass(frozen=True, slots=True)
class StateThresholds:
    """When an instance counts as overloaded or interfered.

    interfered_ratio : observed / profiled latency above which a not-overloaded instance is Interfered
        (spec §12.7: 1.5).
    mitigated_ratio : ratio below which an Interfered instance is Active again (1.25; hysteresis).
    saturated_busy_fraction : share of the window an instance spent computing at which it is at peak
        even if its served QPS is below the profiled peak (served load cannot exceed what the instance
        can do, and small batches saturate it below the peak measured at its largest batch).
    """

    interfered_ratio: float = 1.5
    mitigated_ratio: float = 1.25
    saturated_busy_fraction: float = 0.95

    def __post_init__(self) -> None:
        if not 1.0 <= self.mitigated_ratio <= self.interfered_ratio:
            raise ValueError(f"need 1 <= `mitigated_ratio` <= `interfered_ratio`, got "
                             f"{self.mitigated_ratio} and {self.interfered_ratio}")
        if not 0.0 < self.saturated_busy_fraction <= 1.0:
            raise ValueError(f"`saturated_busy_fraction` must be in (0, 1], got {self.saturated_busy_fraction}")


@dataclass(frozen=True, slots=True)
class InstanceWindow:
    """What the monitor saw of one loaded instance over its last window."""

    #: rows served per second
    qps: float
    #: profiled saturation throughput, rows/s (`VariantRecord.peak_qps`)
    peak_qps: float
    #: mean observed batch latency / profiled latency at the mean batch; ``None`` when nothing ran
    latency_ratio: float | None = None
    #: share of the window spent computing this instance's batches
    busy_fraction: float = 0.0

    def __post_init__(self) -> None:
        ratio = 0.0 if self.latency_ratio is None else self.latency_ratio
        values = (self.qps, self.peak_qps, self.busy_fraction, ratio)
        if not all(math.isfinite(v) and v >= 0.0 for v in values):
            raise ValueError(f"`InstanceWindow` fields must be finite and >= 0, got {self}")


def next_state(current: InstanceState, *, loaded: bool, window: InstanceWindow | None = None,
               thresholds: StateThresholds = StateThresholds()) -> InstanceState:
    """The state after one monitoring window, following only the edges of Fig. 4.

    Parameters
    ----------
    current : InstanceState
    loaded : bool
        Whether the worker still holds the variant (unloaded -> Inactive from any state).
    window : InstanceWindow, optional
        Observations; ``None`` (or no batch run) is no evidence of load or contention.
    thresholds : StateThresholds, optional

    Notes
    -----
    An Interfered instance with no batch in the window counts as mitigated: the dispatcher avoids it, so
    without this it could never be observed again and would stay Interfered forever. An Interfered
    instance at peak stays Interfered (Fig. 4 has no Interfered -> Overloaded edge; both are avoided).

    Examples
    --------
    >>> next_state(InstanceState.ACTIVE, loaded=True, window=InstanceWindow(qps=500, peak_qps=400))
    <InstanceState.OVERLOADED: 'overloaded'>
    """
    if not loaded:
        return InstanceState.INACTIVE
    if current is InstanceState.INACTIVE:
        return InstanceState.ACTIVE
    window = window or InstanceWindow(qps=0.0, peak_qps=0.0)
    at_peak = (window.peak_qps > 0 and window.qps >= window.peak_qps) or \
        window.busy_fraction >= thresholds.saturated_busy_fraction
    ratio = window.latency_ratio
    if current is InstanceState.INTERFERED:
        mitigated = ratio is None or ratio < thresholds.mitigated_ratio
        return InstanceState.ACTIVE if mitigated else InstanceState.INTERFERED
    if at_peak:
        return InstanceState.OVERLOADED
    contended = ratio is not None and ratio > thresholds.interfered_ratio
    return InstanceState.INTERFERED if contended else InstanceState.ACTIVE
