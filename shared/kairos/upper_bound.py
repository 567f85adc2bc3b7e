"""Kairos's throughput upper bound (HPDC'23 §5.2, Eq. 9-15) and the configuration space it ranks.

Pretend every query is available up front: small queries (bucket < s) may go to auxiliaries, the rest
("s+") must go to the base. With ``u`` base instances, ``v^i`` of auxiliary type ``i`` and
``f' = max f^i`` over the types present, the aggregate auxiliary rate ``V = sum_i v^i Q_a^i`` and

    C  = V (1 - f') / f'                                                      (14)
    UB = u Q_b^{s+} / (1 - f')                              if u Q_b^{s+} <= C  (base is the bottleneck)
    UB = V / f' + (u Q_b^{s+} - C) / (u Q_b^{s+}) * u Q_b   otherwise          (15)

with ``Q_a^i`` and ``Q_b^{s+}`` taken at the largest ``s`` among the present types. A purely homogeneous
configuration gets ``u Q_b``; one without a base instance is excluded (UB 0).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.kairos.distribution import DistributionStats

#: budget comparisons tolerate float rounding of summed prices
BUDGET_TOL = 1e-9


def upper_bound(
    u: np.ndarray | float,
    aux_qps: np.ndarray | float,
    *,
    q_base: float,
    q_base_large: float,
    f_prime: float,
) -> np.ndarray:
    """Eq. 14/15 for ``u`` base instances whose auxiliaries together serve ``aux_qps`` (= V) small queries.

    Examples
    --------
    The spec's hand example (one base, one auxiliary; the auxiliary is the bottleneck, Eq. 11):

    >>> float(upper_bound(1, 8.0, q_base=10.0, q_base_large=5.0, f_prime=0.8))
    16.0
    """
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(aux_qps, dtype=np.float64)
    if not 0 <= f_prime <= 1:
        raise ValueError(f"`f_prime` must be in [0, 1], got {f_prime}")
    if f_prime == 0:  # no query is small enough for any auxiliary
        return u * q_base
    if f_prime == 1:  # every query fits the auxiliaries: both sides run flat out
        return v + u * q_base
    base_large = u * q_base_large
    c = v * (1.0 - f_prime) / f_prime
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = np.where(base_large > 0, (base_large - c) / base_large, 0.0)
    return np.where(base_large <= c, base_large / (1.0 - f_prime), v / f_prime + slack * u * q_base)


def configuration_upper_bounds(configs: np.ndarray, stats: DistributionStats) -> np.ndarray:
    """UB of every row ``(u, v^1, ..., v^k)`` of ``configs``, columns ordered base then ``stats.auxiliaries``."""
    counts = np.asarray(configs, dtype=np.int64)
    num_aux = len(stats.auxiliaries)
    if counts.ndim != 2 or counts.shape[1] != 1 + num_aux or np.any(counts < 0):
        raise ValueError(f"`configs` must be a non-negative (K, {1 + num_aux}) integer array")
    u, v = counts[:, 0], counts[:, 1:]
    ub = np.where(u > 0, u * stats.q_base, 0.0)
    present = v > 0
    masks, group = np.unique(present, axis=0, return_inverse=True)
    for g, mask in enumerate(masks):
        rows = (group.ravel() == g) & (u > 0)
        if not mask.any() or not rows.any():
            continue
        types = [a for a, keep in zip(stats.auxiliaries, mask) if keep]
        s = max(stats.limit[a] for a in types)
        q_aux = np.array([stats.q_aux[(a, s)] if keep else 0.0 for a, keep in zip(stats.auxiliaries, mask)])
        ub[rows] = upper_bound(
            u[rows],
            v[rows] @ q_aux,
            q_base=stats.q_base,
            q_base_large=stats.q_base_large[s],
            f_prime=stats.small_fraction[s],
        )
    return ub


def enumerate_configs(
    prices: Sequence[float],
    budget: float,
    *,
    max_counts: Sequence[int] | None = None,
    min_base: int = 1,
) -> np.ndarray:
    """Every integer count vector (column 0 = base) with total price <= ``budget``, lexicographic order.

    At $2.5/h over the paper's four types this gives 331 configurations with ``u >= 1`` (697 with
    ``min_base=0``).
    """
    price = np.asarray(prices, dtype=np.float64)
    if price.ndim != 1 or len(price) == 0 or np.any(price <= 0):
        raise ValueError("`prices` must be a non-empty sequence of positive prices")
    if not budget >= 0:
        raise ValueError(f"`budget` must be >= 0, got {budget}")
    caps = np.floor((budget + BUDGET_TOL) / price).astype(np.int64)
    if max_counts is not None:
        if len(max_counts) != len(price):
            raise ValueError("`max_counts` must have one entry per price")
        caps = np.minimum(caps, np.asarray(max_counts, dtype=np.int64))
    configs = np.zeros((1, 0), dtype=np.int64)
    spent = np.zeros(1)
    for t in range(len(price)):
        room = np.floor((budget + BUDGET_TOL - spent) / price[t] + 1e-12).astype(np.int64)
        room = np.minimum(room, caps[t])
        reps = room + 1
        idx = np.repeat(np.arange(len(configs)), reps)
        counts = np.concatenate([np.arange(r) for r in reps]) if len(reps) else np.zeros(0, np.int64)
        configs = np.column_stack([configs[idx], counts])
        spent = spent[idx] + counts * price[t]
    keep = (configs[:, 0] >= min_base) & (spent <= budget + BUDGET_TOL)
    return configs[keep]


def config_costs(configs: np.ndarray, prices: Sequence[float]) -> np.ndarray:
    return np.asarray(configs, dtype=np.float64) @ np.asarray(prices, dtype=np.float64)


def budget_maximal(configs: np.ndarray, prices: Sequence[float], budget: float) -> np.ndarray:
    """Mask of the configurations to which no further instance of any type fits within ``budget``.

    Every other configuration is a sub-configuration of one of these (Kairos §5.2: "if x_1 can add more
    instances to become x_2"), and sub-configurations are assumed never to beat it, the assumption
    Algorithm 1 prunes with; a maximum over configurations (the Oracle) need only visit these.
    """
    price = np.asarray(prices, dtype=np.float64)
    return budget + BUDGET_TOL - config_costs(configs, price) < price.min()
