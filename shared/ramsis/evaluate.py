"""Expected accuracy and SLO-violation rate of a policy, from its stationary distribution (spec §3.9).

``E[violation] = Σ_s q(s) (1 - SLOSatisfied(s, π(s)))`` and ``E[accuracy] = Σ_{s ∈ S+} q(s) Acc(π(s)) /
Σ_{s ∈ S+} q(s)``, where q weighs the stationary state probability by the queries served there (the
batch size), so both are per-query rates comparable to what the simulator measures (the artifact's
reading; the paper's formula lost its relation symbol). The stationary distribution comes from power
iteration from (0, 0) on the policy's transition matrix (paper ref. [40]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from shared.ramsis.mdp import WorkerMdp


@dataclass(frozen=True, eq=False)
class ExpectedMetrics:
    #: accuracy per satisfied query (0 when no state satisfies its SLO)
    accuracy: float
    violation_rate: float
    iterations: int
    converged: bool
    #: stationary probability per state, full-queue state last
    distribution: np.ndarray


def policy_transitions(mdp: WorkerMdp, model: np.ndarray, batch: np.ndarray, full_model: int) -> sparse.csr_matrix:
    """The ``S x S`` transition matrix of the chain a policy ``(model, batch)`` induces."""
    p = mdp.problem
    n_slack = p.num_slack
    js = np.arange(n_slack)
    blocks = []
    arrive = np.zeros((n_slack, mdp.num_states))
    arrive[:, mdp.state(1, n_slack - 1)] = 1.0
    blocks.append(sparse.csr_matrix(arrive))
    for n in range(1, p.max_queue + 1):
        rows = np.zeros((n_slack, mdp.num_states))
        whole = batch[n] == n
        lat = mdp.latency_index[model[n], batch[n]]
        if np.any(lat < 0):
            raise ValueError(f"`model` picks actions no state of queue length {n} may take")
        if whole.any():
            rows[whole] = mdp.maximal_rows(np.full(whole.sum(), n), js[whole], lat[whole])
        for b, m in {(int(b), int(m)) for b, m in zip(batch[n][~whole], model[n][~whole])}:
            sel = (batch[n] == b) & (model[n] == m)
            rows[sel] = mdp.partial_rows(n, b, int(mdp.latency_index[m, b]))[sel]
        blocks.append(sparse.csr_matrix(rows))
    n_max = p.max_queue
    full = mdp.maximal_rows(np.array([n_max]), np.array([0]), np.array([mdp.latency_index[full_model, n_max]]))
    blocks.append(sparse.csr_matrix(full))
    return sparse.vstack(blocks, format="csr")


def expected_metrics(
    mdp: WorkerMdp,
    model: np.ndarray,
    batch: np.ndarray,
    full_model: int,
    *,
    max_iter: int = 1000,
    tol: float = 1e-12,
) -> ExpectedMetrics:
    """Power iteration ``p <- p P_π`` from (0, 0) until the L1 change is below ``tol`` (or ``max_iter``).

    Examples
    --------
    >>> from shared.ramsis.testing import tiny_problem
    >>> from shared.ramsis.mdp import compile_mdp
    >>> from shared.ramsis.value_iteration import value_iteration
    >>> mdp = compile_mdp(tiny_problem(), workers=2, rate_qps=20.0)
    >>> vi = value_iteration(mdp)
    >>> e = expected_metrics(mdp, vi.model, vi.batch, vi.full_model)
    >>> e.converged, 0.7 < e.accuracy <= 0.9, e.violation_rate < 0.05
    (True, True, True)
    """
    if max_iter < 1 or not tol > 0:
        raise ValueError(f"`max_iter` must be >= 1 and `tol` > 0, got {max_iter}, {tol}")
    p = mdp.problem
    forward = policy_transitions(mdp, model, batch, full_model).T.tocsr()
    dist = np.zeros(mdp.num_states)
    dist[mdp.state(0, 0)] = 1.0
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        new = forward @ dist
        change = float(np.abs(new - dist).sum())
        dist = new
        if change < tol:
            converged = True
            break
    n_max = p.max_queue
    served = np.append(batch.ravel(), n_max).astype(np.float64)
    slack = np.append(np.tile(p.slack_ms, n_max + 1), 0.0)
    models = np.append(model.ravel(), full_model)
    batches = np.append(batch.ravel(), n_max)
    serving = batches > 0
    latency = np.where(serving, p.latency_ms[np.maximum(models, 0), batches], 0.0)
    satisfied = serving & (latency <= slack)
    satisfied[-1] = False  # the full state's slack is taken as 0
    weight = dist * served
    total = weight.sum()
    violation = float(weight[serving & ~satisfied].sum() / total) if total > 0 else 0.0
    good = weight[satisfied]
    accuracy = float(good @ p.accuracy[models[satisfied]] / good.sum()) if good.sum() > 0 else 0.0
    return ExpectedMetrics(accuracy, violation, it, converged, dist)
