"""INFaaS's runtime Model-Autoscaler: the greedy heuristic of §4.2.2 (spec §6.4), polled every second.

Per worker ``w``, with ``Q_v`` the profiled saturation throughput and ``load`` the incoming rows/s (each
instance's share of its application's demand, queries waiting in the scheduler included)::

    headroom_w = sum_{instances on w} Q_v / sum_{instances on w} load

* **Scale up** when ``headroom_w < slack_threshold`` (1.05): every (application, architecture) group on
  ``w`` whose capacity is below ``slack_threshold x load`` gets the cheaper of two actions, priced with the
  ILP's cost ``C (delta + lam T_load max(delta, 0))``:
  *replicate* its running variant (``delta = ceil(shortfall / Q)``), or *upgrade* to a variant of the
  same architecture with a higher ``Q`` that meets the SLO (``delta' = ceil(target / Q')`` new instances,
  ``-N`` of the old ones, which are unloaded once the new ones serve: make-before-break).
* **Scale down** otherwise: remove one replica if the group's load still fits with ``scale_down_threshold``
  of headroom (the slack threshold unless set higher), or downgrade to a cheaper same-architecture variant
  (lower batch or cheaper hardware); whichever lowers the cost more.
  A candidate runs only after it has held continuously for ``T_v`` = the variant's loading latency
  (paper), and for at least as many consecutive polls as the authors' code asks of its hardware
  before scaling down (10 on CPU, 20 on GPU; spec Appendix A): with loading latencies of a few hundred
  ms, ``T_v`` alone undoes a replica one second after a dip and loads it back at the next rise (counted
  again from zero for the next step down).
* **Resources** (constraint 3): instances go on the deciding worker if it has room, else on the
  best-fitting other worker of the right hardware; what fits nowhere becomes a request the
  VM-Autoscaler turns into a new machine (step (d) of the paper).
* **Interference** (§4.1): an Interfered instance is re-created on free resources of its own worker
  (other cores), or, if there are none or that was just tried, on the least-utilized other worker;
  the old instance is unloaded once the new one is ready.

Choices the paper leaves open (spec §12): a group's options are costed with its fleet-wide instance
count and load (a worker's share alone would never pay for an upgrade that replaces instances on other
workers); a group's load is its instances' incoming load, scaled up to the application's demand when
queries wait with no instance; the last instance of an application is never removed; no scale-down
while a group has instances loading or a replacement pending.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from shared.autoscale.catalogue import MachineCatalogue, VariantOption
from shared.autoscale.ledger import FleetLedger, GroupKey, Request
from shared.autoscale.state import (
    AutoscaleState,
    InstanceSpec,
    InstanceStatus,
    LoadInstance,
    ScaleActions,
    UnloadInstance,
    WorkerStatus,
)
from shared.infaas.records import Key
from shared.infaas.state import InstanceState

if TYPE_CHECKING:
    from shared.settings import Settings

__all__ = ["GreedyConfig", "GreedyDecision", "GreedyModelAutoscaler"]

_EPS = 1e-9

#: consecutive scale-down checks the authors' code needs per hardware kind (``autoscaler.cc``: CPU 10,
#: GPU 20, Inferentia 15 at its 1 s arbiter period; spec Appendix A)
REF_SCALE_DOWN_CHECKS: Mapping[str, int] = MappingProxyType({"cpu": 10, "gpu": 20})


@dataclass(frozen=True, slots=True)
class GreedyConfig:
    """Knobs of the greedy Model-Autoscaler."""

    #: minimum headroom per worker (paper §5: 1.05, explored 1.01-1.1)
    slack_threshold: float = 1.05
    #: headroom a group must keep after a scale-down; None: `slack_threshold` (the paper). Above it, a
    #: replica removed in a dip is not the one the next rise of the same size asks back (hysteresis)
    scale_down_threshold: float | None = None
    #: ``lambda`` (1/s) of the ILP cost: weight of loading latency (spec §12.13)
    lam: float = 1.0
    #: share of the SLO one batch may take (``Q`` and the SLO check use batches within it)
    latency_budget: float = 0.5
    #: give up waiting for a replacement (upgrade, downgrade, migration) after this long
    swap_timeout_s: float = 120.0
    #: after re-creating an Interfered instance on its own worker, move the next one elsewhere for this long
    mitigation_memory_s: float = 30.0
    #: the poll period the service and simulator use (paper §5: 1 s)
    poll_interval_s: float = 1.0
    #: hardware kind -> consecutive polls a scale-down must hold besides ``T_v``; empty: ``T_v`` only
    scale_down_checks: Mapping[str, int] = field(default_factory=lambda: REF_SCALE_DOWN_CHECKS)

    def __post_init__(self) -> None:
        if not 1.0 <= self.slack_threshold <= 2.0:
            raise ValueError(f"`slack_threshold` must be in [1, 2], got {self.slack_threshold}")
        if self.scale_down_threshold is None:
            object.__setattr__(self, "scale_down_threshold", self.slack_threshold)
        if not self.slack_threshold <= self.scale_down_threshold <= 2.0:
            raise ValueError(f"`scale_down_threshold` must be in [`slack_threshold`, 2], got "
                             f"{self.scale_down_threshold}")
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"`lam` must be finite and >= 0, got {self.lam}")
        if not 0.0 < self.latency_budget <= 1.0:
            raise ValueError(f"`latency_budget` must be in (0, 1], got {self.latency_budget}")
        for name in ("swap_timeout_s", "mitigation_memory_s", "poll_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be > 0, got {getattr(self, name)}")
        if any(n < 0 for n in self.scale_down_checks.values()):
            raise ValueError(f"`scale_down_checks` must be >= 0, got {dict(self.scale_down_checks)}")
        object.__setattr__(self, "scale_down_checks", MappingProxyType(dict(self.scale_down_checks)))

    @classmethod
    def from_settings(cls, settings: Settings) -> GreedyConfig:
        """The live settings' headroom and batch share of the SLO (the monitor judges instances by the same)."""
        return cls(slack_threshold=settings.infaas_slack_threshold, latency_budget=settings.infaas_latency_budget,
                   scale_down_threshold=settings.infaas_scale_down_threshold)

    def scale_down_wait_s(self, load_s: float, kind: str) -> float:
        """How long a scale-down must hold: ``T_v`` and the kind's checks, whichever is longer."""
        return max(load_s, self.scale_down_checks.get(kind, 0) * self.poll_interval_s)


