"""Workloads: when queries arrive and how many rows each holds.

Arrival generators draw unit-rate gaps and divide by the rate, so the same seed at two rates gives the
same sequence stretched in time (common random numbers). That keeps an allowable-throughput search from
mistaking noise between rates for an effect of the rate.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class Workload:
    """``arrival_s[i]`` and ``batch_size[i]`` of query ``i`` of one application, in arrival order."""

    arrival_s: np.ndarray
    batch_size: np.ndarray
    application: str
    slo_ms: float
    #: variants that may serve each query, most preferred first
    candidate_variants: tuple[str, ...]
    #: the priority class of its queries (1 served first, 9 last); None: its application's default
    priority: int | None = None

    def __post_init__(self) -> None:
        if self.arrival_s.shape != self.batch_size.shape or self.arrival_s.ndim != 1:
            raise ValueError("`arrival_s` and `batch_size` must be 1-D arrays of one length")
        if np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("`arrival_s` must be sorted")
        if self.slo_ms <= 0 or not self.candidate_variants:
            raise ValueError("`slo_ms` must be > 0 and `candidate_variants` non-empty")

    def __len__(self) -> int:
        return len(self.arrival_s)


def _rate_iv(rate_qps: float, num_queries: int) -> None:
    if not np.isfinite(rate_qps) or rate_qps <= 0:
        raise ValueError(f"`rate_qps` must be finite and > 0, got {rate_qps}")
    if num_queries < 1:
        raise ValueError(f"`num_queries` must be >= 1, got {num_queries}")


def poisson_arrivals(rate_qps: float, num_queries: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of a Poisson process: exponential gaps of mean 1/rate."""
    _rate_iv(rate_qps, num_queries)
    return np.cumsum(rng.standard_exponential(num_queries)) / rate_qps


def gamma_arrivals(
    rate_qps: float, num_queries: int, rng: np.random.Generator, *, cv: float
) -> np.ndarray:
    """Gamma-distributed gaps of mean 1/rate and coefficient of variation ``cv`` (1 = Poisson)."""
    _rate_iv(rate_qps, num_queries)
    if not cv > 0:
        raise ValueError(f"`cv` must be > 0, got {cv}")
    shape = 1.0 / cv**2
    return np.cumsum(rng.gamma(shape, 1.0 / shape, num_queries)) / rate_qps


def load_trace_timestamps(path: str | Path) -> np.ndarray:
    """Seconds since the first request of a CSV with a ``TIMESTAMP`` column (Azure LLM trace format)."""
    lines = Path(path).read_text().splitlines()
    column = lines[0].split(",").index("TIMESTAMP")
    stamps = np.array([line.split(",")[column] for line in lines[1:] if line], dtype="datetime64[ns]")
    stamps.sort()
    return (stamps - stamps[0]).astype(np.float64) / 1e9


def trace_arrivals(timestamps: np.ndarray, rate_qps: float, num_queries: int | None = None) -> np.ndarray:
    """The first ``num_queries`` trace arrivals, time-scaled so their mean rate is ``rate_qps``.

    Burstiness (the shape of the gaps) is kept; only the time axis is stretched.
    """
    times = np.sort(np.asarray(timestamps, dtype=np.float64))
    count = len(times) if num_queries is None else num_queries
    _rate_iv(rate_qps, count)
    if count > len(times) or count < 2:
        raise ValueError(f"`num_queries` must be in 2..{len(times)} for this trace, got {count}")
    times = times[:count] - times[0]
    span = times[-1]
    if span <= 0:
        raise ValueError("the trace's timestamps must span a positive time")
    native_rate = (count - 1) / span
    return times * (native_rate / rate_qps)


