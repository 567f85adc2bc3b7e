"""Dispatch policies by name, so services, the simulator and the CLI say the same thing."""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from shared.policy.base import DispatchPolicy
from shared.policy.fcfs import FcfsDispatch

DispatchFactory = Callable[..., DispatchPolicy]

_DISPATCH: dict[str, DispatchFactory] = {}


def register_dispatch(name: str, factory: DispatchFactory) -> None:
    if name in _DISPATCH:
        raise ValueError(f"dispatch policy {name!r} is already registered")
    _DISPATCH[name] = factory


def dispatch_names() -> list[str]:
    return sorted(_DISPATCH)


def make_dispatch(name: str, **options: Any) -> DispatchPolicy:
    try:
        factory = _DISPATCH[name]
    except KeyError:
        raise ValueError(f"unknown dispatch policy {name!r}; valid: {', '.join(dispatch_names())}") from None
    return factory(**options)


register_dispatch(FcfsDispatch.name, FcfsDispatch)
register_dispatch("kairos", lambda **options: import_module("shared.kairos.dispatch").KairosDispatch(**options))
