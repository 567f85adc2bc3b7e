"""Autoscalers by name, so the service, the simulator and the benchmark say the same thing."""
from __future__ import annotations

from typing import Any

from shared.autoscale.autoscaler import BaseAutoscaler, InfaasAutoscaler
from shared.autoscale.baselines import SmPlusAutoscaler, StaticAutoscaler
from shared.autoscale.catalogue import Catalogue

__all__ = ["autoscaler_names", "make_autoscaler"]

_AUTOSCALERS: dict[str, type[BaseAutoscaler]] = {
    cls.name: cls for cls in (InfaasAutoscaler, SmPlusAutoscaler, StaticAutoscaler)}


def autoscaler_names() -> list[str]:
    return sorted(_AUTOSCALERS)


def make_autoscaler(name: str, catalogue: Catalogue, **options: Any) -> BaseAutoscaler:
    """``make_autoscaler("sm_plus", catalogue, variants={"app": ("m", "gpu")})``; options go to the class."""
    try:
        cls = _AUTOSCALERS[name]
    except KeyError:
        raise ValueError(f"unknown autoscaler {name!r}; valid: {', '.join(autoscaler_names())}") from None
    return cls(catalogue, **options)
