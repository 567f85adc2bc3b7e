"""`KairosPlanner`: the one-shot heterogeneous configuration choice as a `Planner` (Kairos §5.2).

From the recent query sizes of its application it computes the upper bound of every configuration within
the budget, ranks them, and picks one by the similarity rule, with no online evaluation. Re-run it when
the size distribution shifts (`BatchSizeMonitor`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.kairos.distribution import DistributionStats, distribution_stats, qos_limit
from shared.kairos.selection import Selection, rank_configs, select_config
from shared.kairos.table import LatencyTable
from shared.kairos.upper_bound import config_costs, configuration_upper_bounds, enumerate_configs
from shared.policy.base import FleetPlan, LoadSnapshot, Placement, Planner, PlanStatus
from shared.profiles.format import ProfileSet


@dataclass(frozen=True, slots=True, eq=False)
class ConfigRanking:
    """All configurations within budget, best UB first; column 0 of ``configs`` is the base type."""

    devices: tuple[str, ...]
    configs: np.ndarray
    upper_bounds: np.ndarray
    costs: np.ndarray
    stats: DistributionStats
    selection: Selection

    def counts(self, k: int) -> dict[str, int]:
        """Configuration ``k`` as ``{device: count}``, zero counts omitted, base first."""
        return {d: int(c) for d, c in zip(self.devices, self.configs[k]) if c}


class KairosPlanner(Planner):
    """Upper-bound ranking + similarity rule over every configuration within the budget.

    Parameters
    ----------
    profiles : latency profiles and device prices.
    application : the application (and, by default, the variant) this Kairos system serves.
    budget_per_hour : cost budget, $/h.
    variant : the model variant to place (default: ``application``).
    devices : device types to consider (default: all profiled for the variant).
    base : the base type (default: the cheapest per unit of throughput among types meeting the QoS for
        every query size seen, g4dn.xlarge on the paper's data).
    max_counts : per-device caps, in ``devices`` order (default: only the budget limits counts).
    qos_ms : QoS target (default: ``profiles.slo_ms[variant]``).
    xi : the auxiliary QoS limits ``s`` are the first sizes past ``xi * qos_ms``. 1 (default) is the
        artifact's ``vio_batch``; pass the dispatcher's safeguard (`KairosDispatch.xi`) so that the bound
        counts as auxiliary work only what the matcher will send there: a pair past ``xi * T_qos`` is a
        violation to it (Eq. 5), and the safeguard widens with the prediction error it observes.
    """

    name = "kairos"

    def __init__(
        self,
        profiles: ProfileSet,
        *,
        application: str,
        budget_per_hour: float,
        variant: str | None = None,
        devices: Sequence[str] | None = None,
        base: str | None = None,
        max_counts: Sequence[int] | None = None,
        qos_ms: float | None = None,
        xi: float = 1.0,
    ) -> None:
        self.application = application
        self.variant = variant or application
        #: the profiles it was made from
        self.configured = profiles
        self.table = LatencyTable.from_profiles(profiles, self.variant, devices)
        if qos_ms is None and self.variant not in profiles.slo_ms:
            raise ValueError(f"no `qos_ms` given and no SLO profiled for {self.variant!r}")
        self.qos_ms = float(qos_ms if qos_ms is not None else profiles.slo_ms[self.variant])
        if not 0 < xi <= 1:
            raise ValueError(f"`xi` must be in (0, 1], got {xi}")
        self.xi = float(xi)
        self.prices = {d: profiles.device_by_name[d].price_per_hour for d in self.table.devices}
        #: the longest boot of its machine types (unprofiled: 0)
        self.startup_s = max((profiles.device_by_name[d].startup_s or 0.0 for d in self.table.devices), default=0.0)
        self.budget = float(budget_per_hour)
        self._base = base
        if max_counts is not None and len(max_counts) != len(self.table.devices):
            raise ValueError("`max_counts` must have one entry per device")
        self._caps = dict(zip(self.table.devices, max_counts)) if max_counts is not None else None

    def update_profiles(self, profiles: ProfileSet) -> None:
        """Rank from now on with the latencies of ``profiles`` (its devices' as real workers measured them);
        the devices and their prices stay."""
        self.table = LatencyTable.from_profiles(profiles, self.variant, self.table.devices)

    def rank(self, batch_sizes: Sequence[int] | np.ndarray) -> ConfigRanking:
        """UB of every configuration for this size distribution, ranked, with the similarity choice."""
        sizes = np.asarray(batch_sizes)
        base = self._base or self._pick_base(sizes)
        aux = tuple(d for d in self.table.devices if d != base)
        devices = (base, *aux)
        stats = distribution_stats(sizes, self.table, qos_ms=self.xi * self.qos_ms, base=base, auxiliaries=aux)
        prices = [self.prices[d] for d in devices]
        caps = [self._caps[d] for d in devices] if self._caps is not None else None
        configs = enumerate_configs(prices, self.budget, max_counts=caps)
        if len(configs) == 0:
            raise ValueError(f"no configuration with a {base} instance fits ${self.budget}/h")
        ubs = configuration_upper_bounds(configs, stats)
        costs = config_costs(configs, prices)
        order = rank_configs(configs, ubs, costs)
        configs, ubs, costs = configs[order], ubs[order], costs[order]
        return ConfigRanking(devices, configs, ubs, costs, stats, select_config(configs))

    def qos_limits(self) -> dict[str, int]:
        """Each device's QoS limit s (its first violating batch size); the batch-size monitor's shift
        check compares small-query shares at these."""
        return {d: qos_limit(self.table, d, self.xi * self.qos_ms) for d in self.table.devices}

    def plan(self, load: LoadSnapshot) -> FleetPlan:
        sizes = load.batch_sizes.get(self.application, ())
        if len(sizes) == 0:
            return FleetPlan(PlanStatus.INFEASIBLE, f"no batch sizes seen for {self.application!r}")
        try:
            ranking = self.rank(sizes)
        except ValueError as exc:
            return FleetPlan(PlanStatus.INFEASIBLE, str(exc))
        return self.plan_of(ranking, ranking.selection.index, ranking.selection.rule)

    def plan_of(self, ranking: ConfigRanking, k: int, rule: str) -> FleetPlan:
        """Configuration `k` of `ranking` as a plan; `rule` says why it was chosen."""
        placements = tuple(
            Placement(device=device, variants=(self.variant,))
            for device, count in zip(ranking.devices, ranking.configs[k])
            for _ in range(int(count))
        )
        counts = ", ".join(f"{c}x{d}" for d, c in ranking.counts(k).items())
        return FleetPlan(
            status=PlanStatus.FEASIBLE,
            message=f"{counts}: UB {ranking.upper_bounds[k]:.4g} qps, rank {k + 1} of {len(ranking.configs)} ({rule})",
            placements=placements,
            routing={self.application: {self.variant: 1.0}},
            objective=float(ranking.upper_bounds[k]),
            cost_per_hour=float(ranking.costs[k]),
        )

    def _pick_base(self, sizes: np.ndarray) -> str:
        """Among the types that serve every size seen within the QoS (all of the profile's grid would rule
        out every type for one-row queries that no one batches past the QoS), the cheapest per query."""
        capable = [d for d in self.table.devices if float(self.table.lookup(d, sizes).max()) <= self.qos_ms]
        if not capable:
            raise ValueError(f"no device meets the {self.qos_ms} ms QoS for every query size seen (up to "
                             f"{int(sizes.max())} rows)")
        return min(capable, key=lambda d: self.prices[d] * float(self.table.lookup(d, sizes).mean()))

