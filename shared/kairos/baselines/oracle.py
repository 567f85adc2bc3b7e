"""ORCL, the infeasible reference (Kairos §7): serve a known, size-sorted query sequence with no waiting.

Whenever a base instance frees up it takes the largest remaining query; an auxiliary instance takes the
smallest remaining one, but only if that meets the QoS on it; otherwise it retires (the rest are larger).
Throughput = number of queries / makespan. The Oracle figure is the best over all configurations.
"""
from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from shared.kairos.table import LatencyTable


@dataclass(frozen=True, slots=True)
class OracleResult:
    throughput_qps: float
    makespan_s: float
    #: queries served by auxiliary instances
    num_on_auxiliary: int


def oracle_throughput(
    batch_sizes: np.ndarray,
    counts: Mapping[str, int],
    table: LatencyTable,
    *,
    qos_ms: float,
    base_devices: Collection[str],
) -> OracleResult:
    """Two pointers over the sorted sizes, instances taking work in order of when they become free."""
    sizes = np.sort(np.asarray(batch_sizes))
    if len(sizes) == 0:
        raise ValueError("`batch_sizes` must not be empty")
    if not any(counts.get(d, 0) for d in base_devices):
        raise ValueError("ORCL needs at least one base instance to serve the large queries")
    bucket = table.bucket(sizes)
    latency = {d: table.latency_ms[table.index(d)][bucket] for d, c in counts.items() if c}
    fleet = [device for device, count in counts.items() for _ in range(count)]
    free = [(0.0, order, device) for order, device in enumerate(fleet)]
    heapq.heapify(free)
    lo, hi, on_aux, makespan = 0, len(sizes) - 1, 0, 0.0
    while lo <= hi:
        t, order, device = heapq.heappop(free)
        if device in base_devices:
            t += latency[device][hi]
            hi -= 1
        elif latency[device][lo] <= qos_ms:
            t += latency[device][lo]
            lo += 1
            on_aux += 1
        else:
            continue  # retires: every remaining query violates QoS here
        makespan = max(makespan, t)
        heapq.heappush(free, (t, order, device))
    return OracleResult(len(sizes) / (makespan / 1000.0), makespan / 1000.0, on_aux)
