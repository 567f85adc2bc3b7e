"""Where INFaaS's greedy Model-Autoscaler settles for a steady load, in a fluid model of the fleet.

No serving loop: a reference point for the heuristic's choices against the ILP's (`shared.autoscale.milp`),
free of queues and delays. The serving experiment runs on the one engine
(`shared.sim.scenarios.autoscaling`).
"""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.greedy import GreedyConfig, GreedyModelAutoscaler
from shared.autoscale.ledger import pack_instances
from shared.autoscale.state import AutoscaleState, InstanceStatus, StartWorker, WorkerStatus

__all__ = ["settle"]


def settle(
    catalogue: MachineCatalogue,
    demand_qps: Mapping[str, float],
    *,
    initial_fleet: Sequence[StartWorker] = (),
    config: GreedyConfig | None = None,
    max_polls: int = 500,
) -> AutoscaleState:
    """Where the greedy Model-Autoscaler settles for a steady load, in a fluid model of the fleet.

    No queues and no delays: actions take effect at once, a machine for requests that fit nowhere
    appears at once, and each application's demand is spread over its instances in proportion to
    their ``Q``. Polls (1 s apart) repeat until two in a row change nothing with no scale-down
    waiting out its delay. This isolates the heuristic's choices from the dynamics, for comparison with the ILP.

    Raises
    ------
    RuntimeError
        If the greedy still acts after `max_polls` polls.
    """
    greedy = GreedyModelAutoscaler(catalogue, config=config)
    budget = greedy.config.latency_budget
    fleet: dict[str, tuple[str, list[tuple[str, str]]]] = {
        s.worker_id: (s.device, [(i.variant, i.application) for i in s.instances]) for s in initial_fleet}
    quiet, ids = 0, itertools.count()
    for poll in range(max_polls):
        state = _fluid_state(catalogue, fleet, demand_qps, float(poll), budget)
        decision = greedy.decide(state, float(poll))
        for unload in decision.actions.unloads:
            fleet[unload.worker_id][1].remove((unload.variant, unload.application))
        for load in decision.actions.loads:
            fleet[load.worker_id][1].append((load.variant, load.application))
        for device, bins in pack_instances(catalogue, decision.requests).items():
            for members in bins:
                fleet[f"settle-{device}-{next(ids)}"] = (device, [(m.variant, m.application) for m in members])
        for worker_id in [w for w, (_, hosted) in fleet.items() if not hosted]:
            del fleet[worker_id]
        quiet = 0 if (decision.actions or decision.requests or greedy.waiting) else quiet + 1
        if quiet == 2:
            return _fluid_state(catalogue, fleet, demand_qps, float(poll), budget)
    raise RuntimeError(f"the greedy did not settle within {max_polls} polls")


def _fluid_state(catalogue: MachineCatalogue, fleet: Mapping[str, tuple[str, list[tuple[str, str]]]],
                 demand_qps: Mapping[str, float], now: float, budget: float) -> AutoscaleState:
    capacity: Counter[str] = Counter()
    for device, hosted in fleet.values():
        for variant, app in hosted:
            capacity[app] += catalogue.option[(variant, device)].peak_qps(catalogue.application[app].slo_ms, budget)
    workers = []
    for worker_id, (device, hosted) in sorted(fleet.items()):
        instances = []
        for variant, app in hosted:
            q = catalogue.option[(variant, device)].peak_qps(catalogue.application[app].slo_ms, budget)
            instances.append(InstanceStatus(variant, app, load_qps=demand_qps.get(app, 0.0) * q / capacity[app]))
        workers.append(WorkerStatus(worker_id, device, instances=tuple(instances)))
    return AutoscaleState(now, tuple(workers), dict(demand_qps))
