"""Kairos (HPDC'23): cost-efficient inference on heterogeneous cloud instances, pure and I/O-free.

* `KairosDispatch` - query distribution as min-cost bipartite matching (Eq. 1-8);
* `LatencyPredictor` - online latency learning, linear fit -> lookup table; `QosMargin` - the QoS
  safeguard xi, widened by the prediction error observed at completions;
* `KairosPlanner` - throughput upper bound (Eq. 9-15) for every configuration within budget, ranked,
  with the similarity rule; `kairos_plus` - the UB-pruned online search (Algorithm 1);
* `BatchSizeMonitor` - the sliding window of query sizes and the re-plan trigger;
* `baselines` - Ribbon, DRS, Clockwork, Oracle and the homogeneous reference.
"""
from shared.kairos.dispatch import KairosDispatch
from shared.kairos.distribution import DistributionStats, distribution_stats, qos_limit
from shared.kairos.margin import QosMargin
from shared.kairos.matching import heterogeneity_coefficients, kairos_cost_matrix
from shared.kairos.monitor import BatchSizeMonitor, ShiftReport, ks_statistic
from shared.kairos.planner import ConfigRanking, KairosPlanner
from shared.kairos.predictor import LatencyPredictor
from shared.kairos.search import KairosPlusResult, kairos_plus
from shared.kairos.selection import Selection, rank_configs, select_config
from shared.kairos.table import LatencyTable
from shared.kairos.upper_bound import (
    budget_maximal,
    config_costs,
    configuration_upper_bounds,
    enumerate_configs,
    upper_bound,
)

__all__ = [
    "BatchSizeMonitor",
    "ConfigRanking",
    "DistributionStats",
    "KairosDispatch",
    "KairosPlanner",
    "KairosPlusResult",
    "LatencyPredictor",
    "LatencyTable",
    "QosMargin",
    "Selection",
    "ShiftReport",
    "budget_maximal",
    "config_costs",
    "configuration_upper_bounds",
    "distribution_stats",
    "enumerate_configs",
    "heterogeneity_coefficients",
    "kairos_cost_matrix",
    "kairos_plus",
    "ks_statistic",
    "qos_limit",
    "rank_configs",
    "select_config",
    "upper_bound",
]
