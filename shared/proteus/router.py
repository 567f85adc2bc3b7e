"""Smooth weighted round-robin: a deterministic split whose every prefix tracks the weights.

Each pick adds every key's weight to its credit, takes the key with the most credit and charges it the
total weight (nginx's algorithm). Over any ``n`` picks each key is chosen within one of
``n * weight / total`` times, so a low-rate application still sees the planned split quickly, with
less variance than random routing.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping


class SmoothWeightedRouter:
    """Pick keys in proportion to positive weights.

    Examples
    --------
    >>> router = SmoothWeightedRouter({"gpu": 3.0, "cpu": 1.0})
    >>> [router.pick() for _ in range(8)]
    ['gpu', 'gpu', 'cpu', 'gpu', 'gpu', 'gpu', 'cpu', 'gpu']
    """

    __slots__ = ("_credit", "_keys", "_total", "_weights")

    def __init__(self, weights: Mapping[Hashable, float]) -> None:
        items = [(k, float(w)) for k, w in weights.items() if w > 0]
        if not items:
            raise ValueError(f"`weights` must have a positive entry, got {dict(weights)}")
        self._keys = [k for k, _ in items]
        self._weights = [w for _, w in items]
        self._credit = [0.0] * len(items)
        self._total = sum(self._weights)

    @property
    def weights(self) -> dict[Hashable, float]:
        return dict(zip(self._keys, self._weights))

    def pick(self) -> Hashable:
        credit, weights = self._credit, self._weights
        best = 0
        for i in range(len(credit)):
            credit[i] += weights[i]
            if credit[i] > credit[best]:
                best = i
        credit[best] -= self._total
        return self._keys[best]
