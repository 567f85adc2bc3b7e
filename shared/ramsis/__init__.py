"""RAMSIS (EuroSys'24): model selection and scheduling by per-worker MDP policies, pure and I/O-free.

* `build_problem` / `RamsisProblem` - Pareto models, latencies, slack grid (FLD or MD), batching mode;
* `compile_mdp` / `WorkerMdp` - states, actions, rewards and the round-robin transitions (Eq. 1-3)
  under Poisson or Gamma arrivals (`ArrivalProcess`);
* `value_iteration`, `expected_metrics` - the solver and the stationary-distribution guarantees (§5.1);
* `PolicyGenerator`, `generate_policy_set`, `PolicySet` - policies indexed by load, adjacent ones
  within 1% expected accuracy (kept in Redis by `shared.adapters.ramsis_store`, generated offline by
  ``python -m services.ramsis_generate``);
* `RamsisDispatch` - round-robin, 500 ms load monitor, policy lookup and (pluggable) generation;
* `baselines` - Jellyfish+ and ModelSwitching on the same workers and models.
"""
from shared.ramsis.arrivals import POISSON, ArrivalProcess
from shared.ramsis.dispatch import PolicyRequest, RamsisDispatch, fill_missing
from shared.ramsis.evaluate import ExpectedMetrics, expected_metrics, policy_transitions
from shared.ramsis.generator import PolicyGenerator, generate_policy_set
from shared.ramsis.mdp import WAIT, ExplicitMdp, WorkerMdp, compile_mdp, explicit_mdp
from shared.ramsis.monitor import LoadMonitor
from shared.ramsis.policy import PolicySet, RamsisPolicy
from shared.ramsis.problem import (
    RamsisProblem,
    build_problem,
    fixed_slack_grid,
    model_slack_grid,
    pareto_front,
    quantile_profiles,
)
from shared.ramsis.value_iteration import ValueIterationResult, ViStatus, value_iteration

__all__ = [
    "POISSON",
    "WAIT",
    "ArrivalProcess",
    "ExpectedMetrics",
    "ExplicitMdp",
    "LoadMonitor",
    "PolicyGenerator",
    "PolicyRequest",
    "PolicySet",
    "RamsisDispatch",
    "RamsisPolicy",
    "RamsisProblem",
    "ValueIterationResult",
    "ViStatus",
    "WorkerMdp",
    "build_problem",
    "compile_mdp",
    "expected_metrics",
    "explicit_mdp",
    "fill_missing",
    "fixed_slack_grid",
    "generate_policy_set",
    "model_slack_grid",
    "pareto_front",
    "policy_transitions",
    "quantile_profiles",
    "value_iteration",
]
