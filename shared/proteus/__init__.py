"""Proteus (ASPLOS'24): accuracy scaling on a fixed heterogeneous fleet.

- `ProteusPlanner` (``planner.py``): the MILP of model selection, placement and query assignment
  (``milp.py``, HiGHS through ``scipy.optimize.milp``), capacities by the SLO/2 rule (``capacity.py``);
- `ProteusDispatch` (``dispatch.py``): per-application weighted routing (``router.py``) and per-device
  adaptive batching (``batching.py``: Proteus, Clipper's AIMD, Nexus's early drop, ...);
- `ReplanMonitor` (``monitor.py``): when to re-plan (every 30 s, and on bursts);
- baselines (``baselines.py``), simulator control loops (``control.py``), the paper's metrics
  (``evaluation.py``), arrival processes (``workload.py``) and the benchmark fleet's profiles
  (``fleet_profiles.py``).
"""
from shared.proteus.batching import (
    AimdBatching,
    FixedBatching,
    NexusBatching,
    ProteusBatching,
    make_batching,
)
from shared.proteus.dispatch import ProteusDispatch
from shared.proteus.milp import Allocation, AllocationProblem, solve_allocation
from shared.proteus.monitor import ReplanMonitor
from shared.proteus.planner import ProteusPlanner

__all__ = [
    "AimdBatching",
    "Allocation",
    "AllocationProblem",
    "FixedBatching",
    "NexusBatching",
    "ProteusBatching",
    "ProteusDispatch",
    "ProteusPlanner",
    "ReplanMonitor",
    "make_batching",
    "solve_allocation",
]