def minute_rates(timestamps: np.ndarray, *, low_qps: float, peak_qps: float, smooth_min: int) -> np.ndarray:
    """A trace's day-scale swing as rates: arrivals per whole minute, averaged over ``smooth_min`` minutes and
    min-max scaled to ``low_qps``..``peak_qps``, one rate per trace minute.

    Smoothed because a compressed minute's noise would be a burst of seconds, steeper than the swings
    autoscaling is for. The first minute is left out: in the Azure ``conv`` trace it is 28% below the next, the
    lowest by far, and min-max scaling would turn it into a jump no machine that boots can follow.

    >>> stamps = np.array([0.0] + [70.0] * 4 + [130.0] * 2 + [190.0] * 6 + [250.0])  # minutes 1-3: 4, 2, 6
    >>> minute_rates(stamps, low_qps=10.0, peak_qps=20.0, smooth_min=1).tolist()
    [15.0, 10.0, 20.0]
    >>> minute_rates(stamps, low_qps=10.0, peak_qps=20.0, smooth_min=2).tolist()
    [10.0, 20.0]
    """
    if not 0 <= low_qps < peak_qps or smooth_min < 1:
        raise ValueError(f"need 0 <= `low_qps` < `peak_qps` and `smooth_min` >= 1; got {low_qps}, {peak_qps}, "
                         f"{smooth_min}")
    stamps = np.sort(np.asarray(timestamps, dtype=np.float64))
    counts, _ = np.histogram(stamps, bins=np.arange(60.0, stamps[-1], 60.0))
    counts = np.convolve(counts, np.ones(smooth_min) / smooth_min, mode="valid")
    if len(counts) < 2 or counts.max() == counts.min():
        raise ValueError("the trace must span at least two whole minutes after the first, of different counts")
    return low_qps + (peak_qps - low_qps) * (counts - counts.min()) / (counts.max() - counts.min())


def held_poisson(rates_qps: Sequence[float], duration_s: float, seed: int) -> np.ndarray:
    """Poisson arrivals over ``duration_s``, each rate held for an equal share of it.

    >>> times = held_poisson([10.0, 0.0], 2.0, seed=0)
    >>> bool(np.all(times < 1.0)) and 3 < len(times) < 20
    True
    """
    rng = np.random.default_rng(seed)
    step = duration_s / len(rates_qps)
    return np.concatenate([np.sort(k * step + rng.random(rng.poisson(rate * step)) * step)
                           for k, rate in enumerate(rates_qps)])


def deeprecsys_sizes(num_queries: int, rng: np.random.Generator) -> np.ndarray:
    """Query sizes from the DeepRecSys production mix, as the Kairos artifact samples them.

    x ~ LogNormal(5.1, 0.2); r ~ U{1..99}: r <= 8 -> U{1..99}; r <= 30 -> U{200..599};
    r <= 35 -> U{600..999}; else x if 100 <= x <= 200 else U{190..199}. Mean ~239, median ~178.
    Sizes are rounded up to integers (the 10-grid bucket is unchanged by that).
    """
    x = rng.lognormal(5.1, 0.2, num_queries)
    r = rng.integers(1, 100, num_queries)
    small = rng.integers(1, 100, num_queries)
    mid = rng.integers(200, 600, num_queries)
    large = rng.integers(600, 1000, num_queries)
    fill = rng.integers(190, 200, num_queries)
    kept = np.where((x >= 100) & (x <= 200), x, fill)
    sizes = np.select([r <= 8, r <= 30, r <= 35], [small, mid, large], default=kept)
    return np.ceil(sizes).astype(np.int64)


def truncated_gaussian_sizes(
    num_queries: int,
    rng: np.random.Generator,
    *,
    mean: float = 300.0,
    std: float = 100.0,
    low: int = 1,
    high: int = 1000,
) -> np.ndarray:
    """Normal sizes resampled until inside ``[low, high]``, rounded to integers (spec §8.8)."""
    if std <= 0 or low > high:
        raise ValueError("`std` must be > 0 and `low` <= `high`")
    out = np.empty(num_queries, dtype=np.int64)
    filled = 0
    while filled < num_queries:
        draw = np.rint(rng.normal(mean, std, 2 * (num_queries - filled) + 16)).astype(np.int64)
        draw = draw[(draw >= low) & (draw <= high)][: num_queries - filled]
        out[filled : filled + len(draw)] = draw
        filled += len(draw)
    return out


SizeSampler = Callable[[int, np.random.Generator], np.ndarray]


def poisson_workload(
    *,
    num_queries: int,
    sizes: SizeSampler,
    application: str,
    slo_ms: float,
    candidate_variants: tuple[str, ...],
) -> Callable[[float, np.random.Generator], Workload]:
    """A ``(rate_qps, rng) -> Workload`` maker: sizes first, then Poisson arrivals, from one rng."""

    def make(rate_qps: float, rng: np.random.Generator) -> Workload:
        batch = sizes(num_queries, rng)
        return Workload(poisson_arrivals(rate_qps, num_queries, rng), batch, application, slo_ms, candidate_variants)

    return make
