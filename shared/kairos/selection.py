"""Choosing a configuration from the ranked upper bounds without any online evaluation (Kairos §5.2).

High-UB configurations form a region, but UB order is not exact throughput order. So: if the top-3 share
the same base count, take the top-1; otherwise take the "centroid" of the top-10, the member with the
least summed squared Euclidean distance to the others (raw instance-count vectors; the paper found
cosine similarity misses the locality). Ties go to higher UB, then lower cost.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Selection:
    """Index of the chosen configuration in the *ranked* arrays, and which rule chose it."""

    index: int
    rule: str


def rank_configs(configs: np.ndarray, ubs: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Order (indices) by UB descending, then cost ascending, then count vector, for determinism."""
    counts = np.asarray(configs)
    keys = [counts[:, t] for t in range(counts.shape[1] - 1, -1, -1)] + [np.asarray(costs), -np.asarray(ubs)]
    return np.lexsort(keys)


def select_config(ranked_configs: np.ndarray, *, top_same: int = 3, top_k: int = 10) -> Selection:
    """Apply the similarity rule to configurations already sorted by `rank_configs` (column 0 = base).

    Examples
    --------
    >>> select_config(np.array([[2, 1], [2, 0], [2, 3], [1, 9]])).rule
    'top-3 share the base count'
    """
    configs = np.asarray(ranked_configs, dtype=np.float64)
    if configs.ndim != 2 or len(configs) == 0:
        raise ValueError("`ranked_configs` must be a non-empty (K, T) array")
    head = configs[:top_same]
    if np.all(head[:, 0] == head[0, 0]):
        return Selection(0, f"top-{len(head)} share the base count")
    top = configs[:top_k]
    diff = top[:, None, :] - top[None, :, :]
    spread = np.einsum("ijk,ijk->i", diff, diff)
    # argmin keeps the first minimum, i.e. the higher-ranked (higher UB, then cheaper) one
    return Selection(int(np.argmin(spread)), f"least summed squared distance within the top-{len(top)}")
