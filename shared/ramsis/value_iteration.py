"""Value iteration on one worker's MDP (spec §3.6).

The paper solves the MDP "until convergence" and gives no discount; the authors' artifact runs 100
synchronous undiscounted sweeps from V = 0 and takes the greedy policy of the last V, i.e. a 100-step
lookahead. That is the default here (``gamma=1``, ``max_iter=100``, ``tol=None``). With ``tol`` set the
sweeps stop once the change is below it: the sup norm for ``gamma < 1`` (V converges to V*), the span
for ``gamma = 1`` (relative value iteration: the greedy policy is then average-reward optimal).

Maximal batching uses the fast sweep of `WorkerMdp.next_values`; variable batching (many more actions)
uses explicit sparse rows. Ties go to the first action: the fastest model, then the smallest batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from shared.ramsis.mdp import WAIT, WorkerMdp, explicit_mdp


class ViStatus(str, Enum):
    CONVERGED = "converged"
    #: ``max_iter`` sweeps with no tolerance asked for: a finite-horizon lookahead (the artifact's)
    HORIZON = "horizon"
    NOT_CONVERGED = "not_converged"


@dataclass(frozen=True, eq=False)
class ValueIterationResult:
    """The greedy policy of the final values: per state ``(n, j)``, a model index and a batch size."""

    status: ViStatus
    message: str
    #: (N+1, J) model index (`WAIT` for the empty queue) and batch size per state
    model: np.ndarray
    batch: np.ndarray
    #: the full-queue state's model (batch N)
    full_model: int
    values: np.ndarray
    full_value: float
    iterations: int
    #: the last change measured (sup norm, or span for gamma = 1)
    residual: float

    @property
    def success(self) -> bool:
        return self.status is not ViStatus.NOT_CONVERGED


def value_iteration(
    mdp: WorkerMdp, *, gamma: float = 1.0, max_iter: int = 100, tol: float | None = None
) -> ValueIterationResult:
    """Synchronous value iteration ``V(s) <- max_a [R(s, a) + gamma Σ P_a(s, s') V(s')]`` from V = 0.

    Examples
    --------
    >>> from shared.ramsis.testing import tiny_problem
    >>> from shared.ramsis.mdp import compile_mdp
    >>> result = value_iteration(compile_mdp(tiny_problem(), workers=2, rate_qps=20.0))
    >>> result.status.value, result.iterations, int(result.model[1, -1])  # one query, full slack
    ('horizon', 100, 2)
    """
    _vi_iv(gamma, max_iter, tol)
    solve = _solve_maximal if mdp.problem.batching == "maximal" else _solve_explicit
    return solve(mdp, gamma, max_iter, tol)


def _vi_iv(gamma: float, max_iter: int, tol: float | None) -> None:
    if not 0 < gamma <= 1:
        raise ValueError(f"`gamma` must be in (0, 1], got {gamma}")
    if max_iter < 1:
        raise ValueError(f"`max_iter` must be >= 1, got {max_iter}")
    if tol is not None and not tol > 0:
        raise ValueError(f"`tol` must be > 0, got {tol}")


def _change(new: np.ndarray, old: np.ndarray, gamma: float) -> float:
    diff = new - old
    return float(diff.max() - diff.min()) if gamma == 1 else float(np.abs(diff).max())


def _status(converged: bool, tol: float | None, iterations: int, residual: float) -> tuple[ViStatus, str]:
    if converged:
        return ViStatus.CONVERGED, f"converged after {iterations} sweeps (change {residual:.3g} < {tol})"
    if tol is None:
        return ViStatus.HORIZON, f"{iterations}-step lookahead (no tolerance set; last change {residual:.3g})"
    return ViStatus.NOT_CONVERGED, f"change {residual:.3g} still >= {tol} after {iterations} sweeps"


def _solve_maximal(mdp: WorkerMdp, gamma: float, max_iter: int, tol: float | None) -> ValueIterationResult:
    p = mdp.problem
    n_max, n_slack = p.max_queue, p.num_slack
    queue = np.arange(1, n_max + 1)
    latency = p.latency_ms[:, 1:].T  # (N, M) at b = n
    valid = latency[:, None, :] <= p.slack_ms[None, :, None]  # (N, J, M)
    reward = np.where(valid, p.accuracy[None, None, :], 0.0)
    action = np.maximum(mdp.latency_index[:, 1:].T, 0)  # (N, M); only read where valid
    forced = mdp.latency_index[mdp.forced_model[1:], queue]  # (N,)
    has_valid = valid.any(axis=2)
    weights = mdp.weights[1:]

    def sweep(values: np.ndarray, full_value: float) -> tuple[np.ndarray, np.ndarray]:
        h = mdp.next_values(values, full_value)
        q = np.where(valid, reward + gamma * np.einsum("njr,nmr->njm", weights, h[action]), -np.inf)
        late = gamma * np.einsum("njr,nr->nj", weights, h[forced])
        new = np.empty_like(values)
        new[0] = gamma * values[1, -1]
        new[1:] = np.where(has_valid, q.max(axis=2), late)
        return new, q.argmax(axis=2)

    values, full_value = np.zeros((n_max + 1, n_slack)), 0.0
    residual, converged, it = np.inf, False, 0
    for it in range(1, max_iter + 1):
        new, _ = sweep(values, full_value)
        new_full = new[n_max, 0]  # the full state acts like (N, 0)
        residual = _change(np.append(new.ravel(), new_full), np.append(values.ravel(), full_value), gamma)
        values, full_value = new, new_full
        if tol is not None and residual < tol:
            converged = True
            break
    _, choice = sweep(values, full_value)
    model = np.full((n_max + 1, n_slack), WAIT, dtype=np.int64)
    model[1:] = np.where(has_valid, choice, mdp.forced_model[1:, None])
    batch = np.zeros_like(model)
    batch[1:] = queue[:, None]
    status, message = _status(converged, tol, it, residual)
    return ValueIterationResult(status, message, model, batch, int(mdp.forced_model[n_max]), values,
                                float(full_value), it, residual)


def _solve_explicit(mdp: WorkerMdp, gamma: float, max_iter: int, tol: float | None) -> ValueIterationResult:
    e = explicit_mdp(mdp)
    starts = np.flatnonzero(np.r_[True, e.state[1:] != e.state[:-1]])
    values = np.zeros(mdp.num_states)
    residual, converged, it = np.inf, False, 0
    for it in range(1, max_iter + 1):
        new = np.maximum.reduceat(e.reward + gamma * (e.transitions @ values), starts)
        residual = _change(new, values, gamma)
        values = new
        if tol is not None and residual < tol:
            converged = True
            break
    q = e.reward + gamma * (e.transitions @ values)
    best = np.flatnonzero(q == np.maximum.reduceat(q, starts)[e.state])
    _, first = np.unique(e.state[best], return_index=True)
    pick = best[first]  # one row per state, in state order
    shape = (mdp.problem.max_queue + 1, mdp.problem.num_slack)
    status, message = _status(converged, tol, it, residual)
    return ValueIterationResult(status, message, e.model[pick[:-1]].reshape(shape), e.batch[pick[:-1]].reshape(shape),
                                int(e.model[pick[-1]]), values[:-1].reshape(shape), float(values[-1]), it, residual)
