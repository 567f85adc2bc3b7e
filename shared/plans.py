"""Plans on the wire: a planner's `FleetPlan` as the `AllocationPlan` message, and back.

Planners and the autoscaler publish with `to_message`; the scheduler (whose routing policies follow
plans) and the fleet read with `from_message`, so every service sees the plan the policy produced.
"""
from __future__ import annotations

import uuid

from schemas import AllocationPlan, PlanPlacement
from shared.policy.base import FleetPlan, Placement, PlanStatus


def to_message(plan: FleetPlan, *, planner: str, now: float) -> AllocationPlan:
    return AllocationPlan(
        plan_id=f"plan-{uuid.uuid4().hex[:12]}", planner=planner, status=plan.status.value, message=plan.message,
        placements=[PlanPlacement(device=p.device, variants=list(p.variants)) for p in plan.placements],
        routing={app: dict(shares) for app, shares in plan.routing.items()},
        cost_per_hour=plan.cost_per_hour, objective=plan.objective, at=now)


def from_message(message: AllocationPlan) -> FleetPlan:
    """Examples
    --------
    >>> plan = FleetPlan(PlanStatus.OPTIMAL, "ok", (Placement("cpu", ("m",)),), {"app": {"m": 1.0}})
    >>> from_message(to_message(plan, planner="p", now=1.0)) == plan
    True
    """
    return FleetPlan(
        status=PlanStatus(message.status), message=message.message,
        placements=tuple(Placement(p.device, tuple(p.variants)) for p in message.placements),
        routing={app: dict(shares) for app, shares in message.routing.items()},
        objective=message.objective, cost_per_hour=message.cost_per_hour)
