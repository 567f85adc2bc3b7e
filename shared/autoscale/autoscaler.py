"""The autoscaler a service or the simulator polls: `BaseAutoscaler` and INFaaS's `InfaasAutoscaler`.

`InfaasAutoscaler.step` runs the greedy Model-Autoscaler on every call (poll it every second) and the
VM-Autoscaler whenever its 2 s period has passed, handing the VM-Autoscaler the instances the
Model-Autoscaler found no room for. It returns one `ScaleActions` with the fleet's $/h after it.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.cost import fleet_cost_per_hour
from shared.autoscale.greedy import GreedyConfig, GreedyModelAutoscaler
from shared.autoscale.ledger import Request
from shared.autoscale.state import AutoscaleState, ScaleActions
from shared.autoscale.vm import VmAutoscaler, VmConfig

if TYPE_CHECKING:
    from shared.profiles.format import ProfileSet

__all__ = ["BaseAutoscaler", "InfaasAutoscaler"]


class BaseAutoscaler(ABC):
    """Decides fleet changes from the fleet's state; never touches machines itself."""

    #: the registry name (``infaas``, ``sm_plus``, ``clipper_plus``)
    name: ClassVar[str]

    def __init__(self, catalogue: MachineCatalogue) -> None:
        self.catalogue = catalogue

    def remeasured(self, profiles: ProfileSet) -> None:
        """Decide from now on by the latencies of ``profiles`` (real workers announced what they measured on
        their machines): the same machines, options and applications."""
        self.catalogue = self.catalogue.with_latencies_of(profiles)

    @property
    def poll_interval_s(self) -> float:
        """How often `step` should be called."""
        return 1.0

    @abstractmethod
    def step(self, state: AutoscaleState, now_s: float) -> ScaleActions:
        """Called every `poll_interval_s` with the fleet as it is now (booting workers and loading
        instances included, so nothing is asked for twice). Apply stops and unloads, then starts and
        loads."""


class InfaasAutoscaler(BaseAutoscaler):
    """INFaaS: greedy model-level scaling (replicate, upgrade, downgrade) plus VM-level scaling.

    Parameters
    ----------
    catalogue : MachineCatalogue
    model : GreedyConfig, optional
    vm : VmConfig, optional

    Examples
    --------
    >>> from shared.autoscale.catalogue import Application, VariantOption, WorkerType
    >>> from shared.autoscale.state import AutoscaleState, InstanceStatus, WorkerStatus
    >>> from shared.infaas.records import VariantRecord
    >>> cpu = WorkerType("cpu-vm", "cpu", 0.32, {"vcpu": 8})
    >>> m = VariantOption(VariantRecord("m", "f", "cpu-vm", batch_latency_ms=((1, 10.0),)), "m", {"vcpu": 1}, 0.04)
    >>> scaler = InfaasAutoscaler(MachineCatalogue((cpu,), (m,), (Application("app", "f", 50.0),)))
    >>> busy = WorkerStatus("w1", "cpu-vm", instances=(InstanceStatus("m", "app", load_qps=150.0),))
    >>> actions = scaler.step(AutoscaleState(0.0, (busy,), {"app": 150.0}), 0.0)
    >>> [(a.worker_id, a.variant) for a in actions.loads], actions.cost_per_hour
    ([('w1', 'm')], 0.32)
    """

    name = "infaas"

    def __init__(self, catalogue: MachineCatalogue, *, model: GreedyConfig | None = None, vm: VmConfig | None = None):
        super().__init__(catalogue)
        self.model = GreedyModelAutoscaler(catalogue, config=model)
        self.vm = VmAutoscaler(catalogue, config=vm)
        self._requests: list[Request] = []
        self._next_vm_s = -math.inf

    @property
    def poll_interval_s(self) -> float:
        return self.model.config.poll_interval_s

    def remeasured(self, profiles: ProfileSet) -> None:
        super().remeasured(profiles)
        self.model.catalogue = self.vm.catalogue = self.catalogue

    def step(self, state: AutoscaleState, now_s: float) -> ScaleActions:
        decision = self.model.decide(state, now_s, requests=self._requests)
        self._requests.extend(decision.requests)
        actions = decision.actions
        if now_s >= self._next_vm_s - 1e-9:
            self._next_vm_s = now_s + self.vm.config.poll_interval_s
            loading = {load.worker_id for load in actions.loads}
            actions = actions.merge(self.vm.decide(state, requests=self._requests, loading=loading))
            self._requests = []
        return replace(actions, cost_per_hour=fleet_cost_per_hour(state, self.catalogue, actions))
