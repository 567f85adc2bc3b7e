"""The schemes Kairos is compared with, as policies and functions over the same simulator."""
from shared.kairos.baselines.clockwork import ClockworkDispatch
from shared.kairos.baselines.drs import DrsDispatch, HillClimbResult, hill_climb_threshold
from shared.kairos.baselines.homogeneous import HomogeneousFleet, homogeneous_fleet
from shared.kairos.baselines.oracle import OracleResult, oracle_throughput
from shared.kairos.baselines.ribbon import RibbonDispatch

__all__ = [
    "ClockworkDispatch",
    "DrsDispatch",
    "HillClimbResult",
    "HomogeneousFleet",
    "OracleResult",
    "RibbonDispatch",
    "hill_climb_threshold",
    "homogeneous_fleet",
    "oracle_throughput",
]
