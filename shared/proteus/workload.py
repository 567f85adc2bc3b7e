"""Arrival processes of the Proteus evaluation (§6.1.3, spec §7 item 24).

- `rate_curve`: a real trace's arrivals counted in bins, each bin becoming one second (the paper
  speeds its trace up "by a constant factor without modifying the shape"), scaled to a target peak;
- `piecewise_poisson`: per-second rates -> Poisson arrivals within each second (the paper's method);
- `constant_rate`: micro-burst traces at one rate with ``uniform``, ``poisson`` or ``gamma``
  inter-arrival times (gamma shape 0.05 is the paper's "highly bursty").
"""
from __future__ import annotations

from typing import Literal

import numpy as np


def rate_curve(timestamps: np.ndarray, *, bin_s: float, peak_qps: float, smooth_bins: int = 1) -> np.ndarray:
    """Per-second rates: the trace's counts per ``bin_s`` of its time, one bin per second, peak ``peak_qps``.

    ``smooth_bins`` > 1 takes a centred moving average first (a macro shape without the bins' noise).

    Examples
    --------
    >>> rate_curve(np.array([0.0, 0.5, 1.2, 2.1, 2.2, 2.3]), bin_s=1.0, peak_qps=30.0).tolist()
    [20.0, 10.0, 30.0]
    """
    if not bin_s > 0 or not peak_qps > 0 or smooth_bins < 1:
        raise ValueError(f"need `bin_s` > 0, `peak_qps` > 0, `smooth_bins` >= 1; got {bin_s}, {peak_qps}, {smooth_bins}")
    times = np.asarray(timestamps, dtype=float)
    counts = np.bincount(((times - times.min()) // bin_s).astype(int)).astype(float)
    if smooth_bins > 1:
        counts = np.convolve(counts, np.ones(smooth_bins) / smooth_bins, mode="same")
    if counts.max() <= 0:
        raise ValueError("the trace has no arrivals")
    return counts * (peak_qps / counts.max())


def piecewise_poisson(rates_qps: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Arrival times: second ``k`` holds Poisson(``rates_qps[k]``) arrivals, uniform within it."""
    rates = np.asarray(rates_qps, dtype=float)
    if rates.ndim != 1 or np.any(rates < 0) or not np.all(np.isfinite(rates)):
        raise ValueError("`rates_qps` must be a 1-D array of finite rates >= 0")
    counts = rng.poisson(rates)
    starts = np.repeat(np.arange(len(rates), dtype=float), counts)
    return np.sort(starts + rng.random(len(starts)))


def constant_rate(
    rate_qps: float,
    duration_s: float,
    rng: np.random.Generator,
    *,
    kind: Literal["uniform", "poisson", "gamma"],
    gamma_shape: float = 0.05,
) -> np.ndarray:
    """Arrivals at a constant mean rate; ``gamma`` gaps have shape ``gamma_shape`` (CV = 1/sqrt(shape))."""
    if not rate_qps > 0 or not duration_s > 0:
        raise ValueError(f"`rate_qps` and `duration_s` must be > 0, got {rate_qps}, {duration_s}")
    n = int(np.ceil(rate_qps * duration_s * 1.2)) + 16
    if kind == "uniform":
        gaps = np.full(n, 1.0)
    elif kind == "poisson":
        gaps = rng.standard_exponential(n)
    elif kind == "gamma":
        if not gamma_shape > 0:
            raise ValueError(f"`gamma_shape` must be > 0, got {gamma_shape}")
        gaps = rng.gamma(gamma_shape, 1.0 / gamma_shape, n)
    else:
        raise ValueError(f"`kind` must be uniform, poisson or gamma, got {kind!r}")
    times = np.cumsum(gaps) / rate_qps
    return times[times < duration_s]
