"""Throughput capacity ``P_{d,m,q}`` of a variant on a device type for a query type (Proteus §4).

A query that arrives just after a batch starts waits for that batch and then runs in the next one, so a
batch may take at most half the SLO (Nexus's observation, which Proteus adopts). The largest allowed
batch is the largest profiled batch size ``b`` with ``latency(b) < SLO / 2`` that also fits in the
device's memory; the capacity is ``b / latency(b)``. A variant with no such ``b`` may not be placed
on that device type for that query type (capacity 0).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.profiles.format import VariantProfile


def max_batch_size(
    profile: VariantProfile,
    slo_ms: float,
    *,
    batch_sizes: Iterable[int] | None = None,
    memory_mb: float | None = None,
) -> int:
    """The largest allowed batch: profiled, in ``batch_sizes``, ``latency < slo_ms / 2``, fits memory.

    ``memory_mb`` is the device's memory; the variant fits when its profiled ``peak_memory_mb``
    (measured at its largest profiled batch, so an upper bound for smaller ones) is at most that.
    Returns 0 when no batch size qualifies.

    Examples
    --------
    >>> p = VariantProfile(variant="m", family="f", device="cpu", max_batch=8,
    ...                    batch_latency_ms={1: 96.9, 2: 192.1, 4: 380.0, 8: 768.7}, peak_memory_mb=900)
    >>> max_batch_size(p, 300.0), max_batch_size(p, 400.0), max_batch_size(p, 150.0)
    (1, 2, 0)
    >>> max_batch_size(p, 400.0, memory_mb=512)
    0
    """
    if not slo_ms > 0:
        raise ValueError(f"`slo_ms` must be > 0, got {slo_ms}")
    if memory_mb is not None and profile.peak_memory_mb is not None and profile.peak_memory_mb > memory_mb:
        return 0
    allowed = None if batch_sizes is None else set(batch_sizes)
    best = 0
    for b, latency in profile.batch_latency_ms.items():
        if b <= profile.max_batch and (allowed is None or b in allowed) and latency < slo_ms / 2:
            best = max(best, b)
    return best


def peak_throughput(
    profile: VariantProfile,
    slo_ms: float,
    *,
    batch_sizes: Iterable[int] | None = None,
    memory_mb: float | None = None,
) -> float:
    """``P`` in queries per second: the largest allowed batch over its profiled latency (0 if none).

    Examples
    --------
    >>> p = VariantProfile(variant="resnet50", family="resnet", device="1080ti", max_batch=8,
    ...                    batch_latency_ms={1: 26.7, 8: 145.9})
    >>> round(peak_throughput(p, 300.0), 1)
    54.8
    """
    b = max_batch_size(profile, slo_ms, batch_sizes=batch_sizes, memory_mb=memory_mb)
    return 0.0 if b == 0 else b * 1000.0 / profile.batch_latency_ms[b]


def device_memory(memory_mb: Mapping[str, float] | None, device: str) -> float | None:
    """A device type's memory from an optional ``{device: MB}`` map (``None``: unlimited)."""
    return None if memory_mb is None else memory_mb.get(device)
