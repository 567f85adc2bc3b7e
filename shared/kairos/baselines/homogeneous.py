"""The best homogeneous reference (Kairos §8.1): as many base instances as the budget buys.

Its measured throughput is scaled up by ``budget / (u * price)`` to compensate for the unspent budget;
Kairos's own slack is not compensated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from shared.kairos.upper_bound import BUDGET_TOL


@dataclass(frozen=True, slots=True)
class HomogeneousFleet:
    count: int
    #: multiply the fleet's measured throughput by this to credit the unspent budget
    scale: float


def homogeneous_fleet(base_price: float, budget: float) -> HomogeneousFleet:
    """``u = floor(budget / price)`` base instances and the budget scale factor.

    Examples
    --------
    >>> homogeneous_fleet(0.526, 2.5)
    HomogeneousFleet(count=4, scale=1.188212927756654)
    """
    if not base_price > 0:
        raise ValueError(f"`base_price` must be > 0, got {base_price}")
    count = math.floor((budget + BUDGET_TOL) / base_price)
    if count < 1:
        raise ValueError(f"`budget` {budget} buys no base instance at {base_price}/h")
    return HomogeneousFleet(count, budget / (count * base_price))
