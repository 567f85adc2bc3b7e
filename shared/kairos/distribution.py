"""What the throughput upper bound needs to know about the query-size distribution (Kairos §5.2).

For a window of recent query sizes and a latency table (spec §8.1, following the authors' artifact):

* ``Q_b = 1000 / E[Lat(base, b)]``: one base instance's standalone throughput on the full mix;
* ``s_a``: the smallest grid size whose latency on auxiliary type ``a`` exceeds ``T_qos`` (the plain
  target, as the artifact's ``vio_batch``); queries in smaller buckets meet QoS on ``a``;
* ``f(s) = P(bucket(b) < s)``, the share of "small" queries;
* ``Q_a(s) = 1000 / E[Lat(a, b) | bucket(b) < s]``;
* ``tau(s)``: the share of base busy time spent on queries below ``s``;
* ``Q_b^{s+}(s) = 1000 / E[Lat(base, b) | bucket(b) >= s] = Q_b (1 - f) / (1 - tau)``.

All ``s``-dependent values are kept at every auxiliary's ``s``, because a configuration evaluates them at
the largest ``s`` among the auxiliary types it contains.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.kairos.table import LatencyTable


@dataclass(frozen=True, slots=True)
class DistributionStats:
    """Eq. 9-15 inputs for one window; ``s`` values are grid sizes (``max_batch + 1`` = never violates)."""

    base: str
    auxiliaries: tuple[str, ...]
    q_base: float
    #: s_a per auxiliary type
    limit: dict[str, int]
    #: f(s), tau(s), Q_b^{s+}(s) at each s in `limit`
    small_fraction: dict[int, float]
    time_ratio: dict[int, float]
    q_base_large: dict[int, float]
    #: Q_a(s) per (auxiliary, s) for each s in `limit`
    q_aux: dict[tuple[str, int], float]

    def f(self, auxiliary: str) -> float:
        """The auxiliary's own small-query share (the artifact's ``small_ratio``)."""
        return self.small_fraction[self.limit[auxiliary]]


def qos_limit(table: LatencyTable, device: str, qos_ms: float) -> int:
    """Smallest grid size whose latency on ``device`` exceeds ``qos_ms``; ``max_batch + 1`` if none does."""
    over = np.nonzero(table.latency_ms[table.index(device)] > qos_ms)[0]
    return int(table.grid[over[0]]) if len(over) else table.max_batch + 1


def distribution_stats(
    batch_sizes: Sequence[int] | np.ndarray,
    table: LatencyTable,
    *,
    qos_ms: float,
    base: str,
    auxiliaries: Sequence[str],
) -> DistributionStats:
    """Compute `DistributionStats` for ``batch_sizes`` (see the module docstring)."""
    sizes, aux = _distribution_iv(batch_sizes, table, qos_ms, base, auxiliaries)
    bucket_size = table.grid[table.bucket(sizes)]
    base_lat = table.lookup(base, sizes)
    total_base = float(base_lat.sum())
    limit = {a: qos_limit(table, a, qos_ms) for a in aux}
    small_fraction, time_ratio, q_base_large, q_aux = {}, {}, {}, {}
    for s in sorted(set(limit.values())):
        small = bucket_size < s
        num_small = int(small.sum())
        small_fraction[s] = num_small / len(sizes)
        time_ratio[s] = float(base_lat[small].sum()) / total_base
        q_base_large[s] = 1000.0 / float(base_lat[~small].mean()) if num_small < len(sizes) else float("inf")
        for a in aux:
            q_aux[(a, s)] = 1000.0 / float(table.lookup(a, sizes[small]).mean()) if num_small else 0.0
    return DistributionStats(
        base=base,
        auxiliaries=aux,
        q_base=1000.0 * len(sizes) / total_base,
        limit=limit,
        small_fraction=small_fraction,
        time_ratio=time_ratio,
        q_base_large=q_base_large,
        q_aux=q_aux,
    )


def _distribution_iv(
    batch_sizes: Sequence[int] | np.ndarray,
    table: LatencyTable,
    qos_ms: float,
    base: str,
    auxiliaries: Sequence[str],
) -> tuple[np.ndarray, tuple[str, ...]]:
    sizes = np.asarray(batch_sizes)
    if sizes.ndim != 1 or len(sizes) == 0:
        raise ValueError("`batch_sizes` must be a non-empty one-dimensional sequence")
    if not qos_ms > 0:
        raise ValueError(f"`qos_ms` must be > 0, got {qos_ms}")
    aux = tuple(auxiliaries)
    for device in (base, *aux):
        table.index(device)
    if base in aux:
        raise ValueError(f"`base` {base!r} must not be among `auxiliaries`")
    return sizes, aux
