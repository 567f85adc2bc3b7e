"""One worker's MDP under round-robin over K workers: states, actions, rewards and Eq. 1-3 (spec §3.2-3.5).

States are ``(n, j)``: n queued queries (0..N) and the floor bin ``T_j`` of the earliest deadline's
slack, plus the full-queue state (n > N, slack 0), indexed ``s = n * J + j`` and ``(N + 1) * J``.
Actions are ``(m, b)``; with maximal batching b = n. An action is valid when ``l(m, b) <= T_j``; a state
with none gets the forced action ``(m_min, n)`` (serve late rather than drop), the empty queue the
arrival action, and the full state behaves like ``(N, 0)``. The reward is ``Accuracy(m)`` (times b / n
under variable batching, as in the authors' artifact) when the action is valid, else 0.

Transitions. Let the worker's phase r = k_A mod K (how many central arrivals it has missed since its
last query) and ``w_r(n, j) ∝ P_A((n-1)K + r, SLO - T_j)`` the denominator of Eq. 2. After an action of
latency l the first new query arrives in bin j' iff it lands in ``[β_j', β_j'+1)`` with
``β_j' = max(0, l - SLO + T_j')`` (β_0 = 0, β_J = l; spec §3.5.1), so with

    F_r(x, n') = P(no worker arrival in [0, x] and n' in [0, l])
               = Σ_{a < K-r} P_A(a, x) · Q(r + a, n'; l - x),
    Q(u, n'; T) = P(N(T) ∈ [n'K - u, (n'+1)K - u - 1])

Eq. 2 is ``Σ_r w_r (F_r(β_j') - F_r(β_j'+1))``: the four-interval sum of the paper, telescoped. For
``β > 0``, ``l - β = SLO - T_j'`` does not depend on l, so Q is shared by all actions and value iteration
needs one small matrix product per sweep instead of the |S| x |S| x |A| tensor. The n' = 0 mass (no
arrival during service) goes to (1, SLO) - Eq. 1 composed, as in the artifact - and Eq. 3 sends the rest
(n' > N) to the full state.

A Gamma renewal process has no independent increments, so the product above is an approximation
for it and F may even rise with x; there the bin probabilities are clipped at 0, rescaled to the exact
queue-length marginal ``Q(r, n'; l)``, and stored per latency (``bins``) for the sweeps to use instead.

Under variable batching (b < n) the remaining query b+1 becomes the earliest. Given k_A central
arrivals spread uniformly over interval A (Poisson), it is central arrival bK, whose position has a
Beta(bK, k_A - bK + 1) law; its slack minus l gives j', new arrivals give ``n' = n - b + k``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import sparse, stats

from shared.ramsis.arrivals import POISSON, ArrivalProcess
from shared.ramsis.problem import RamsisProblem

#: the arrival action's model index
WAIT = -1
#: probabilities below this are zeroed: far below any effect, and it keeps products out of the subnormals
_TINY = 1e-30


@dataclass(frozen=True, eq=False)
class WorkerMdp:
    """The MDP of one worker for one (K, load, arrival process); arrays are indexed as documented."""

    problem: RamsisProblem
    workers: int
    rate_qps: float
    arrivals: ArrivalProcess
    #: (N+1, J, K) w_r(n, j), the phase distribution given the state (row n = 0 unused)
    weights: np.ndarray
    #: (L,) the distinct latencies of all actions that can be taken
    latencies_ms: np.ndarray
    #: (M, N+1) index into ``latencies_ms`` of l(m, b), -1 for pairs no state may take
    latency_index: np.ndarray
    #: (N+1,) m_min(n), the forced action's model ([0] unused)
    forced_model: np.ndarray
    #: (L,) i0: the last slack boundary that sits at time 0 for this latency
    first_bin: np.ndarray
    #: (L, J, K) P_A(a, β_i) for boundaries i > i0, else 0
    start_pmf: np.ndarray
    #: (J, K, N) Q(u, n'; SLO - T_i) for n' = 1..N
    bin_window: np.ndarray
    #: (L, K, N) Q(r, n'; l)
    latency_window: np.ndarray
    #: (L, K) no arrival during service; and more than N
    p_empty: np.ndarray
    p_full: np.ndarray
    #: (L, J, K, N) bin probabilities, only for arrivals without independent increments (else None)
    bins: np.ndarray | None = None

    @property
    def num_states(self) -> int:
        return self.problem.num_states

    @property
    def full_state(self) -> int:
        return self.num_states - 1

    def state(self, n: int, j: int) -> int:
        return n * self.problem.num_slack + j

    def next_values(self, values: np.ndarray, full_value: float) -> np.ndarray:
        """``(L, K)``: expected next-state value of an action of each latency, per phase r.

        ``values`` is ``(N+1, J)``. Summation by parts turns the bin differences of F into value
        differences, so the sweep costs ``O(L J K^2 + J K N)``.
        """
        tail = self.p_empty * values[1, -1] + self.p_full * full_value
        if self.bins is not None:
            return np.einsum("ljrn,nj->lr", self.bins, values[1:]) + tail
        k = self.workers
        n_slack = self.problem.num_slack
        dv = np.zeros((n_slack, values.shape[0] - 1))
        dv[1:] = (values[1:, 1:] - values[1:, :-1]).T
        z = np.einsum("iun,in->iu", self.bin_window, dv)
        z_pad = np.concatenate([z, np.zeros_like(z)], axis=1)
        hankel = z_pad[:, np.add.outer(np.arange(k), np.arange(k))]  # [i, a, r] = z[i, r + a]
        later = self.start_pmf.reshape(len(self.latencies_ms), -1) @ hankel.reshape(-1, k)
        at_zero = np.einsum("lrn,nl->lr", self.latency_window, values[1:, self.first_bin])
        return later + at_zero + tail

    def bin_probabilities(self, latency: int) -> np.ndarray:
        """``(J, K, N)``: P(first new query in bin j', n' new queries | phase r) for latency index l."""
        if self.bins is not None:
            return self.bins[latency]
        return self._bin_probabilities(latency)

    def _bin_probabilities(self, latency: int) -> np.ndarray:
        i0 = int(self.first_bin[latency])
        n_slack, k = self.problem.num_slack, self.workers
        f = np.zeros((n_slack + 1,) + self.bin_window.shape[1:])
        f[: i0 + 1] = self.latency_window[latency]
        start = self.start_pmf[latency, i0 + 1 :]
        shift = np.subtract.outer(np.arange(k), np.arange(k)).T  # [r, u] = u - r
        toeplitz = np.concatenate([start, np.zeros((len(start), 1))], axis=1)[:, np.where(shift >= 0, shift, k)]
        f[i0 + 1 : n_slack] = toeplitz @ self.bin_window[i0 + 1 :]  # Σ_a P_A(a, β_i) Q_i(r + a, n')
        g = np.maximum(f[:-1] - f[1:], 0.0)
        if self.arrivals.independent_increments:
            return g
        total = g.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return g * np.where(total > 0, self.latency_window[latency] / total, 0.0)

    def maximal_rows(self, n: np.ndarray, j: np.ndarray, latency: np.ndarray) -> np.ndarray:
        """Dense transition rows of states ``(n, j)`` (n >= 1) serving their whole queue at ``latency``."""
        n_slack, n_max = self.problem.num_slack, self.problem.max_queue
        rows = np.zeros((len(n), self.num_states))
        for lat in np.unique(latency):
            sel = np.flatnonzero(latency == lat)
            w = self.weights[n[sel], j[sel]]
            g = self.bin_probabilities(int(lat)).transpose(1, 2, 0).reshape(self.workers, -1)
            rows[sel, n_slack : (n_max + 1) * n_slack] = w @ g
            rows[sel, self.state(1, n_slack - 1)] += w @ self.p_empty[lat]
            rows[sel, self.full_state] += w @ self.p_full[lat]
        return rows

    def partial_rows(self, n: int, b: int, latency: int) -> np.ndarray:
        """``(J, S)`` rows of states ``(n, j)`` for every j serving ``b < n`` queries at ``latency``."""
        p = self.problem
        k, n_slack, n_max = self.workers, p.num_slack, p.max_queue
        slack, lat = p.slack_ms, self.latencies_ms[latency]
        wait = p.slo_ms - slack  # T_A per current bin
        r = np.arange(k)
        beta = stats.beta(b * k, (n - 1) * k + r - b * k + 1)
        # position of query b+1 in A, as a fraction, at which its slack minus l reaches T_j'
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (slack[None, 1:] + lat - slack[:, None]) / wait[:, None]  # (J, J-1)
        cdf = beta.cdf(np.clip(x, 0.0, 1.0)[:, :, None])  # (J, J-1, K)
        exact = wait == 0  # earliest slack is the SLO: the next one's position is known
        cdf[exact] = (slack[None, 1:] > slack[exact, None] - lat)[:, :, None].astype(float)
        upper = np.concatenate([cdf, np.ones((n_slack, 1, k))], axis=1)
        lower = np.concatenate([np.zeros((n_slack, 1, k)), cdf], axis=1)
        next_bin = np.maximum(upper - lower, 0.0)  # (J, J', K)
        arrivals = np.concatenate([self.p_empty[latency][:, None], self.latency_window[latency]], axis=1)
        kept = n - b
        room = n_max - kept  # new arrivals that still fit
        w = self.weights[n]  # (J, K)
        rows = np.zeros((n_slack, self.num_states))
        joint = np.einsum("jr,jtr,rk->jkt", w, next_bin, arrivals[:, : room + 1])
        rows[:, kept * n_slack : (n_max + 1) * n_slack] = joint.reshape(n_slack, -1)
        rows[:, self.full_state] = np.maximum(0.0, 1.0 - rows.sum(axis=1))
        return rows


def compile_mdp(
    problem: RamsisProblem,
    *,
    workers: int,
    rate_qps: float,
    arrivals: ArrivalProcess = POISSON,
) -> WorkerMdp:
    """The MDP of one of ``workers`` round-robin workers when the central queue sees ``rate_qps``."""
    if not (isinstance(workers, (int, np.integer)) and workers >= 1):
        raise ValueError(f"`workers` must be an integer >= 1, got {workers!r}")
    if not (np.isfinite(rate_qps) and rate_qps > 0):
        raise ValueError(f"`rate_qps` must be finite and > 0, got {rate_qps}")
    k, n_max = int(workers), problem.max_queue
    slo, slack = problem.slo_ms, problem.slack_ms
    n_slack = len(slack)

    # w_r(n, j): the denominator of Eq. 2 normalises over the phase
    pmf_a = arrivals.count_pmf(rate_qps, (slo - slack) / 1000.0, n_max * k)
    counts = (np.arange(1, n_max + 1)[:, None] - 1) * k + np.arange(k)  # (N, K)
    raw = pmf_a[:, counts].transpose(1, 0, 2)  # (N, J, K)
    total = raw.sum(axis=2, keepdims=True)
    mode = np.rint(rate_qps * (slo - slack) / 1000.0)[None, :] - counts[:, :1]  # under/overflow fallback
    fallback = np.arange(k) == np.clip(mode, 0, k - 1)[:, :, None]
    weights = np.zeros((n_max + 1, n_slack, k))
    with np.errstate(invalid="ignore", divide="ignore"):
        weights[1:] = np.where(total > 0, raw / total, fallback)

    latency = problem.latency_ms
    forced_model = np.zeros(n_max + 1, dtype=np.int64)
    forced_model[1:] = [problem.fastest(n) for n in range(1, n_max + 1)]
    usable = np.zeros_like(latency, dtype=bool)
    usable[:, 1:] = latency[:, 1:] <= slo
    usable[forced_model[1:], np.arange(1, n_max + 1)] = True
    latencies = np.unique(latency[usable])
    latency_index = np.where(usable, np.searchsorted(latencies, np.where(usable, latency, 0.0)), -1)

    max_count = (n_max + 1) * k - 1
    bin_window, _, _ = _windows(arrivals.count_pmf(rate_qps, (slo - slack) / 1000.0, max_count), k, n_max)
    latency_window, p_empty, p_full = _windows(arrivals.count_pmf(rate_qps, latencies / 1000.0, max_count), k, n_max)

    boundary = latencies[:, None] - slo + slack[None, :]  # β_i in ms, (L, J)
    at_zero = (boundary <= 0) | (np.arange(n_slack) == 0)
    first_bin = at_zero.sum(axis=1) - 1
    start_pmf = np.zeros((len(latencies), n_slack, k))
    later = ~at_zero
    start_pmf[later] = arrivals.count_pmf(rate_qps, boundary[later] / 1000.0, k - 1)
    for table in (weights, start_pmf, bin_window, latency_window, p_empty, p_full):
        table[table < _TINY] = 0.0  # subnormal floats make the sweeps' products ~30x slower
    mdp = WorkerMdp(
        problem=problem,
        workers=k,
        rate_qps=float(rate_qps),
        arrivals=arrivals,
        weights=weights,
        latencies_ms=latencies,
        latency_index=latency_index,
        forced_model=forced_model,
        first_bin=first_bin,
        start_pmf=start_pmf,
        bin_window=bin_window,
        latency_window=latency_window,
        p_empty=p_empty,
        p_full=p_full,
    )
    if arrivals.independent_increments:
        return mdp
    bins = np.stack([mdp.bin_probabilities(lat) for lat in range(len(latencies))])
    return dataclasses.replace(mdp, bins=bins)


def _windows(pmf: np.ndarray, k: int, n_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From count pmfs (rows), Q(u, n') for n' = 1..N, P(no worker arrival) and P(more than N), per u."""
    cdf = np.cumsum(pmf, axis=1)
    u = np.arange(k)[:, None]
    n = np.arange(1, n_max + 1)[None, :]
    window = cdf[:, (n + 1) * k - u - 1] - cdf[:, n * k - u - 1]
    empty = cdf[:, k - 1 - np.arange(k)]
    full = np.maximum(0.0, 1.0 - cdf[:, (n_max + 1) * k - 1 - np.arange(k)])
    return np.maximum(window, 0.0), empty, full


