"""Central-queue arrival counts ``P_A(k, T)``, the one input of the RAMSIS transition model (spec §3.5).

The derivation of Eq. 2 multiplies the counts of disjoint intervals, which is exact only for a counting
process with independent, stationary increments (a Lévy process). Poisson is such a process and is what
the paper evaluates. ``gamma`` is the paper's other example: a renewal process with Gamma gaps, whose
count over an interval that starts at an arrival is ``P(N(T) >= k) = P(S_k <= T)`` with ``S_k`` a sum of
``k`` gaps. Its increments are *not* independent, so with ``gamma`` the MDP is an approximation; the
simulator measures how good (``bench.ramsis``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import special, stats

ArrivalKind = Literal["poisson", "gamma"]


@dataclass(frozen=True, slots=True)
class ArrivalProcess:
    """Arrivals at the central queue, at a rate given per call (policies are indexed by the rate).

    Parameters
    ----------
    kind : ``poisson`` (exponential gaps) or ``gamma`` (Gamma gaps, renewal counts).
    cv : coefficient of variation of the gaps for ``gamma`` (1 is Poisson); ignored for ``poisson``.

    Examples
    --------
    >>> pmf = ArrivalProcess().count_pmf(1000.0, np.array([0.0, 0.002]), 3)
    >>> np.round(pmf, 4).tolist()
    [[1.0, 0.0, 0.0, 0.0], [0.1353, 0.2707, 0.2707, 0.1804]]
    >>> bursty = ArrivalProcess("gamma", cv=2.0).count_pmf(1000.0, np.array([0.002]), 200)
    >>> bool(abs(bursty.sum() - 1) < 1e-9 and bursty[0, 0] > pmf[1, 0])
    True
    """

    kind: ArrivalKind = "poisson"
    cv: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("poisson", "gamma"):
            raise ValueError(f"`kind` must be 'poisson' or 'gamma', got {self.kind!r}")
        if not (np.isfinite(self.cv) and self.cv > 0):
            raise ValueError(f"`cv` must be finite and > 0, got {self.cv}")

    def count_pmf(self, rate_qps: float, duration_s: np.ndarray, max_count: int) -> np.ndarray:
        """``P_A(k, T)`` for each duration (rows) and ``k = 0..max_count`` (columns)."""
        durations = np.asarray(duration_s, dtype=np.float64).reshape(-1, 1)
        counts = np.arange(max_count + 1, dtype=np.float64).reshape(1, -1)
        mean = rate_qps * np.maximum(durations, 0.0)
        if self.kind == "poisson":
            return stats.poisson.pmf(counts, mean)
        shape = 1.0 / self.cv**2
        x = shape * mean  # time in units of the gap scale
        # P(S_k <= T) with S_k ~ Gamma(k * shape); S_0 = 0 so P(S_0 <= T) = 1
        reached = np.where(counts == 0, 1.0, special.gammainc(np.maximum(counts, 1) * shape, x))
        beyond = special.gammainc((counts + 1) * shape, x)
        return np.maximum(reached - beyond, 0.0)

    @property
    def independent_increments(self) -> bool:
        """True when Eq. 2's product of interval counts is exact (Poisson; Gamma with cv = 1 is Poisson)."""
        return self.kind == "poisson" or self.cv == 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "cv": self.cv}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArrivalProcess:
        return cls(kind=data["kind"], cv=float(data.get("cv", 1.0)))

    def describe(self) -> str:
        return "poisson" if self.kind == "poisson" else f"gamma(cv={self.cv:g})"


POISSON = ArrivalProcess()
