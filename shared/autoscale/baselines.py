"""The paper's baselines (Table 5, spec §9), built from the same parts as INFaaS.

* **Clipper+** (Clipper, TF Serving, Triton): one developer-chosen variant per application, pre-loaded
  in a fixed number of instances sized for the peak load; no model or VM autoscaling
  (`provision_for_peak` + `StaticAutoscaler`).
* **SM+** (SageMaker, AI Platform): one developer-chosen variant per application, replicated
  horizontally with VM autoscaling, never switched for another variant (`SmPlusAutoscaler`: INFaaS's
  autoscaler on a catalogue where each application may use only its pinned variant, so no upgrade or
  downgrade exists).

Both share INFaaS's execution stack, dispatch and interference handling, as in the paper.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from shared.autoscale.autoscaler import BaseAutoscaler, InfaasAutoscaler
from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.cost import fleet_cost_per_hour
from shared.autoscale.greedy import GreedyConfig
from shared.autoscale.ledger import pack_instances
from shared.autoscale.state import (
    AutoscaleState,
    InstanceSpec,
    ScaleActions,
    StartWorker,
)
from shared.autoscale.vm import VmConfig
from shared.infaas.records import Key

__all__ = ["SmPlusAutoscaler", "StaticAutoscaler", "pin", "provision_for_peak"]


def pin(catalogue: MachineCatalogue, variants: Mapping[str, Key]) -> MachineCatalogue:
    """The catalogue with each named application restricted to one (variant, device)."""
    unknown = [a for a in variants if a not in catalogue.application]
    missing = [k for k in variants.values() if tuple(k) not in catalogue.option]
    if unknown or missing:
        raise ValueError(f"`variants`: unknown applications {unknown} or options {missing}")
    apps = []
    for app in catalogue.applications:
        key = variants.get(app.name)
        apps.append(app if key is None else replace(app, options=(tuple(key),)))
    return catalogue.with_applications(apps)


def provision_for_peak(catalogue: MachineCatalogue, peak_qps: Mapping[str, float], *, slack_threshold: float = 1.05,
                       latency_budget: float = 0.5, id_prefix: str = "static-") -> tuple[StartWorker, ...]:
    """Workers pre-loaded with ``ceil(slack_threshold x peak / Q)`` instances of each application's first
    eligible option (its pinned variant), packed onto as few machines as possible.

    Examples
    --------
    >>> from shared.autoscale.catalogue import Application, VariantOption, WorkerType
    >>> from shared.infaas.records import VariantRecord
    >>> cpu = WorkerType("cpu-vm", "cpu", 0.32, {"vcpu": 8})
    >>> m = VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0),)), "m", {"vcpu": 1}, 0.04)
    >>> fleet = provision_for_peak(MachineCatalogue((cpu,), (m,), (Application("app", "f", 50.0),)), {"app": 950.0})
    >>> [(s.device, len(s.instances)) for s in fleet]
    [('cpu-vm', 8), ('cpu-vm', 2)]
    """
    requests = []
    for name, peak in sorted(peak_qps.items()):
        eligible = catalogue.eligible(name, latency_budget)
        if not eligible:
            raise ValueError(f"`peak_qps`: no option of {name!r} meets its SLO")
        option = eligible[0]
        q = option.peak_qps(catalogue.application[name].slo_ms, latency_budget)
        count = max(1, math.ceil(slack_threshold * peak / q - 1e-9))
        requests += [(option.device, InstanceSpec(option.variant, name))] * count
    fleet, n = [], 0
    for device, bins in pack_instances(catalogue, requests).items():
        for members in bins:
            fleet.append(StartWorker(f"{id_prefix}{device}-{n}", device, tuple(members), "provisioned for peak"))
            n += 1
    return tuple(fleet)


class StaticAutoscaler(BaseAutoscaler):
    """Clipper+: the fleet stays as provisioned; only its cost is reported."""

    name = "clipper_plus"

    def step(self, state: AutoscaleState, now_s: float) -> ScaleActions:
        return ScaleActions(cost_per_hour=fleet_cost_per_hour(state, self.catalogue))


class SmPlusAutoscaler(InfaasAutoscaler):
    """SM+: each application's pinned variant, replicated horizontally, with VM autoscaling.

    Parameters
    ----------
    catalogue : MachineCatalogue
    variants : application -> (variant, device) it is pinned to.
    model, vm : as for `InfaasAutoscaler`.
    """

    name = "sm_plus"

    def __init__(self, catalogue: MachineCatalogue, variants: Mapping[str, Key], *, model: GreedyConfig | None = None,
                 vm: VmConfig | None = None):
        super().__init__(pin(catalogue, variants), model=model, vm=vm)