@dataclass(frozen=True, slots=True)
class GreedyDecision:
    actions: ScaleActions
    #: instances no worker had room for; the VM-Autoscaler starts machines for them
    requests: tuple[Request, ...] = ()
    #: worker id -> headroom seen this poll (ready workers with load)
    headroom: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class _Swap:
    """Unload `unload` once `key` has `ready_target` ready instances (make-before-break)."""

    group: tuple[str, str]
    application: str
    key: Key
    ready_target: int
    unload: list[tuple[str, str]]  # (worker id, variant)
    since_s: float


class GreedyModelAutoscaler:
    """The greedy heuristic with its memory: scale-down timers (``T_v``) and pending replacements.

    Parameters
    ----------
    catalogue : MachineCatalogue
    config : GreedyConfig, optional

    Call `decide` every ``config.poll_interval_s`` with the current state.
    """

    def __init__(self, catalogue: MachineCatalogue, *, config: GreedyConfig | None = None) -> None:
        self.catalogue = catalogue
        self.config = config or GreedyConfig()
        self._swaps: list[_Swap] = []
        #: scale-down candidate -> when it was first seen (reset when it stops holding)
        self._since: dict[tuple, float] = {}
        #: worker id -> when an Interfered instance was last re-created on that same worker
        self._migrated_on: dict[str, float] = {}

    @property
    def waiting(self) -> bool:
        """Whether a scale-down is held back by its wait (nothing changes, yet a later poll may act)."""
        return bool(self._since)

    def decide(self, state: AutoscaleState, now_s: float, *, requests: Iterable[Request] = ()) -> GreedyDecision:
        """One poll: finish replacements, mitigate interference, then scale each worker's groups.

        `requests` are earlier requests the VM-Autoscaler has not turned into machines yet; they count
        as capacity so the same shortfall is not requested twice.
        """
        run = _Poll(self, state, now_s, FleetLedger(state, self.catalogue, requests))
        run.finish_swaps()
        run.mitigate()
        run.cold_starts()
        run.scale_workers()
        self._since = {k: t for k, t in self._since.items() if k in run.seen}
        actions = ScaleActions(loads=tuple(run.loads), unloads=tuple(run.unloads))
        new_requests = tuple(run.ledger.requests[run.num_old_requests:])
        return GreedyDecision(actions, new_requests, run.headroom)


