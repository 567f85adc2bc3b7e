"""The Model-Autoscaler ILP of INFaaS §4.2.1 (spec §6.3), solved exactly with HiGHS (`scipy.optimize.milp`).

For every model-variant ``v`` (a variant on a hardware type) choose an integer action ``delta_v``::

    min  sum_v C_v (delta_v + lam * T^load_v * max(delta_v, 0))
    s.t. (1) sum_{v of app a} Q_v (N_v + delta_v) >= L_a + slack_a     for every application a
         (2) delta_v <= 0                     if T^inf_v > S_a (newly loaded instances meet the SLO)
         (3) sum_v R_vt (N_v + delta_v) <= R_t                          for every resource type t
         (4) N_v + delta_v >= 0

Constraint (1) is read as one aggregate per application (spec §12.11); with several applications they
share the resources of (3). ``max(delta, 0)`` is linearised by writing ``delta = up - down`` with
``up, down >= 0`` integers: a unit in both costs ``C_v lam T_v`` more for nothing, so the optimum never
uses both when ``lam T_v > 0`` (with ``lam = 0`` only ``up - down`` is reported).

The paper calls this impractical at runtime (Gurobi: 23 s for 50 architectures); it is the reference
the greedy heuristic (`shared.autoscale.greedy`) is measured against on small catalogues.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from shared.autoscale.catalogue import MachineCatalogue
from shared.infaas.records import Key

__all__ = ["MilpProblem", "MilpResult", "MilpStatus", "milp_autoscale", "milp_problem"]


@dataclass(frozen=True)
class MilpProblem:
    """The ILP's data, one row per model-variant ``v``; see the module docstring for the symbols.

    Attributes
    ----------
    cost_per_s : (n,) ``C_v``, $/s of one instance.
    saturation_qps : (n,) ``Q_v``.
    inference_ms : (n,) ``T^inf_v``.
    load_s : (n,) ``T^load_v``.
    running : (n,) ``N_v``, integers >= 0.
    application : (n,) index into `load_qps` of the application ``v`` serves.
    load_qps : (m,) ``L_a``.
    slo_ms : (m,) ``S_a``.
    needs : (n, k) ``R_vt``; (n, 0) when resources are not limited.
    capacity : (k,) ``R_t``.
    """

    cost_per_s: np.ndarray
    saturation_qps: np.ndarray
    inference_ms: np.ndarray
    load_s: np.ndarray
    running: np.ndarray
    application: np.ndarray
    load_qps: np.ndarray
    slo_ms: np.ndarray
    needs: np.ndarray
    capacity: np.ndarray

    def __post_init__(self) -> None:
        for name, value in _milp_problem_iv(self).items():
            object.__setattr__(self, name, value)

    @property
    def num_options(self) -> int:
        return len(self.cost_per_s)


class MilpStatus(str, Enum):
    OPTIMAL = "optimal"
    #: a time or iteration limit stopped HiGHS with a feasible (maybe suboptimal) answer
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    #: stopped by a limit before any feasible answer, or another HiGHS failure
    FAILED = "failed"


@dataclass(frozen=True)
class MilpResult:
    status: MilpStatus
    message: str
    #: (n,) integer actions; ``None`` without a feasible answer
    delta: np.ndarray | None = None
    #: the objective, $ (cost rate x 1 s plus the loading penalty)
    objective: float | None = None
    #: $/s of the configuration after the actions, ``sum C_v (N_v + delta_v)``
    cost_per_s_after: float | None = None
    mip_gap: float | None = None

    @property
    def success(self) -> bool:
        return self.status in (MilpStatus.OPTIMAL, MilpStatus.FEASIBLE)


def _milp_problem_iv(p: MilpProblem) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name in ("cost_per_s", "saturation_qps", "inference_ms", "load_s", "load_qps", "slo_ms", "capacity"):
        value = np.asarray(getattr(p, name), dtype=float)
        if value.ndim != 1:
            raise ValueError(f"`{name}` must be one-dimensional")
        if not np.all(np.isfinite(value)) or np.any(value < 0):
            raise ValueError(f"`{name}` must be finite and >= 0")
        out[name] = value
    n, m = len(out["cost_per_s"]), len(out["load_qps"])
    for name in ("saturation_qps", "inference_ms", "load_s"):
        if len(out[name]) != n:
            raise ValueError(f"`{name}` must have one entry per option ({n}), got {len(out[name])}")
    if len(out["slo_ms"]) != m or np.any(out["slo_ms"] <= 0):
        raise ValueError(f"`slo_ms` must have one positive entry per application ({m})")
    running = np.asarray(p.running)
    if running.shape != (n,) or np.any(running < 0) or np.any(running != np.round(running)):
        raise ValueError(f"`running` must be {n} integers >= 0")
    application = np.asarray(p.application)
    if application.shape != (n,) or np.any(application != np.round(application)) or \
            (n and (application.min() < 0 or application.max() >= m)):
        raise ValueError(f"`application` must be {n} indices into `load_qps` (0..{m - 1})")
    needs = np.asarray(p.needs, dtype=float).reshape(n, -1) if n else np.zeros((0, len(out["capacity"])))
    if needs.shape != (n, len(out["capacity"])) or not np.all(np.isfinite(needs)) or np.any(needs < 0):
        raise ValueError(f"`needs` must be a finite ({n}, {len(out['capacity'])}) array >= 0")
    out.update(running=running.astype(np.int64), application=application.astype(np.int64), needs=needs)
    return out


def milp_autoscale(
    problem: MilpProblem,
    *,
    lam: float = 1.0,
    slack: float | Sequence[float] | None = None,
    time_limit_s: float | None = None,
    options: Mapping[str, object] | None = None,
) -> MilpResult:
    """Solve the INFaaS autoscaling ILP exactly.

    Parameters
    ----------
    problem : MilpProblem
    lam : float
        ``lambda`` (1/s): weight of loading latency; large for spiky load (spec §12.13 default 1).
    slack : float or (m,) array, optional
        Additive headroom per application (qps); default 0. Spec §12.10 suggests
        ``(slack_threshold - 1) * L``.
    time_limit_s : float, optional
        HiGHS time limit; a feasible answer found by then comes back as ``FEASIBLE``.
    options : mapping, optional
        Passed to `scipy.optimize.milp` as given (unknown keys warn there).

    Returns
    -------
    MilpResult
        ``success`` is False when no configuration can carry the load within the resources.

    Examples
    --------
    Table 3 of the paper, row 3 (1000 qps, SLO 300 ms; variants A, B, C of Table 2):

    >>> p = MilpProblem(cost_per_s=[1, 3, 16], saturation_qps=[5, 100, 800], inference_ms=[200, 20, 15],
    ...                 load_s=[0, 0, 0], running=[0, 0, 0], application=[0, 0, 0], load_qps=[1000],
    ...                 slo_ms=[300], needs=np.zeros((3, 0)), capacity=[])
    >>> r = milp_autoscale(p, lam=0.0)
    >>> r.delta.tolist(), r.objective
    ([0, 2, 1], 22.0)
    """
    lam, slack_arr = _milp_options_iv(problem, lam, slack)
    n = problem.num_options
    if n == 0:
        feasible = bool(np.all(problem.load_qps + slack_arr <= 0))
        return MilpResult(MilpStatus.OPTIMAL if feasible else MilpStatus.INFEASIBLE,
                          "no options" if feasible else "no options to carry the load",
                          np.zeros(0, dtype=np.int64) if feasible else None, 0.0 if feasible else None,
                          0.0 if feasible else None)
    c = np.concatenate([problem.cost_per_s * (1.0 + lam * problem.load_s), -problem.cost_per_s])
    late = problem.inference_ms > problem.slo_ms[problem.application]
    upper_up = np.where(late, 0.0, np.inf)
    bounds = Bounds(np.zeros(2 * n), np.concatenate([upper_up, problem.running.astype(float)]))
    constraints = []
    m = len(problem.load_qps)
    supply = np.zeros((m, 2 * n))
    for v, a in enumerate(problem.application):
        supply[a, v], supply[a, n + v] = problem.saturation_qps[v], -problem.saturation_qps[v]
    have = np.bincount(problem.application, problem.saturation_qps * problem.running, minlength=m)
    constraints.append(LinearConstraint(supply, problem.load_qps + slack_arr - have, np.inf))
    if problem.needs.shape[1]:
        used = problem.needs.T @ problem.running
        constraints.append(LinearConstraint(np.hstack([problem.needs.T, -problem.needs.T]), -np.inf,
                                            problem.capacity - used))
    solver_options = dict(options or {})
    if time_limit_s is not None:
        solver_options["time_limit"] = time_limit_s
    res = milp(c, integrality=np.ones(2 * n), bounds=bounds, constraints=constraints, options=solver_options)
    status = _highs_status(res.status, res.x is not None)
    if res.x is None:
        return MilpResult(status, res.message)
    x = np.round(res.x).astype(np.int64)
    delta = x[:n] - x[n:]
    after = float(problem.cost_per_s @ (problem.running + delta))
    return MilpResult(status, res.message, delta, float(c @ x), after, getattr(res, "mip_gap", None))


def _milp_options_iv(problem: MilpProblem, lam: float, slack: float | Sequence[float] | None
                     ) -> tuple[float, np.ndarray]:
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"`lam` must be finite and >= 0, got {lam}")
    m = len(problem.load_qps)
    slack_arr = np.broadcast_to(np.asarray(0.0 if slack is None else slack, dtype=float), (m,))
    if not np.all(np.isfinite(slack_arr)) or np.any(slack_arr < 0):
        raise ValueError("`slack` must be finite and >= 0")
    return float(lam), slack_arr


def _highs_status(code: int, has_x: bool) -> MilpStatus:
    """scipy's milp codes: 0 optimal, 1 limit reached, 2 infeasible, 3 unbounded, 4 other."""
    if code == 0:
        return MilpStatus.OPTIMAL
    if code == 1 and has_x:
        return MilpStatus.FEASIBLE
    if code == 2:
        return MilpStatus.INFEASIBLE
    return MilpStatus.FAILED


