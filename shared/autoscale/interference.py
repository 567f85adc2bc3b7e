"""Detecting interference: an instance slower than its profile while not at peak (INFaaS §4.1, spec §12.7).

The monitor (the live workers' heartbeats, or the simulator) reports per instance and window: rows/s
served, the share of the window it computed, and how its batch latencies compare with the profile
(`latency_ratio` from a mean latency and batch size, when that is all a heartbeat carries). `observe`
moves the instance along Fig. 4 with `shared.infaas.state.next_state`: Interfered above 1.5x the
profile while not at peak, Active again below 1.25x.
Mitigation (re-create the instance on other cores or another worker) is the Model-Autoscaler's job
(`shared.autoscale.greedy`); rule 2 of the VM-Autoscaler adds a worker when a whole kind is Interfered.
"""
from __future__ import annotations

import math

from shared.autoscale.catalogue import VariantOption
from shared.infaas.state import (
    InstanceState,
    InstanceWindow,
    StateThresholds,
    next_state,
)

__all__ = ["latency_ratio", "observe"]


def latency_ratio(option: VariantOption, *, mean_latency_ms: float, mean_rows: float) -> float | None:
    """Observed mean batch latency over the profiled latency of the mean batch (``None`` if off profile).

    Examples
    --------
    >>> from shared.autoscale.catalogue import VariantOption
    >>> from shared.infaas.records import VariantRecord
    >>> o = VariantOption(VariantRecord("m", "f", "cpu", batch_latency_ms=((1, 10.0), (4, 30.0)), max_batch=4),
    ...                   "m", {}, 0.0)
    >>> latency_ratio(o, mean_latency_ms=45.0, mean_rows=3.2)
    1.5
    """
    if not (math.isfinite(mean_latency_ms) and mean_latency_ms >= 0 and mean_rows >= 1):
        raise ValueError(f"need finite `mean_latency_ms` >= 0 and `mean_rows` >= 1, got {mean_latency_ms}, "
                         f"{mean_rows}")
    profiled = option.record.latency_ms(math.ceil(mean_rows - 1e-9))
    return None if profiled is None else mean_latency_ms / profiled


def observe(
    previous: InstanceState,
    *,
    qps: float,
    peak_qps: float,
    busy_fraction: float,
    latency_ratio: float | None = None,
    thresholds: StateThresholds | None = None,
) -> InstanceState:
    """The state of a loaded instance after one monitoring window.

    Parameters
    ----------
    previous : InstanceState
    qps : rows/s it served in the window.
    peak_qps : its saturation throughput ``Q`` under the application's SLO.
    busy_fraction : share of the window it spent computing.
    latency_ratio : observed over profiled batch latency (`latency_ratio`, or the sum of observed over
        the sum of profiled latencies of the window's batches); ``None`` when no batch finished.
    thresholds : StateThresholds, optional
        Default: Interfered above 1.5x, Active again below 1.25x (spec §12.7).

    Examples
    --------
    >>> observe(InstanceState.ACTIVE, qps=20, peak_qps=100, busy_fraction=0.4, latency_ratio=2.0)
    <InstanceState.INTERFERED: 'interfered'>
    >>> observe(InstanceState.ACTIVE, qps=120, peak_qps=100, busy_fraction=1.0, latency_ratio=2.0)
    <InstanceState.OVERLOADED: 'overloaded'>
    """
    window = InstanceWindow(qps=qps, peak_qps=peak_qps, latency_ratio=latency_ratio,
                            busy_fraction=min(1.0, busy_fraction))
    return next_state(previous, loaded=True, window=window, thresholds=thresholds or StateThresholds())