@dataclass(frozen=True, eq=False)
class ExplicitMdp:
    """Every (state, action) pair as one sparse transition row, grouped by state in state order."""

    transitions: sparse.csr_matrix
    reward: np.ndarray
    state: np.ndarray
    model: np.ndarray
    batch: np.ndarray
    satisfied: np.ndarray


def explicit_mdp(mdp: WorkerMdp) -> ExplicitMdp:
    """All action rows: for variable batching (and to cross-check the fast maximal sweep)."""
    p = mdp.problem
    n_slack, n_max = p.num_slack, p.max_queue
    blocks: list[sparse.csr_matrix] = []
    meta: list[np.ndarray] = []  # columns: state, model, batch, satisfied, reward

    def add(rows: np.ndarray, states: np.ndarray, model: np.ndarray, batch: np.ndarray, ok: np.ndarray,
            reward: np.ndarray) -> None:
        blocks.append(sparse.csr_matrix(rows))
        meta.append(np.column_stack([states, model, batch, ok, reward]))

    js = np.arange(n_slack)
    arrive = np.zeros((n_slack, mdp.num_states))
    arrive[:, mdp.state(1, n_slack - 1)] = 1.0
    zero = np.zeros(n_slack)
    add(arrive, js, zero + WAIT, zero, zero, zero)
    for n in range(1, n_max + 1):
        states = n * n_slack + js
        any_valid = np.zeros(n_slack, dtype=bool)
        for b in (range(1, n + 1) if p.batching == "variable" else (n,)):
            for m in range(p.num_models):
                lat = mdp.latency_index[m, b]
                if lat < 0 or p.latency_ms[m, b] > p.slo_ms:
                    continue
                ok = p.latency_ms[m, b] <= p.slack_ms
                if not ok.any():
                    continue
                any_valid |= ok
                rows = mdp.maximal_rows(np.full(n_slack, n), js, np.full(n_slack, lat)) if b == n else \
                    mdp.partial_rows(n, b, lat)
                reward = p.accuracy[m] * b / n
                add(rows[ok], states[ok], np.full(ok.sum(), m), np.full(ok.sum(), b), np.ones(ok.sum()),
                    np.full(ok.sum(), reward))
        forced = ~any_valid
        if forced.any():
            m = int(mdp.forced_model[n])
            lat = np.full(forced.sum(), mdp.latency_index[m, n])
            add(mdp.maximal_rows(np.full(forced.sum(), n), js[forced], lat), states[forced],
                np.full(forced.sum(), m), np.full(forced.sum(), n), np.zeros(forced.sum()), np.zeros(forced.sum()))
    m = int(mdp.forced_model[n_max])
    full_row = mdp.maximal_rows(np.array([n_max]), np.array([0]), np.array([mdp.latency_index[m, n_max]]))
    add(full_row, np.array([mdp.full_state]), np.array([m]), np.array([n_max]), np.zeros(1), np.zeros(1))
    info = np.concatenate(meta)
    order = np.argsort(info[:, 0], kind="stable")
    return ExplicitMdp(
        transitions=sparse.vstack(blocks, format="csr")[order],
        reward=info[order, 4],
        state=info[order, 0].astype(np.int64),
        model=info[order, 1].astype(np.int64),
        batch=info[order, 2].astype(np.int64),
        satisfied=info[order, 3].astype(bool),
    )
