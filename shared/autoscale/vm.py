"""INFaaS's VM-Autoscaler (§4.2.3, spec §6.5), polled every 2 s by the controller.

It starts a worker of hardware kind ``H`` when

1. the utilization of ``H`` exceeds 80% on every worker that has ``H``;
2. variants on ``H`` are Interfered on every worker that has ``H``;
3. more than 80% of workers have an Overloaded variant (the kind with the most Overloaded instances
   gets the worker; spec §12.16);

and it starts machines for the Model-Autoscaler's requests that fit on no running worker (step (d) of
§4.2.2), packed first-fit onto as few new machines as possible.

Back-off: rules 1-3 do not fire for a kind while a worker of that kind is still booting (a booting
worker's utilization is 0, so rule 1 backs off by itself; the reference code waits 15 polls after any
action). Scale-down, which the paper leaves out, follows spec §12.15: a worker that has held no instance
for ``idle_stop_s`` is stopped, never going below ``min_workers``, and never while every other worker of
its kind is above the utilization threshold (rule 1 would start it again at the next poll). By default
the wait is the worker type's boot time, the VM-level twin of the paper's ``T_v`` (a variant waits its
loading latency before it is scaled down): a machine idle for as long as a new one takes to boot is given
back. With clouds' 20-30 s boots that is the reference code's 15 polls x 2 s; with the 10 s boots of
``make bench-cost``, a fixed 30 s kept every machine of the fall 20 s longer than a new one takes to come.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.autoscale.catalogue import MachineCatalogue
from shared.autoscale.ledger import Request, pack_instances
from shared.autoscale.state import AutoscaleState, ScaleActions, StartWorker, StopWorker, WorkerStatus
from shared.infaas.state import InstanceState

__all__ = ["VmAutoscaler", "VmConfig"]


@dataclass(frozen=True, slots=True)
class VmConfig:
    #: rule 1: utilization above which a kind counts as busy on a worker (paper: 80%)
    utilization_threshold: float = 0.8
    #: rule 3: share of workers with an Overloaded variant above which a worker is added (paper: 80%)
    overloaded_fraction: float = 0.8
    #: paper §5: 2 s
    poll_interval_s: float = 2.0
    #: seconds without instances before an idle worker is stopped (at least one poll); None: the
    #: worker type's ``startup_s``
    idle_stop_s: float | None = None
    min_workers: int = 1
    max_workers: int = 64
    #: hardware kind -> worker type started for it; default the cheapest type of that kind
    scale_out: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        for name in ("utilization_threshold", "overloaded_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"`{name}` must be in (0, 1], got {getattr(self, name)}")
        if not self.poll_interval_s > 0:
            raise ValueError(f"`poll_interval_s` must be > 0, got {self.poll_interval_s}")
        if self.idle_stop_s is not None and not self.idle_stop_s >= 0:
            raise ValueError(f"`idle_stop_s` must be >= 0, got {self.idle_stop_s}")
        if self.min_workers < 0 or self.max_workers < max(1, self.min_workers):
            raise ValueError(f"need 0 <= `min_workers` <= `max_workers`, got {self.min_workers}, {self.max_workers}")

    def idle_polls(self, startup_s: float) -> int:
        """Consecutive idle polls before a worker whose type boots in `startup_s` is stopped."""
        wait = startup_s if self.idle_stop_s is None else self.idle_stop_s
        return max(1, math.ceil(wait / self.poll_interval_s - 1e-9))


class VmAutoscaler:
    """The three scale-up rules, machines for unplaceable instances, and idle scale-down.

    Parameters
    ----------
    catalogue : MachineCatalogue
    config : VmConfig, optional
    id_prefix : str
        New workers are named ``<prefix><device>-<n>``.
    """

    def __init__(self, catalogue: MachineCatalogue, *, config: VmConfig | None = None, id_prefix: str = "as-") -> None:
        self.catalogue = catalogue
        self.config = config or VmConfig()
        scale_out = dict(self.config.scale_out or {})
        for worker_type in sorted(catalogue.worker_types, key=lambda w: (w.price_per_hour, w.name)):
            scale_out.setdefault(worker_type.kind, worker_type.name)
        unknown = [d for d in scale_out.values() if d not in catalogue.worker_type]
        if unknown:
            raise ValueError(f"`scale_out` names unknown worker types {unknown}")
        self.scale_out = scale_out
        self._ids = itertools.count()
        self._prefix = id_prefix
        #: worker id -> consecutive polls seen without instances
        self._idle: Counter[str] = Counter()

    def decide(self, state: AutoscaleState, *, requests: Iterable[Request] = (),
               loading: Iterable[str] = ()) -> ScaleActions:
        """One poll.

        `requests` are instances the Model-Autoscaler could place on no worker; `loading` names workers
        it has just loaded onto (not idle, whatever `state` still says).
        """
        taken = {w.worker_id for w in state.workers}
        budget = self.config.max_workers - len(state.workers)
        start: list[StartWorker] = []
        for device, specs in pack_instances(self.catalogue, requests).items():
            for instances in specs:
                if budget <= 0:
                    break
                start.append(StartWorker(self._new_id(device, taken), device, tuple(instances),
                                         "no running worker has room"))
                budget -= 1
        booting = {self.catalogue.worker_type[w.device].kind for w in state.workers if not w.ready}
        booting |= {self.catalogue.worker_type[s.device].kind for s in start}
        for kind, reason in self._rules(state):
            if budget <= 0 or kind in booting:
                continue
            device = self.scale_out[kind]
            start.append(StartWorker(self._new_id(device, taken), device, (), reason))
            booting.add(kind)
            budget -= 1
        return ScaleActions(start=tuple(start), stop=self._idle_stops(state, len(start), set(loading)))

    def _rules(self, state: AutoscaleState) -> list[tuple[str, str]]:
        cfg = self.config
        by_kind: dict[str, list] = {}
        for worker in state.workers:
            by_kind.setdefault(self.catalogue.worker_type[worker.device].kind, []).append(worker)
        fired = []
        for kind, workers in sorted(by_kind.items()):
            if self._rule_1_fires(workers):
                fired.append((kind, (f"rule 1: {kind} utilization above {cfg.utilization_threshold:g} on all "
                                     f"{len(workers)} workers")))
            elif all(w.ready and any(i.state is InstanceState.INTERFERED for i in w.instances) for w in workers):
                fired.append((kind, f"rule 2: Interfered variants on all {len(workers)} {kind} workers"))
        overloaded = [w for w in state.workers if any(i.state is InstanceState.OVERLOADED for i in w.instances)]
        if state.workers and len(overloaded) > cfg.overloaded_fraction * len(state.workers):
            counts = Counter(self.catalogue.worker_type[w.device].kind for w in state.workers
                             for i in w.instances if i.state is InstanceState.OVERLOADED)
            kind = min(counts, key=lambda k: (-counts[k], k))
            if kind not in {k for k, _ in fired}:
                fired.append((kind, (f"rule 3: {len(overloaded)} of {len(state.workers)} workers have "
                                     f"Overloaded variants")))
        return fired

    def _idle_stops(self, state: AutoscaleState, num_starting: int, loading: set[str]) -> tuple[StopWorker, ...]:
        idle = {w.worker_id for w in state.workers if w.ready and not w.instances and w.worker_id not in loading}
        devices = {w.worker_id: w.device for w in state.workers}
        self._idle = Counter({w: self._idle[w] + 1 for w in idle})
        removable = len(state.workers) + num_starting - self.config.min_workers
        stops = []
        for worker_id in sorted(idle, key=lambda w: (-self._idle[w], w)):
            if removable <= 0:
                break
            if self._rule_1_would_start_again(state, worker_id, devices[worker_id]):
                continue
            startup_s = self.catalogue.worker_type[devices[worker_id]].startup_s
            if self._idle[worker_id] >= self.config.idle_polls(startup_s):
                stops.append(StopWorker(worker_id, f"no instance for {self._idle[worker_id]} polls"))
                del self._idle[worker_id]
                removable -= 1
        return tuple(stops)

    def _rule_1_would_start_again(self, state: AutoscaleState, worker_id: str, device: str) -> bool:
        """Whether every other worker of this one's kind is above the utilization threshold: stopping it
        would fire rule 1 at the next poll, and the machine just given back would boot again."""
        kind = self.catalogue.worker_type[device].kind
        others = [w for w in state.workers
                  if w.worker_id != worker_id and self.catalogue.worker_type[w.device].kind == kind]
        return bool(others) and self._rule_1_fires(others)

    def _rule_1_fires(self, workers: Iterable[WorkerStatus]) -> bool:
        """Rule 1 for one kind's `workers`: every one is above the utilization threshold."""
        return all(w.utilization > self.config.utilization_threshold for w in workers)

    def _new_id(self, device: str, taken: set[str]) -> str:
        while True:
            worker_id = f"{self._prefix}{device}-{next(self._ids)}"
            if worker_id not in taken:
                taken.add(worker_id)
                return worker_id
