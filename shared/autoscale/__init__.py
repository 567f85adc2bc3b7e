"""INFaaS autoscaling (USENIX ATC'21 §4.2): pure, I/O-free policies the live service and the simulator share.

* `catalogue` - worker types (price, resources, start-up delay), model-variants (``v_ij``) and applications;
* `state` - `AutoscaleState` in, `ScaleActions` (load/unload instance, start/stop worker) out;
* `milp` - the Model-Autoscaler ILP of §4.2.1, solved exactly with HiGHS (reference);
* `greedy` - the runtime Model-Autoscaler of §4.2.2 (headroom, replicate vs upgrade, ``T_v`` scale-down);
* `vm` - the VM-Autoscaler of §4.2.3 (three rules, machines for unplaceable instances, idle scale-down);
* `interference` - Interfered detection from observed vs profiled latency;
* `ledger` - free resources and instance counts while a poll decides; first-fit packing onto new machines;
* `autoscaler` - `InfaasAutoscaler`, both levels behind one `step(state, now_s)` polled every second;
* `baselines` - Clipper+ (static, provisioned for peak) and SM+ (horizontal only);
* `cost` - $/h of a fleet, $ and $ per 1,000 queries over a period, the fleet as a `FleetPlan`;
* `tracker` - the fleet as the autoscaler sees it, from worker events and load statistics;
* `loop` - `AutoscaleLoop`, tracker plus policy: the control loop the service and the simulator run;
* `fluid` - `settle`, where the greedy settles for a steady load without queues or delays.
"""
from shared.autoscale.autoscaler import BaseAutoscaler, InfaasAutoscaler
from shared.autoscale.baselines import (
    SmPlusAutoscaler,
    StaticAutoscaler,
    pin,
    provision_for_peak,
)
from shared.autoscale.catalogue import (
    Application,
    MachineCatalogue,
    VariantOption,
    WorkerType,
    default_needs,
    serving_catalogue,
    whole_machine,
)
from shared.autoscale.cost import (
    CostReport,
    WorkerInterval,
    fleet_cost_per_hour,
    period_cost,
    to_fleet_plan,
)
from shared.autoscale.greedy import GreedyConfig, GreedyDecision, GreedyModelAutoscaler
from shared.autoscale.interference import latency_ratio, observe
from shared.autoscale.milp import (
    MilpProblem,
    MilpResult,
    MilpStatus,
    milp_autoscale,
    milp_problem,
)
from shared.autoscale.state import (
    AutoscaleState,
    InstanceSpec,
    InstanceStatus,
    LoadInstance,
    ScaleActions,
    StartWorker,
    StopWorker,
    UnloadInstance,
    WorkerStatus,
)
from shared.autoscale.vm import VmAutoscaler, VmConfig

__all__ = [
    "Application",
    "AutoscaleState",
    "BaseAutoscaler",
    "CostReport",
    "GreedyConfig",
    "GreedyDecision",
    "GreedyModelAutoscaler",
    "InfaasAutoscaler",
    "InstanceSpec",
    "InstanceStatus",
    "LoadInstance",
    "MachineCatalogue",
    "MilpProblem",
    "MilpResult",
    "MilpStatus",
    "ScaleActions",
    "SmPlusAutoscaler",
    "StartWorker",
    "StaticAutoscaler",
    "StopWorker",
    "UnloadInstance",
    "VariantOption",
    "VmAutoscaler",
    "VmConfig",
    "WorkerInterval",
    "WorkerStatus",
    "WorkerType",
    "default_needs",
    "fleet_cost_per_hour",
    "latency_ratio",
    "milp_autoscale",
    "milp_problem",
    "observe",
    "period_cost",
    "pin",
    "provision_for_peak",
    "serving_catalogue",
    "to_fleet_plan",
    "whole_machine",
]