class _Poll:
    """The working state of one `GreedyModelAutoscaler.decide` call."""

    def __init__(self, owner: GreedyModelAutoscaler, state: AutoscaleState, now_s: float, ledger: FleetLedger):
        self.owner, self.state, self.now, self.ledger = owner, state, now_s, ledger
        self.cfg, self.catalogue = owner.config, owner.catalogue
        self.num_old_requests = len(ledger.requests)
        self.loads: list[LoadInstance] = []
        self.unloads: list[UnloadInstance] = []
        self.seen: set[tuple] = set()
        self.handled: set[tuple[str, str]] = set()
        self.headroom: dict[str, float] = {}
        self.ready = Counter()
        self.load: Counter[GroupKey] = Counter()
        app_load: Counter[str] = Counter()
        for worker in state.workers:
            for inst in worker.instances:
                key = (inst.variant, worker.device)
                if inst.ready and worker.ready:
                    self.ready[(inst.application, key)] += 1
                self.load[(inst.application, key)] += inst.load_qps
                app_load[inst.application] += inst.load_qps
        #: application -> incoming rows/s: the larger of its demand and what its instances receive
        self.demand = {a: max(state.demand_qps.get(a, 0.0), app_load[a]) for a in self.catalogue.application}
        self.app_load = app_load

    # -- groups ---------------------------------------------------------------------------------
    def arch(self, key: Key) -> str:
        return self.catalogue.option[key].architecture

    def q(self, application: str, option: VariantOption) -> float:
        return option.peak_qps(self.catalogue.application[application].slo_ms, self.cfg.latency_budget)

    def group_keys(self, application: str, architecture: str) -> list[Key]:
        return sorted(k for (a, k), n in self.ledger.total.items()
                      if a == application and n > 0 and self.arch(k) == architecture)

    def capacity(self, application: str, keys: Iterable[Key]) -> float:
        return sum(self.ledger.total[(application, k)] * self.q(application, self.catalogue.option[k]) for k in keys)

    def group_load(self, application: str, keys: list[Key]) -> float:
        """The group's share of the application's demand (by incoming load, else by capacity)."""
        demand = self.demand[application]
        if self.app_load[application] > 0:
            return demand * sum(self.load[(application, k)] for k in keys) / self.app_load[application]
        app_keys = [k for (a, k), n in self.ledger.total.items() if a == application and n > 0]
        total = self.capacity(application, app_keys)
        return demand * self.capacity(application, keys) / total if total > 0 else demand

    def incoming(self, instance: InstanceStatus, device: str) -> float:
        """The instance's share of its application's demand, as `group_load` splits it.

        What an instance is routed is at most what it serves: queries waiting in the scheduler for a
        saturated instance reach it only later, so its headroom would never fall below the threshold
        (spec §12.23: measure *incoming* load, queued work included).
        """
        application = instance.application
        if self.app_load[application] > 0:
            return self.demand[application] * instance.load_qps / self.app_load[application]
        option = self.catalogue.option.get((instance.variant, device))
        return 0.0 if option is None else self.group_load(application, [option.key]) / max(
            1, self.ledger.total[(application, option.key)])

    def app_instances(self, application: str) -> int:
        return sum(n for (a, _), n in self.ledger.total.items() if a == application)

    def locked(self) -> set[tuple[str, str]]:
        return {s.group for s in self.owner._swaps}

    def eligible(self, application: str) -> tuple[VariantOption, ...]:
        return self.catalogue.eligible(application, self.cfg.latency_budget)

    def cost(self, option: VariantOption, delta: int) -> float:
        """The ILP's ``C (delta + lam T_load max(delta, 0))`` in $/h units."""
        return option.cost_per_hour * (delta + self.cfg.lam * option.load_s * max(delta, 0))

    # -- actions --------------------------------------------------------------------------------
    def place(self, option: VariantOption, application: str, count: int, *, prefer: str | None,
              reason: str) -> None:
        for _ in range(count):
            worker_id = self.ledger.choose(option, prefer=prefer)
            if worker_id is None:
                self.ledger.request(option.device, InstanceSpec(option.variant, application))
            else:
                self.ledger.add(worker_id, option, application)
                self.loads.append(LoadInstance(worker_id, option.variant, application, reason))

    def unload(self, worker_id: str, key: Key, application: str, reason: str) -> None:
        self.ledger.remove(worker_id, self.catalogue.option[key], application)
        self.unloads.append(UnloadInstance(worker_id, key[0], application, reason))

    def replace_group(self, application: str, architecture: str, keep: Key, ready_target: int) -> None:
        """Unload every other instance of the group once `keep` has `ready_target` ready instances."""
        unload = [(w, k[0]) for (w, a, k), n in self.ledger.on_worker.items()
                  if a == application and k != keep and self.arch(k) == architecture for _ in range(n)]
        if unload:
            self.owner._swaps.append(_Swap((application, architecture), application, keep, ready_target,
                                           unload, self.now))

    # -- steps ----------------------------------------------------------------------------------
    def finish_swaps(self) -> None:
        pending = []
        for swap in self.owner._swaps:
            if self.ready[(swap.application, swap.key)] >= swap.ready_target:
                for worker_id, variant in swap.unload:
                    device = self.ledger.device.get(worker_id)
                    key = (variant, device)
                    if device is not None and self.ledger.on_worker[(worker_id, swap.application, key)] > 0:
                        self.unload(worker_id, key, swap.application, f"replaced by {swap.key[0]} on {swap.key[1]}")
            elif self.now - swap.since_s < self.cfg.swap_timeout_s:
                pending.append(swap)
        self.owner._swaps = pending

    def mitigate(self) -> None:
        """Each Interfered instance not already being replaced (or unloaded this poll) gets a new home."""
        moving = Counter((w, s.application, v) for s in self.owner._swaps for w, v in s.unload)
        moving.update((u.worker_id, u.application, u.variant) for u in self.unloads)
        for worker in self.state.workers:
            if not worker.ready:
                continue
            for inst in worker.instances:
                slot = (worker.worker_id, inst.application, inst.variant)
                option = self.catalogue.option.get((inst.variant, worker.device))
                if inst.state is not InstanceState.INTERFERED or option is None:
                    continue
                if moving[slot] > 0:
                    moving[slot] -= 1
                    continue
                self.move(worker.worker_id, option, inst.application)

    def move(self, worker_id: str, option: VariantOption, application: str) -> None:
        recent = self.now - self.owner._migrated_on.get(worker_id, -math.inf)
        if self.ledger.fits(worker_id, option) and recent > self.cfg.mitigation_memory_s:
            target = worker_id
            self.owner._migrated_on[target] = self.now
        else:
            target = self.ledger.choose(option, exclude=(worker_id,), least_utilized=True)
        if target is None:
            self.ledger.request(option.device, InstanceSpec(option.variant, application))
        else:
            self.ledger.add(target, option, application)
            self.loads.append(LoadInstance(target, option.variant, application, f"interfered on {worker_id}"))
        self.owner._swaps.append(_Swap((application, option.architecture), application, option.key,
                                       self.ready[(application, option.key)] + 1, [(worker_id, option.variant)],
                                       self.now))

    def cold_starts(self) -> None:
        """An application with demand and no instance gets the cheapest option that carries it."""
        thr = self.cfg.slack_threshold
        for name, demand in sorted(self.demand.items()):
            if demand <= 0 or self.app_instances(name) > 0:
                continue
            best = None
            for option in self.eligible(name):
                n = max(1, math.ceil(demand * thr / self.q(name, option) - _EPS))
                rank = (self.cost(option, n), option.key)
                if best is None or rank < best[0]:
                    best = (rank, option, n)
            if best is not None:
                self.place(best[1], name, best[2], prefer=None, reason=f"no instance for {demand:.1f} rows/s")
                self.handled.add((name, best[1].architecture))

    def scale_workers(self) -> None:
        thr, locked = self.cfg.slack_threshold, self.locked()
        ready = [w for w in self.state.workers if w.ready]
        for worker in sorted(ready, key=lambda w: (self.ledger.allocated_share(w.worker_id), w.worker_id)):
            serving = [i for i in worker.instances if i.ready]
            capacity = sum(self.q(i.application, self.catalogue.option[(i.variant, worker.device)])
                           for i in serving if (i.variant, worker.device) in self.catalogue.option)
            load = sum(self.incoming(i, worker.device) for i in serving)
            headroom = capacity / load if load > 0 else math.inf
            if load > 0:
                self.headroom[worker.worker_id] = headroom
            groups = sorted({(i.application, self.arch((i.variant, worker.device))) for i in serving
                             if (i.variant, worker.device) in self.catalogue.option})
            for group in groups:
                if group in self.handled:
                    continue
                if headroom < thr:
                    if self.scale_up(worker, *group):
                        self.handled.add(group)
                elif group not in locked and self.scale_down(worker, *group):
                    self.handled.add(group)

    def scale_up(self, worker: WorkerStatus, application: str, architecture: str) -> bool:
        thr = self.cfg.slack_threshold
        keys = self.group_keys(application, architecture)
        target = self.group_load(application, keys) * thr
        have = self.capacity(application, keys)
        if target <= have + _EPS:
            return False
        eligible = {o.key: o for o in self.eligible(application)}
        here = Counter({k: self.ledger.on_worker[(worker.worker_id, application, k)] for k in keys})
        options = []
        current = max((k for k in keys if k in eligible), key=lambda k: (here[k], k), default=None)
        if current is not None:
            option = eligible[current]
            n = math.ceil((target - have) / self.q(application, option) - _EPS)
            options.append((self.cost(option, n), 0, option, n, "replicate"))
        q_current = self.q(application, eligible[current]) if current is not None else 0.0
        running_cost = sum(self.catalogue.option[k].cost_per_hour * self.ledger.total[(application, k)] for k in keys)
        for option in eligible.values():
            if option.architecture != architecture or option.key == current:
                continue
            q = self.q(application, option)
            if q <= q_current:
                continue
            have_u = self.ledger.total[(application, option.key)]
            n = math.ceil(target / q - _EPS) - have_u
            if n <= 0:
                continue
            kept = option.cost_per_hour * have_u
            options.append((self.cost(option, n) - (running_cost - kept), 1, option, n, "upgrade"))
        if not options:
            return False
        _, _, option, n, kind = min(options, key=lambda o: (o[0], o[1], o[2].key))
        reason = f"{kind}: headroom below {thr:g} on {worker.worker_id}, {target / thr:.1f} rows/s"
        self.place(option, application, n, prefer=worker.worker_id, reason=reason)
        if kind == "upgrade":
            self.replace_group(application, architecture, option.key, self.ledger.total[(application, option.key)])
        return True

    def scale_down(self, worker: WorkerStatus, application: str, architecture: str) -> bool:
        thr = self.cfg.scale_down_threshold
        keys = self.group_keys(application, architecture)
        if any(self.ledger.coming[(application, k)] > 0 for k in keys):
            return False
        target = self.group_load(application, keys) * thr
        have = self.capacity(application, keys)
        here = [k for k in keys if self.ledger.on_worker[(worker.worker_id, application, k)] > 0]
        if not here:
            return False
        candidates = []
        if self.app_instances(application) > 1:
            for k in here:
                option = self.catalogue.option[k]
                if have - self.q(application, option) >= target - _EPS:
                    candidates.append((self.cost(option, -1), 0, k, "remove", k))
        running_cost = sum(self.catalogue.option[k].cost_per_hour * self.ledger.total[(application, k)] for k in keys)
        for option in self.eligible(application):
            if option.architecture != architecture or option.key in keys:
                continue
            n = max(1, math.ceil(target / self.q(application, option) - _EPS))
            objective = self.cost(option, n) - running_cost
            if objective < -_EPS:
                candidates.append((objective, 1, option.key, "downgrade", max(here, key=lambda k: (
                    self.ledger.on_worker[(worker.worker_id, application, k)], k))))
        if not candidates:
            return False
        objective, _, key, kind, victim = min(candidates)
        if objective >= -_EPS:
            return False
        candidate = (worker.worker_id, application, architecture, kind, key)
        since = self.owner._since.setdefault(candidate, self.now)
        option = self.catalogue.option[victim]
        if self.now - since < self.cfg.scale_down_wait_s(option.load_s, self.catalogue.worker_type[option.device].kind):
            self.seen.add(candidate)
            return False
        if kind == "remove":
            self.unload(worker.worker_id, key, application, f"remove a replica: {target / thr:.1f} rows/s fits")
        else:
            option = self.catalogue.option[key]
            n = max(1, math.ceil(target / self.q(application, option) - _EPS))
            self.place(option, application, n, prefer=worker.worker_id,
                       reason=f"downgrade: {target / thr:.1f} rows/s costs less on {key[0]} on {key[1]}")
            self.replace_group(application, architecture, key, n)
        return True