def milp_problem(
    catalogue: MachineCatalogue,
    demand_qps: Mapping[str, float],
    *,
    running: Mapping[tuple[str, str, str], int] | None = None,
    capacity: Mapping[str, float] | None = None,
    latency_budget: float = 0.5,
) -> tuple[MilpProblem, list[tuple[str, Key]]]:
    """The ILP for the applications in `demand_qps` over the catalogue's eligible options.

    Parameters
    ----------
    catalogue : MachineCatalogue
    demand_qps : application -> ``L_a`` (rows/s).
    running : (application, variant, device) -> ``N_v``; default none.
    capacity : resource -> ``R_t`` (e.g. the sum over a pool of workers); default unlimited.
    latency_budget : share of the SLO a batch may take, as in the greedy: ``Q_v`` uses batches within it
        and ``S_a`` of constraint (2) is ``latency_budget * SLO``.

    Returns
    -------
    (MilpProblem, rows)
        ``rows[v] = (application, (variant, device))`` names each option row. Running options the
        application may no longer use (below its accuracy floor) get a row with ``Q = 0``, so the
        ILP can only unload them.
    """
    if not 0 < latency_budget <= 1:
        raise ValueError(f"`latency_budget` must be in (0, 1], got {latency_budget}")
    running = running or {}
    apps = list(demand_qps)
    unknown = [a for a in apps if a not in catalogue.application]
    if unknown:
        raise ValueError(f"`demand_qps` names unknown applications {unknown}")
    resources = sorted(capacity or {})
    rows, cols = [], {k: [] for k in ("cost", "q", "inf", "load", "n", "app", "needs")}
    for a, name in enumerate(apps):
        app = catalogue.application[name]
        eligible = {o.key: o for o in catalogue.eligible(name, latency_budget)}
        present = dict(eligible)
        for app_name, variant, device in running:
            if app_name == name and (variant, device) in catalogue.option:
                present.setdefault((variant, device), catalogue.option[(variant, device)])
        for key, option in sorted(present.items()):
            rows.append((name, key))
            cols["cost"].append(option.cost_per_hour / 3600.0)
            cols["q"].append(option.peak_qps(app.slo_ms, latency_budget) if key in eligible else 0.0)
            cols["inf"].append(option.record.latency_ms(1))
            cols["load"].append(option.load_s)
            cols["n"].append(running.get((name, *key), 0))
            cols["app"].append(a)
            cols["needs"].append([option.needs.get(r, 0.0) for r in resources])
    problem = MilpProblem(
        cost_per_s=cols["cost"], saturation_qps=cols["q"], inference_ms=cols["inf"], load_s=cols["load"],
        running=np.asarray(cols["n"], dtype=np.int64), application=np.asarray(cols["app"], dtype=np.int64),
        load_qps=[demand_qps[a] for a in apps],
        slo_ms=[latency_budget * catalogue.application[a].slo_ms for a in apps],
        needs=np.asarray(cols["needs"], dtype=float).reshape(len(rows), len(resources)),
        capacity=[capacity[r] for r in resources] if capacity else [])
    return problem, rows

