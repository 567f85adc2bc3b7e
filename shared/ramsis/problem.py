"""The inputs of one worker's MDP: Pareto models, their latency per batch size, the slack grid (spec §3.2-3.3).

A `RamsisProblem` is what does not depend on the load or the number of workers; `shared.ramsis.mdp`
adds those. Latencies come from a `ProfileSet` by its own lookup rule (the smallest profiled batch >= b).
`quantile_profiles` turns measured profiles into the paper's form first: p95 latency, every batch size
filled by linear interpolation, non-decreasing in b (spec §4), so the MDP and the simulator can share it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from shared.profiles.format import ProfileSet, VariantProfile
from shared.profiles.tail import at_quantile

Batching = Literal["maximal", "variable"]
Discretization = Literal["fixed", "model"]


def pareto_front(latency_ms: Sequence[float], accuracy: Sequence[float]) -> np.ndarray:
    """Indices of the models no other model beats on both latency and accuracy, fastest first.

    Examples
    --------
    >>> pareto_front([10, 20, 15, 30], [0.70, 0.80, 0.65, 0.80]).tolist()
    [0, 1]
    """
    lat, acc = np.asarray(latency_ms, dtype=float), np.asarray(accuracy, dtype=float)
    order = np.lexsort((-acc, lat))  # by latency, the more accurate first among equals
    kept, best = [], -np.inf
    for i in order:
        if acc[i] > best:
            kept.append(int(i))
            best = acc[i]
    return np.asarray(kept, dtype=np.int64)


def fixed_slack_grid(slo_ms: float, delta: int) -> np.ndarray:
    """FLD: ``(0, SLO/Δ, ..., SLO)``, Δ + 1 values (the paper's default, Δ = 100).

    >>> fixed_slack_grid(150.0, 4).tolist()
    [0.0, 37.5, 75.0, 112.5, 150.0]
    """
    return slo_ms * np.arange(delta + 1) / delta


def model_slack_grid(latency_ms: np.ndarray, slo_ms: float) -> np.ndarray:
    """MD: every distinct latency ``l(m, b) <= SLO``, plus 0 and the SLO (spec §8.11, the paper's rule).

    >>> model_slack_grid(np.array([[0.0, 10, 30], [0.0, 20, 200]]), 100.0).tolist()
    [0.0, 10.0, 20.0, 30.0, 100.0]
    """
    lat = latency_ms[:, 1:].ravel()
    return np.unique(np.concatenate([[0.0, slo_ms], lat[lat <= slo_ms]]))


@dataclass(frozen=True, eq=False)
class RamsisProblem:
    """One worker type's models, latencies and slack grid, for one SLO.

    ``latency_ms[m, b]`` is the latency of a batch of ``b`` queries on model ``m`` (column 0 unused,
    ``inf`` beyond the profile); models are Pareto-optimal and sorted fastest first, which is also the
    MDP's tie-break order.
    """

    device: str
    models: tuple[str, ...]
    accuracy: np.ndarray
    latency_ms: np.ndarray
    slo_ms: float
    slack_ms: np.ndarray
    max_queue: int = 32
    batching: Batching = "maximal"
    #: models left out because another one is both faster and at least as accurate
    pruned: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        m, n = len(self.models), self.max_queue
        if m == 0:
            raise ValueError("`models` must not be empty")
        if self.accuracy.shape != (m,) or self.latency_ms.shape != (m, n + 1):
            raise ValueError(f"`accuracy` must be ({m},) and `latency_ms` ({m}, {n + 1}) for `max_queue` {n}")
        if not self.slo_ms > 0:
            raise ValueError(f"`slo_ms` must be > 0, got {self.slo_ms}")
        grid = self.slack_ms
        if grid.ndim != 1 or len(grid) < 2 or grid[0] != 0 or grid[-1] != self.slo_ms or np.any(np.diff(grid) <= 0):
            raise ValueError("`slack_ms` must increase strictly from 0 to `slo_ms`")
        if not np.all(np.isfinite(self.latency_ms[:, 1:]).any(axis=0)):
            raise ValueError(f"some model must be profiled for every batch size up to `max_queue` {n}")
        if self.batching not in ("maximal", "variable"):
            raise ValueError(f"`batching` must be 'maximal' or 'variable', got {self.batching!r}")

    @property
    def num_models(self) -> int:
        return len(self.models)

    @property
    def num_slack(self) -> int:
        return len(self.slack_ms)

    @property
    def num_states(self) -> int:
        """``(N + 1) |T|`` queue states plus the full-queue state."""
        return (self.max_queue + 1) * self.num_slack + 1

    def slack_index(self, slack_ms: float | np.ndarray) -> np.ndarray:
        """The floor bin of a slack: ``T_j <= slack < T_{j+1}``, clipped to the grid."""
        index = np.searchsorted(self.slack_ms, slack_ms, side="right") - 1
        return np.clip(index, 0, self.num_slack - 1)

    def fastest(self, batch: int) -> int:
        """``m_min`` for a batch: the model with the lowest latency at that size (first on ties)."""
        return int(np.argmin(self.latency_ms[:, batch]))


def build_problem(
    profiles: ProfileSet,
    *,
    slo_ms: float,
    family: str | None = None,
    device: str | None = None,
    variants: Sequence[str] | None = None,
    max_queue: int = 32,
    discretization: Discretization = "fixed",
    delta: int = 100,
    batching: Batching = "maximal",
) -> RamsisProblem:
    """The MDP inputs for the variants of ``family`` (or ``variants``) on ``device``.

    Parameters
    ----------
    profiles : the project's profile set; variants need an ``accuracy``.
    slo_ms : the latency SLO.
    family, variants : which variants compete (one of them; ``family`` alone takes all of its variants).
    device : the worker type (default: the only device the variants are profiled on).
    max_queue : N_w, the longest worker queue the MDP models (32 in the paper).
    discretization : ``fixed`` (FLD, ``delta`` bins) or ``model`` (MD, every distinct latency).
    delta : Δ of FLD (100 in the paper).
    batching : ``maximal`` (b = n, the paper's default) or ``variable`` (any b <= n).
    """
    chosen = _problem_iv(profiles, slo_ms, family, device, variants, max_queue, discretization, delta)
    names = [p.variant for p in chosen]
    accuracy = np.array([p.accuracy for p in chosen], dtype=np.float64)
    latency = np.array([[0.0] + [_latency_or_inf(p, b) for b in range(1, max_queue + 1)] for p in chosen])
    front = pareto_front(latency[:, 1], accuracy)
    pruned = tuple(sorted(set(names) - {names[i] for i in front}))
    latency, accuracy = latency[front], accuracy[front]
    grid = fixed_slack_grid(slo_ms, delta) if discretization == "fixed" else model_slack_grid(latency, slo_ms)
    return RamsisProblem(
        device=chosen[0].device,
        models=tuple(names[i] for i in front),
        accuracy=accuracy,
        latency_ms=latency,
        slo_ms=float(slo_ms),
        slack_ms=grid,
        max_queue=max_queue,
        batching=batching,
        pruned=pruned,
    )


def _problem_iv(
    profiles: ProfileSet,
    slo_ms: float,
    family: str | None,
    device: str | None,
    variants: Sequence[str] | None,
    max_queue: int,
    discretization: str,
    delta: int,
) -> list[VariantProfile]:
    if not (np.isfinite(slo_ms) and slo_ms > 0):
        raise ValueError(f"`slo_ms` must be finite and > 0, got {slo_ms}")
    if max_queue < 1:
        raise ValueError(f"`max_queue` must be >= 1, got {max_queue}")
    if discretization not in ("fixed", "model"):
        raise ValueError(f"`discretization` must be 'fixed' or 'model', got {discretization!r}")
    if delta < 1:
        raise ValueError(f"`delta` must be >= 1, got {delta}")
    if (family is None) == (variants is None):
        raise ValueError("give exactly one of `family` and `variants`")
    chosen = [
        p
        for p in profiles.variants
        if (p.family == family if family is not None else p.variant in variants)  # type: ignore[operator]
        and (device is None or p.device == device)
    ]
    devices = {p.device for p in chosen}
    if not chosen:
        raise ValueError(f"no profiled variant of {family or list(variants or ())!r} on device {device!r}")
    if len(devices) > 1:
        raise ValueError(f"the variants are profiled on several devices {sorted(devices)}; pass `device`")
    missing = [p.variant for p in chosen if p.accuracy is None]
    if missing:
        raise ValueError(f"variants {missing} have no accuracy; RAMSIS maximizes accuracy")
    return chosen


def _latency_or_inf(profile: VariantProfile, batch: int) -> float:
    return profile.latency_ms(batch) if batch <= max(profile.batch_latency_ms) else np.inf


def quantile_profiles(profiles: ProfileSet, *, quantile: float = 0.95, max_batch: int | None = None) -> ProfileSet:
    """Profiles in the paper's form: the ``quantile`` of the measured samples per batch size (the mean
    where there are none), every size ``1..max_batch`` filled by linear interpolation between profiled
    sizes, then made non-decreasing in b (spec §4). Deterministic service at these values is what the
    paper's simulator assumes; the MDP and `shared.sim` then see the same latencies.

    Examples
    --------
    >>> from shared.profiles.format import DeviceType
    >>> p = ProfileSet(source="t", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.0)],
    ...     variants=[VariantProfile(variant="a", family="f", device="cpu", accuracy=0.9, max_batch=4,
    ...                              batch_latency_ms={1: 2.0, 4: 5.0})])
    >>> quantile_profiles(p).variants[0].batch_latency_ms
    {1: 2.0, 2: 3.0, 3: 4.0, 4: 5.0}
    """
    dense = []
    for p in at_quantile(profiles, quantile).variants:
        sizes = np.array(list(p.batch_latency_ms), dtype=np.float64)
        values = np.array(list(p.batch_latency_ms.values()))
        top = int(sizes[-1]) if max_batch is None else min(max_batch, int(sizes[-1]))
        filled = np.interp(np.arange(1, top + 1), sizes, values)
        filled = np.minimum.accumulate(filled[::-1])[::-1]  # lat[b-1] <= lat[b]
        dense.append(
            p.model_copy(
                update={
                    "batch_latency_ms": {b + 1: float(v) for b, v in enumerate(filled)},
                    "latency_samples_ms": None,
                    "max_batch": min(p.max_batch, top),
                }
            )
        )
    note = f" Rewritten by shared.ramsis.quantile_profiles: p{quantile * 100:g} latency, linear fill, monotone."
    return profiles.model_copy(update={"variants": dense, "source": profiles.source + note})
