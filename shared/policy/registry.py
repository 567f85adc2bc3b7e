"""Dispatch policies and planners by name, so services, the simulator and the CLI say the same thing.

Every factory takes the profiles as its one positional input (a policy that needs none ignores them)
and its options as keywords.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from shared.policy.base import DispatchPolicy, Planner
from shared.policy.fcfs import FcfsDispatch
from shared.profiles.format import ProfileSet

DispatchFactory = Callable[..., DispatchPolicy]
PlannerFactory = Callable[..., Planner]

_DISPATCH: dict[str, DispatchFactory] = {}
_PLANNERS: dict[str, PlannerFactory] = {}


def _lazy(module: str, cls: str) -> Callable[..., Any]:
    """Import the policy's module only when it is asked for (keeps scipy & co. out of other processes)."""

    def factory(profiles: ProfileSet, **options: Any) -> Any:
        policy_cls = getattr(import_module(module), cls)
        return policy_cls(profiles, **options)

    return factory


def register_dispatch(name: str, factory: DispatchFactory) -> None:
    if name in _DISPATCH:
        raise ValueError(f"dispatch policy {name!r} is already registered")
    _DISPATCH[name] = factory


def register_planner(name: str, factory: PlannerFactory) -> None:
    if name in _PLANNERS:
        raise ValueError(f"planner {name!r} is already registered")
    _PLANNERS[name] = factory


def dispatch_names() -> list[str]:
    return sorted(_DISPATCH)


def planner_names() -> list[str]:
    return sorted(_PLANNERS)


def make_dispatch(name: str, profiles: ProfileSet, **options: Any) -> DispatchPolicy:
    try:
        factory = _DISPATCH[name]
    except KeyError:
        raise ValueError(f"unknown dispatch policy {name!r}; valid: {', '.join(dispatch_names())}") from None
    return factory(profiles, **options)


def make_planner(name: str, profiles: ProfileSet, **options: Any) -> Planner:
    try:
        factory = _PLANNERS[name]
    except KeyError:
        raise ValueError(f"unknown planner {name!r}; valid: {', '.join(planner_names())}") from None
    return factory(profiles, **options)


register_dispatch(FcfsDispatch.name, _lazy("shared.policy.fcfs", "FcfsDispatch"))
register_dispatch("kairos", _lazy("shared.kairos.dispatch", "KairosDispatch"))
register_dispatch("infaas", _lazy("shared.infaas.dispatch", "InfaasDispatch"))
register_dispatch("proteus", _lazy("shared.proteus.dispatch", "ProteusDispatch"))
register_dispatch("ramsis", _lazy("shared.ramsis.dispatch", "RamsisDispatch"))
register_planner("kairos", _lazy("shared.kairos.planner", "KairosPlanner"))
register_planner("proteus", _lazy("shared.proteus.planner", "ProteusPlanner"))
