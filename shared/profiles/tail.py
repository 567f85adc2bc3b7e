"""Profiles at a quantile of their measured samples: what a deadline can count on, where the median cannot.

A measured profile's ``batch_latency_ms`` is the median of repeated runs; some pairs have heavy tails (an
EfficientNet-Lite1 batch of 4 on ``cpu-2t`` took 61 to 245 ms), and emulated workers replay those samples.
A policy that sizes batches against deadlines on the median misses whenever the tail comes.
"""
from __future__ import annotations

import numpy as np

from shared.profiles.format import ProfileSet

__all__ = ["at_quantile"]


def at_quantile(profiles: ProfileSet, quantile: float) -> ProfileSet:
    """Each profiled batch size's latency set to ``quantile`` of its measured samples (kept where a size has
    none); the samples themselves are kept.

    Examples
    --------
    >>> from shared.profiles.format import DeviceType, VariantProfile
    >>> p = ProfileSet(source="t", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.0)],
    ...     variants=[VariantProfile(variant="a", family="f", device="cpu", accuracy=0.9, max_batch=2,
    ...                              batch_latency_ms={1: 2.0, 2: 3.0}, latency_samples_ms={1: [1.0, 2.0, 9.0]})])
    >>> at_quantile(p, 0.5).variants[0].batch_latency_ms
    {1: 2.0, 2: 3.0}
    """
    if not 0 < quantile <= 1:
        raise ValueError(f"`quantile` must be in (0, 1], got {quantile}")
    variants = []
    for profile in profiles.variants:
        samples = profile.latency_samples_ms or {}
        latency = {b: float(np.quantile(samples[b], quantile)) if samples.get(b) else ms
                   for b, ms in profile.batch_latency_ms.items()}
        variants.append(profile if latency == profile.batch_latency_ms
                        else profile.model_copy(update={"batch_latency_ms": latency}))
    return profiles.model_copy(update={"variants": variants})
