"""A working copy of the fleet for one decision: free resources per worker and instance counts.

Both autoscalers decide several actions per poll; each action changes what the next one may use, so
they reserve and release on a `FleetLedger` built from the `AutoscaleState` (plus requests not yet
turned into machines) instead of re-reading the state.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from shared.autoscale.catalogue import MachineCatalogue, VariantOption
from shared.autoscale.state import AutoscaleState, InstanceSpec
from shared.infaas.records import Key

__all__ = ["FleetLedger", "GroupKey", "Request", "pack_instances"]

#: (application, (variant, device)): instances that are interchangeable for the autoscalers
GroupKey = tuple[str, Key]
#: an instance no worker had room for: (device type, what to load)
Request = tuple[str, InstanceSpec]

_EPS = 1e-9


class FleetLedger:
    """Free resources and instance counts, updated as a decision reserves and releases."""

    def __init__(self, state: AutoscaleState, catalogue: MachineCatalogue, requests: Iterable[Request] = ()) -> None:
        self.catalogue = catalogue
        self.device: dict[str, str] = {}
        self.ready: dict[str, bool] = {}
        self.utilization: dict[str, float] = {}
        self.free: dict[str, dict[str, float]] = {}
        #: (worker id, application, key) -> instances there (ready or loading)
        self.on_worker: Counter[tuple[str, str, Key]] = Counter()
        #: (application, key) -> instances anywhere, requested ones included
        self.total: Counter[GroupKey] = Counter()
        #: (application, key) -> instances still loading or requested
        self.coming: Counter[GroupKey] = Counter()
        for worker in state.workers:
            worker_type = catalogue.worker_type[worker.device]
            self.device[worker.worker_id] = worker.device
            self.ready[worker.worker_id] = worker.ready
            self.utilization[worker.worker_id] = worker.utilization
            self.free[worker.worker_id] = dict(worker_type.capacity)
            for instance in worker.instances:
                key = (instance.variant, worker.device)
                option = catalogue.option.get(key)
                if option is None:
                    continue
                self._take(worker.worker_id, option)
                self.on_worker[(worker.worker_id, instance.application, key)] += 1
                self.total[(instance.application, key)] += 1
                if not (instance.ready and worker.ready):
                    self.coming[(instance.application, key)] += 1
        self.requests: list[Request] = []
        for device, spec in requests:
            self.request(device, spec)

    def fits(self, worker_id: str, option: VariantOption) -> bool:
        free = self.free[worker_id]
        return self.device[worker_id] == option.device and all(
            free.get(r, 0.0) + _EPS >= amount for r, amount in option.needs.items())

    def allocated_share(self, worker_id: str) -> float:
        """The largest share of any resource of the worker already reserved."""
        capacity = self.catalogue.worker_type[self.device[worker_id]].capacity
        return max(1.0 - self.free[worker_id][r] / capacity[r] for r in capacity)

    def choose(self, option: VariantOption, *, prefer: str | None = None, exclude: Iterable[str] = (),
               least_utilized: bool = False) -> str | None:
        """A worker with room for `option`: `prefer` if it fits, else best fit (the most allocated worker
        that still fits; online bin packing, paper §4.2.3), or with `least_utilized` the lowest-utilization
        one (Algorithm 1's placement; used to move Interfered instances away from contention)."""
        excluded = set(exclude)
        if prefer is not None and prefer not in excluded and self.fits(prefer, option):
            return prefer
        fitting = [w for w in self.free if w not in excluded and self.fits(w, option)]
        if not fitting:
            return None
        if least_utilized:
            return min(fitting, key=lambda w: (self.utilization[w], w))
        return min(fitting, key=lambda w: (-self.allocated_share(w), w))

    def add(self, worker_id: str, option: VariantOption, application: str) -> None:
        self._take(worker_id, option)
        self.on_worker[(worker_id, application, option.key)] += 1
        self.total[(application, option.key)] += 1
        self.coming[(application, option.key)] += 1

    def remove(self, worker_id: str, option: VariantOption, application: str) -> None:
        slot = (worker_id, application, option.key)
        if self.on_worker[slot] < 1:
            raise ValueError(f"no instance of {option.key} for {application!r} on {worker_id!r} to remove")
        self.on_worker[slot] -= 1
        self.total[(application, option.key)] -= 1
        for resource, amount in option.needs.items():
            self.free[worker_id][resource] += amount

    def request(self, device: str, spec: InstanceSpec) -> None:
        """Capacity no worker has room for: it counts for the group while a machine is found."""
        key = (spec.variant, device)
        self.requests.append((device, spec))
        self.total[(spec.application, key)] += 1
        self.coming[(spec.application, key)] += 1

    def _take(self, worker_id: str, option: VariantOption) -> None:
        free = self.free[worker_id]
        for resource, amount in option.needs.items():
            free[resource] = free.get(resource, 0.0) - amount


def pack_instances(catalogue: MachineCatalogue, requests: Iterable[Request]) -> dict[str, list[list[InstanceSpec]]]:
    """First-fit decreasing of instances onto as few new machines of their device type as possible.

    Examples
    --------
    >>> from shared.autoscale.catalogue import Application, VariantOption, WorkerType
    >>> from shared.infaas.records import VariantRecord
    >>> cpu = WorkerType("c", "cpu", 0.3, {"vcpu": 8})
    >>> o = VariantOption(VariantRecord("m", "f", "c", batch_latency_ms=((1, 5.0),)), "m", {"vcpu": 3}, 0.1)
    >>> cat = MachineCatalogue((cpu,), (o,), (Application("a", "f", 100.0),))
    >>> [len(b) for b in pack_instances(cat, [("c", InstanceSpec("m", "a"))] * 5)["c"]]
    [2, 2, 1]
    """
    by_device: dict[str, list[InstanceSpec]] = {}
    for device, spec in requests:
        by_device.setdefault(device, []).append(spec)
    packed: dict[str, list[list[InstanceSpec]]] = {}
    for device, specs in sorted(by_device.items()):
        capacity = catalogue.worker_type[device].capacity
        sized = []
        for spec in specs:
            needs = catalogue.option[(spec.variant, device)].needs
            sized.append((-max(needs.get(r, 0.0) / capacity[r] for r in capacity), spec.variant, spec.application,
                          spec, needs))
        bins: list[tuple[dict[str, float], list[InstanceSpec]]] = []
        for *_, spec, needs in sorted(sized, key=lambda s: s[:3]):
            for free, members in bins:
                if all(free.get(r, 0.0) + _EPS >= a for r, a in needs.items()):
                    break
            else:
                free, members = dict(capacity), []
                bins.append((free, members))
            for resource, amount in needs.items():
                free[resource] = free.get(resource, 0.0) - amount
            members.append(spec)
        packed[device] = [members for _, members in bins]
    return packed
