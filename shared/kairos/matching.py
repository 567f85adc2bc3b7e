"""Kairos query distribution as a min-cost bipartite matching (HPDC'23 §5.1, Eq. 1-8).

Problem: m queued queries, n instances (busy ones too). ``L[i, j]`` is the time from now until instance j
would finish query i (its remaining busy time plus i's predicted latency on it), ``W[i]`` the time i has
waited. Minimise the heterogeneity-weighted usage

    min_P  sum_ij C_j L_ij P_ij   s.t.  (L_ij + W_i) P_ij <= xi T_qos,  one-to-one,  min(m, n) pairs,

with the QoS constraint folded into the cost: a violating pair costs a penalty (10 T_qos) that dominates
every feasible cost (<= T_qos). That is a rectangular linear sum assignment, solved with
`scipy.optimize.linear_sum_assignment` (Jonker-Volgenant).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

#: the paper's noise safeguard: a predicted completion within 2% of the target counts as a violation
XI = 0.98
#: the paper's penalty, in units of T_qos
PENALTY_FACTOR = 10.0


def heterogeneity_coefficients(max_batch_latency_ms: Mapping[str, float]) -> dict[str, float]:
    """``C_t = Lat(base, b_max) / Lat(t, b_max)``, the base being the fastest type on the largest query.

    Examples
    --------
    >>> heterogeneity_coefficients({"I1": 100.0, "I2": 200.0, "I3": 500.0})
    {'I1': 1.0, 'I2': 0.5, 'I3': 0.2}
    """
    lat = _coefficients_iv(max_batch_latency_ms)
    fastest = min(lat.values())
    return {device: fastest / value for device, value in lat.items()}


def _coefficients_iv(max_batch_latency_ms: Mapping[str, float]) -> dict[str, float]:
    lat = {k: float(v) for k, v in max_batch_latency_ms.items()}
    if not lat or not all(math.isfinite(v) and v > 0 for v in lat.values()):
        raise ValueError("`max_batch_latency_ms` must be non-empty with finite latencies > 0")
    return lat


def kairos_cost_matrix(
    latency_ms: np.ndarray,
    wait_ms: np.ndarray,
    coefficients: np.ndarray,
    qos_ms: np.ndarray | float,
    *,
    xi: float = XI,
    penalty_ms: np.ndarray | float | None = None,
    penalty_tiebreak: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The m x n cost of Eq. 4/8 and the mask of QoS-feasible pairs.

    Parameters
    ----------
    latency_ms : ``L``, shape (m, n): remaining busy time of j + predicted latency of i on j.
    wait_ms : ``W``, shape (m,).
    coefficients : ``C``, shape (n,), in (0, 1].
    qos_ms : ``T_qos``, scalar or per query (m,).
    xi : safeguard; pairs with ``L + W > xi * T_qos`` are infeasible.
    penalty_ms : cost of an infeasible pair, scalar or per query; default ``10 * T_qos``.
    penalty_tiebreak : add ``C_j L_ij`` to penalised entries, so a query that is late everywhere still
        goes where it costs least rather than wherever the solver leaves it.

    Returns
    -------
    cost : (m, n) array.
    feasible : (m, n) bool array.
    """
    latency, wait, coeff, qos = _cost_matrix_iv(latency_ms, wait_ms, coefficients, qos_ms)
    if not 0 < xi <= 1:
        raise ValueError(f"`xi` must be in (0, 1], got {xi}")
    penalty = PENALTY_FACTOR * qos if penalty_ms is None else np.broadcast_to(
        np.asarray(penalty_ms, dtype=np.float64), qos.shape
    )
    return cost_matrix_unchecked(latency, wait, coeff, qos, penalty, xi=xi, penalty_tiebreak=penalty_tiebreak)


def cost_matrix_unchecked(
    latency: np.ndarray,
    wait: np.ndarray,
    coeff: np.ndarray,
    qos: np.ndarray,
    penalty: np.ndarray,
    *,
    xi: float,
    penalty_tiebreak: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """`kairos_cost_matrix` on canonical float arrays: per-query arrays of shape (m,), ``coeff`` of shape
    (n,) or, when a worker's coefficient depends on the query's variant, (m, n).

    The dispatch hot path builds its arrays itself and calls this on every event; skipping the checks
    there keeps a 20 x 20 decision in tens of microseconds.
    """
    feasible = latency + wait[:, None] <= xi * qos[:, None]
    usage = coeff * latency
    infeasible_cost = penalty[:, None] + usage if penalty_tiebreak else penalty[:, None]
    return np.where(feasible, usage, infeasible_cost), feasible


def _cost_matrix_iv(
    latency_ms: np.ndarray, wait_ms: np.ndarray, coefficients: np.ndarray, qos_ms: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    latency = np.asarray(latency_ms, dtype=np.float64)
    if latency.ndim != 2:
        raise ValueError("`latency_ms` must be a two-dimensional (m, n) array")
    m, n = latency.shape
    wait = np.asarray(wait_ms, dtype=np.float64)
    coeff = np.asarray(coefficients, dtype=np.float64)
    qos = np.broadcast_to(np.asarray(qos_ms, dtype=np.float64), (m,))
    if wait.shape != (m,) or coeff.shape != (n,):
        raise ValueError(f"`wait_ms` must have shape ({m},) and `coefficients` ({n},)")
    if not (np.all(np.isfinite(latency)) and np.all(np.isfinite(wait)) and np.all(qos > 0)):
        raise ValueError("`latency_ms` and `wait_ms` must be finite and `qos_ms` > 0")
    if np.any(coeff <= 0) or np.any(coeff > 1):
        raise ValueError("`coefficients` must lie in (0, 1]")
    return latency, wait, coeff, qos

