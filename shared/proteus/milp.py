"""Proteus's resource-management MILP (ASPLOS'24 §4, Eq. 1-7) in its exact linear form, solved by HiGHS.

Problem: choose which variant each device hosts (model selection and placement) and how much of each
query type every device serves (query assignment) so that all demand is served and the accuracy summed
over served queries is largest::

    max  sum_{d,m,q} A_m u_{d,m,q}
    s.t. sum_m x_{d,m} <= 1                                  (1) at most one variant per device
         sum_d y_{d,q} <= 1                                  (2)
         y_{d,q} <= sum_{m serves q} x_{d,m}                 (3') exact linear form of Eq. 3
         sum_{m,q} u_{d,m,q} <= sum_q y_{d,q} sigma_q        (4)
         sum_q u_{d,m,q} / P_{d,m,q} <= x_{d,m}              (5') Eq. 5, also when a variant serves several types
         sum_{d,m} u_{d,m,q} = sigma_q                       (6')
         x binary, y in [0, 1], u >= 0

``u`` disaggregates the paper's ``z`` by variant, which removes its bilinear terms (spec §3.2).
Devices of one type are interchangeable, so `solve_allocation` solves the equivalent *aggregated*
model over integer counts ``n_{t,m}`` of type-``t`` devices hosting ``m`` (no symmetry, a few hundred
variables at any fleet size); ``per_device=True`` solves the model above as written (the reference the
tests compare against). Routing shares follow from a solution as ``y = u / sigma``.

When demand exceeds what even the fastest variants can serve, the paper re-solves with a slightly
lower demand until the problem is feasible. Feasibility is monotone in a common demand scale, so the
first feasible scale of the ladder ``headroom - k * step`` (k = 0, 1, ...) is found exactly with one
extra MILP that maximizes the scale, instead of one solve per rung.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from shared.policy.base import PlanStatus

#: scipy.optimize.milp status -> meaning (0 optimal, 1 limit reached, 2 infeasible, 3 unbounded, 4 other)
_OPTIMAL, _LIMIT, _INFEASIBLE = 0, 1, 2
#: total objective weight of hosting every device: far below any accuracy difference that matters
_HOST_COST = 1e-6


@dataclass(frozen=True, slots=True, eq=False)
class AllocationProblem:
    """One instance: a fleet of device types, variants and query types, capacities and demand.

    Parameters
    ----------
    device_counts : (T,) devices of each type.
    accuracy : (M,) (normalized) accuracy of each variant.
    capacity : (T, M, Q) peak throughput ``P`` in QPS of variant m on type t for query type q; 0 where
        m does not serve q or is not feasible on t (no batch meets SLO/2, or it does not fit).
    demand : (Q,) QPS to serve per query type.
    variant_group, host_caps : optional (M,) group of each variant (a model family) and (T, G) caps:
        at most ``host_caps[t, g]`` devices of type t host a variant of group g (Sommelier's pinning).
    """

    device_counts: np.ndarray
    accuracy: np.ndarray
    capacity: np.ndarray
    demand: np.ndarray
    variant_group: np.ndarray | None = None
    host_caps: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.capacity.shape  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, eq=False)
class Allocation:
    """A solved allocation, aggregated by device type.

    ``counts[t, m]`` devices of type t host variant m; ``served[t, m, q]`` QPS of type q they serve in
    total; ``demand_scale`` is the factor applied to the demand (below 1: degraded); ``objective`` the
    planned effective accuracy, sum A u / sum u. ``mip_gap`` and the counts are ``None``/empty when no
    solution was found.
    """

    status: PlanStatus
    message: str
    counts: np.ndarray
    served: np.ndarray
    demand_scale: float
    objective: float | None
    mip_gap: float | None
    solve_s: float
    num_solves: int

    @property
    def success(self) -> bool:
        return self.status is not PlanStatus.INFEASIBLE


def _problem_iv(problem: AllocationProblem) -> AllocationProblem:
    counts = np.asarray(problem.device_counts)
    accuracy = np.asarray(problem.accuracy, dtype=float)
    capacity = np.asarray(problem.capacity, dtype=float)
    demand = np.asarray(problem.demand, dtype=float)
    if capacity.ndim != 3:
        raise ValueError(f"`capacity` must be a (T, M, Q) array, got shape {capacity.shape}")
    t, m, q = capacity.shape
    if counts.shape != (t,) or np.any(counts < 0) or not np.all(np.equal(np.mod(counts, 1), 0)):
        raise ValueError(f"`device_counts` must be {t} non-negative integers, got {counts}")
    if accuracy.shape != (m,) or not np.all(np.isfinite(accuracy)):
        raise ValueError(f"`accuracy` must be {m} finite values")
    if demand.shape != (q,) or np.any(~np.isfinite(demand)) or np.any(demand < 0):
        raise ValueError(f"`demand` must be {q} finite values >= 0, got {demand}")
    if np.any(~np.isfinite(capacity)) or np.any(capacity < 0):
        raise ValueError("`capacity` must be finite and >= 0")
    group, caps = problem.variant_group, problem.host_caps
    if (group is None) != (caps is None):
        raise ValueError("`variant_group` and `host_caps` go together")
    if group is not None:
        group, caps = np.asarray(group, dtype=int), np.asarray(caps)
        if group.shape != (m,) or caps.ndim != 2 or caps.shape[0] != t or group.min() < 0 or group.max() >= caps.shape[1]:
            raise ValueError("`variant_group` must map the M variants into the columns of a (T, G) `host_caps`")
    return AllocationProblem(counts.astype(int), accuracy, capacity, demand, group, caps)


class _Model:
    """Variables and constraint rows of one MILP, built as sparse triplets."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[int] = []
        self.cost: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lb: list[float] = []
        self.row_ub: list[float] = []

    def var(self, lb: float, ub: float, *, integer: bool = False, cost: float = 0.0) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(int(integer))
        self.cost.append(cost)
        return len(self.lb) - 1

    def row(self, terms: list[tuple[int, float]], lb: float, ub: float) -> None:
        r = len(self.row_lb)
        for col, val in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(val)
        self.row_lb.append(lb)
        self.row_ub.append(ub)

    def solve(self, time_limit_s: float | None, mip_rel_gap: float):
        a = coo_array((self.vals, (self.rows, self.cols)), shape=(len(self.row_lb), len(self.lb))).tocsr()
        options: dict[str, float | bool] = {"mip_rel_gap": mip_rel_gap, "disp": False}
        if time_limit_s is not None:
            options["time_limit"] = time_limit_s
        return milp(
            np.asarray(self.cost), integrality=np.asarray(self.integer),
            bounds=Bounds(np.asarray(self.lb), np.asarray(self.ub)),
            constraints=LinearConstraint(a, np.asarray(self.row_lb), np.asarray(self.row_ub)) if self.row_lb else None,
            options=options,
        )


def _build(problem: AllocationProblem, sigma: np.ndarray, *, per_device: bool, maximize_scale: bool,
           symmetry_breaking: bool) -> tuple[_Model, dict, dict, int | None]:
    """The (aggregated or per-device) model for served demand ``sigma``, or ``lambda * sigma``."""
    cap, counts, acc = problem.capacity, problem.device_counts, problem.accuracy
    num_types, num_variants, num_queries = cap.shape
    model = _Model()
    total = float(sigma.sum())
    scale_var = model.var(0.0, 1.0, cost=-1.0) if maximize_scale else None
    units = [(t, k) for t in range(num_types) for k in range(counts[t])] if per_device else [(t, None) for t in range(num_types)]
    # a hosted device costs a negligible amount, so among equally accurate plans the one using fewest
    # devices wins (a canonical answer; the planner decides what idle devices do)
    host_cost = 0.0 if maximize_scale else _HOST_COST / max(1, int(counts.sum()))
    host: dict[tuple[int, int], int] = {}  # (unit, m) -> x or n
    served: dict[tuple[int, int, int], int] = {}  # (unit, m, q) -> u
    for i, (t, _) in enumerate(units):
        upper = 1 if per_device else int(counts[t])
        for m in range(num_variants):
            types_served = [q for q in range(num_queries) if cap[t, m, q] > 0 and sigma[q] > 0]
            if not types_served or upper == 0:
                continue
            host[i, m] = model.var(0, upper, integer=True, cost=host_cost)
            for q in types_served:
                coef = 0.0 if maximize_scale else -acc[m] / total
                served[i, m, q] = model.var(0.0, cap[t, m, q] * upper, cost=coef)
    # (1): at most one variant per device (per type: at most its count)
    for i, (t, _) in enumerate(units):
        terms = [(host[i, m], 1.0) for m in range(num_variants) if (i, m) in host]
        if terms:
            model.row(terms, -np.inf, 1 if per_device else int(counts[t]))
    # (5'): capacity of the hosted variant, shared by the types it serves
    for (i, m), x in host.items():
        t = units[i][0]
        terms = [(served[i, m, q], 1.0 / cap[t, m, q]) for q in range(num_queries) if (i, m, q) in served]
        model.row(terms + [(x, -1.0)], -np.inf, 0.0)
    # (6'): every type's (scaled) demand is served
    by_type: dict[int, list[tuple[int, float]]] = {}
    for (i, m, q), u in served.items():
        by_type.setdefault(q, []).append((u, 1.0 / sigma[q]))
    for q in range(num_queries):
        if sigma[q] <= 0:
            continue
        terms = by_type.get(q, [])
        if maximize_scale:
            model.row(terms + [(scale_var, -1.0)], 0.0, 0.0)
        else:
            model.row(terms, 1.0, 1.0)
    if per_device:
        _routing_rows(model, units, host, served, sigma, num_queries)
        if symmetry_breaking:  # same-type devices host variants in decreasing index order
            codes: dict[int, list[tuple[int, float]]] = {}
            for (i, m), x in host.items():
                codes.setdefault(i, []).append((x, m + 1.0))
            for i in range(len(units) - 1):
                if units[i][0] == units[i + 1][0] and (i in codes or i + 1 in codes):
                    terms = codes.get(i, []) + [(x, -c) for x, c in codes.get(i + 1, [])]
                    model.row(terms, 0.0, np.inf)
    if problem.host_caps is not None:
        group = problem.variant_group
        for t in range(num_types):
            for g in range(problem.host_caps.shape[1]):
                terms = [(x, 1.0) for (i, m), x in host.items() if units[i][0] == t and group[m] == g]
                if terms:
                    model.row(terms, -np.inf, float(problem.host_caps[t, g]))
    return model, host, served, scale_var


def _routing_rows(model: _Model, units: list, host: dict, served: dict, sigma: np.ndarray, num_queries: int) -> None:
    """Eq. 2, 3' and 4 with explicit routing shares ``y`` (per-device model only)."""
    hosts_for: dict[tuple[int, int], list[int]] = {}
    for (i, m, q) in served:
        hosts_for.setdefault((i, q), []).append(host[i, m])
    y = {key: model.var(0.0, 1.0) for key in hosts_for}
    for key, hosts in hosts_for.items():
        model.row([(y[key], 1.0)] + [(x, -1.0) for x in hosts], -np.inf, 0.0)  # (3')
    for q in range(num_queries):
        terms = [(v, 1.0) for (i, qq), v in y.items() if qq == q]
        if terms:
            model.row(terms, -np.inf, 1.0)  # (2)
    per_unit: dict[int, list[tuple[int, float]]] = {}
    for (i, m, q), u in served.items():
        per_unit.setdefault(i, []).append((u, 1.0))
    for (i, q), v in y.items():
        per_unit.setdefault(i, []).append((v, -float(sigma[q])))
    for terms in per_unit.values():
        model.row(terms, -np.inf, 0.0)  # (4)


def _extract(problem: AllocationProblem, res, host: dict, served: dict, per_device: bool) -> tuple[np.ndarray, np.ndarray]:
    num_types, num_variants, num_queries = problem.capacity.shape
    counts = np.zeros((num_types, num_variants), dtype=int)
    load = np.zeros((num_types, num_variants, num_queries))
    types = [t for t in range(num_types) for _ in range(problem.device_counts[t])] if per_device else list(range(num_types))
    for (i, m), x in host.items():
        counts[types[i], m] += round(res.x[x])
    for (i, m, q), u in served.items():
        load[types[i], m, q] += max(0.0, float(res.x[u]))
    return counts, load


def solve_allocation(
    problem: AllocationProblem,
    *,
    headroom: float = 1.0,
    degrade_step: float = 0.05,
    time_limit_s: float | None = None,
    mip_rel_gap: float = 1e-4,
    per_device: bool = False,
    symmetry_breaking: bool = True,
) -> Allocation:
    """Solve Eq. 1-7 for ``headroom * demand``; if infeasible, for the largest feasible rung below.

    Parameters
    ----------
    problem : the instance (validated here).
    headroom : serve ``headroom * demand`` (the artifact's beta; 1 = the paper's Eq. 6).
    degrade_step : the paper's "small value": rungs are ``headroom - k * degrade_step``.
    time_limit_s, mip_rel_gap : passed to HiGHS per solve; on a time limit the incumbent is used.
    per_device : solve the per-device model with explicit ``x``/``y`` instead of the aggregated one.
    symmetry_breaking : order the variants of same-type devices (per-device model only).

    Examples
    --------
    Two CPUs and one GPU; one query type with a fast (acc 0.9) and an accurate (acc 1.0) variant:

    >>> cap = np.array([[[10.0], [5.0]], [[40.0], [20.0]]])   # (T=2, M=2, Q=1)
    >>> p = AllocationProblem(np.array([2, 1]), np.array([0.9, 1.0]), cap, np.array([25.0]))
    >>> a = solve_allocation(p)
    >>> a.status.value, round(a.objective, 3), round(float(a.served.sum()), 6), a.counts[1].tolist()
    ('optimal', 1.0, 25.0, [0, 1])
    >>> round(solve_allocation(p, per_device=True).objective, 3)
    1.0
    >>> a = solve_allocation(AllocationProblem(np.array([2, 1]), np.array([0.9, 1.0]), cap, np.array([100.0])))
    >>> a.status.value, round(a.demand_scale, 2), a.counts.tolist()
    ('degraded', 0.6, [[2, 0], [1, 0]])
    """
    problem = _problem_iv(problem)
    if not headroom > 0 or not 0 < degrade_step <= headroom:
        raise ValueError(f"need `headroom` > 0 and 0 < `degrade_step` <= `headroom`, got {headroom}, {degrade_step}")
    started = time.perf_counter()
    num_types, num_variants, num_queries = problem.capacity.shape
    present = problem.device_counts > 0
    servable = problem.capacity[present].max(axis=(0, 1)) > 0 if present.any() else np.zeros(num_queries, bool)
    demand = np.where(servable, problem.demand, 0.0)
    notes = []
    if np.any(problem.demand[~servable] > 0):
        notes.append(f"query types {np.flatnonzero(~servable & (problem.demand > 0)).tolist()} have no feasible variant")
    empty = np.zeros((num_types, num_variants), dtype=int), np.zeros(problem.capacity.shape)
    if demand.sum() <= 0:
        return Allocation(PlanStatus.OPTIMAL, "; ".join(notes + ["no demand to serve"]), *empty, 1.0, None, 0.0,
                          time.perf_counter() - started, 0)
    build = {"per_device": per_device, "symmetry_breaking": symmetry_breaking}
    scale, num_solves = headroom, 1
    model, host, served, _ = _build(problem, scale * demand, maximize_scale=False, **build)
    res = model.solve(time_limit_s, mip_rel_gap)
    if res.x is None and res.status != _INFEASIBLE:  # out of time before any incumbent
        return Allocation(PlanStatus.INFEASIBLE, "; ".join(notes + [f"no solution: {res.message}"]), *empty, 0.0,
                          None, None, time.perf_counter() - started, num_solves)
    if res.x is None:  # infeasible: find the largest feasible demand scale
        scale_model, _, _, scale_var = _build(problem, headroom * demand, maximize_scale=True, **build)
        scale_res = scale_model.solve(time_limit_s, mip_rel_gap)
        num_solves += 1
        if scale_res.x is None or scale_res.x[scale_var] * headroom < degrade_step - 1e-9:
            return Allocation(PlanStatus.INFEASIBLE, "; ".join(notes + [f"no feasible demand scale: {scale_res.message}"]),
                              *empty, 0.0, None, None, time.perf_counter() - started, num_solves)
        best = float(scale_res.x[scale_var]) * headroom
        k = int(np.ceil((headroom - best) / degrade_step - 1e-7))
        while res.x is None and res.status == _INFEASIBLE and headroom - k * degrade_step > 1e-9:
            scale = headroom - k * degrade_step
            model, host, served, _ = _build(problem, scale * demand, maximize_scale=False, **build)
            res = model.solve(time_limit_s, mip_rel_gap)
            num_solves += 1
            k += 1
        if res.x is None:
            return Allocation(PlanStatus.INFEASIBLE, "; ".join(notes + [f"no feasible demand scale: {res.message}"]),
                              *empty, 0.0, None, None, time.perf_counter() - started, num_solves)
    counts, load = _extract(problem, res, host, served, per_device)
    total = load.sum()
    objective = float((problem.accuracy[None, :, None] * load).sum() / total) if total > 0 else None
    if scale < 1.0 - 1e-9:
        status = PlanStatus.DEGRADED
        notes.append(f"demand lowered to {scale:.2f}x ({num_solves} solves)")
    else:
        status = PlanStatus.OPTIMAL if res.status == _OPTIMAL else PlanStatus.FEASIBLE
    if res.status == _LIMIT:
        notes.append(f"time limit reached, incumbent used (gap {res.mip_gap})")
    notes.append(res.message)
    return Allocation(status, "; ".join(notes), counts, load, scale, objective,
                      None if res.mip_gap is None else float(res.mip_gap), time.perf_counter() - started, num_solves)
