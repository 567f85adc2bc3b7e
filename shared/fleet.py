"""Reconcile a running fleet with a plan: which workers to start and which to stop.

Pure: the fleet service applies the answer through a launcher, the simulator to its workers.
Make-before-break: callers start the new workers before stopping the old ones. `FleetCommands` (with the
policy contracts, `shared.policy.base`) is the other way to change a fleet, worker by worker, as an
autoscaler does.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shared.policy.base import Placement


@dataclass(frozen=True, slots=True)
class FleetChanges:
    start: tuple[Placement, ...]
    #: worker ids to stop
    stop: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.start or self.stop)


def reconcile(desired: Sequence[Placement], running: Mapping[str, Placement]) -> FleetChanges:
    """Keep every running worker whose (device, variants) the plan still wants; start or stop the rest.

    Examples
    --------
    >>> gpu, cpu = Placement("gpu", ("m",)), Placement("cpu", ("m",))
    >>> changes = reconcile([gpu, gpu, cpu], {"w1": gpu, "w2": Placement("cpu", ("old",))})
    >>> [p.device for p in changes.start], changes.stop
    (['gpu', 'cpu'], ('w2',))
    """
    wanted = Counter(_key(p) for p in desired)
    keep = Counter()
    stop = []
    for worker_id, placement in sorted(running.items()):
        key = _key(placement)
        if keep[key] < wanted[key]:
            keep[key] += 1
        else:
            stop.append(worker_id)
    start = []
    for placement in desired:
        key = _key(placement)
        if keep[key] > 0:
            keep[key] -= 1
        else:
            start.append(placement)
    return FleetChanges(start=tuple(start), stop=tuple(stop))


def _key(placement: Placement) -> tuple[str, tuple[str, ...]]:
    return placement.device, tuple(sorted(placement.variants))
