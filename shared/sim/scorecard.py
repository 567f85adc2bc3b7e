"""One scorecard for a served workload, live or simulated, so the two are judged by the same code.

A run is a list of query outcomes (when sent, when the client held the answer, which variant answered)
and a fleet (which device ran from when to when). `score` turns them into the numbers the papers
report: SLO attainment (answered ``ok`` within the SLO, over all queries sent), effective accuracy (the
mean accuracy of the variants that answered ``ok``, Proteus' measure), latency quantiles of the ``ok``
answers, drops (``dropped`` and ``rejected``, and lost: never answered) and the fleet's dollar cost.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel

from shared.profiles.format import ProfileSet


class Outcomes(NamedTuple):
    """Per query, in any order: its application, SLO, send time, answer time at the client (NaN if never
    answered ``ok``) and the variant that answered (``""`` if none)."""

    application: np.ndarray
    slo_ms: np.ndarray
    sent_s: np.ndarray
    answered_s: np.ndarray
    variant: np.ndarray

    def only(self, mask: np.ndarray) -> "Outcomes":
        return Outcomes(*(column[mask] for column in self))

    @classmethod
    def pooled(cls, draws: Sequence["Outcomes"]) -> "Outcomes":
        """Several draws of the same queries (a simulator's runs with different seeds) as one; score them
        with ``draws=len(draws)``."""
        return cls(*(np.concatenate(columns) for columns in zip(*draws)))


class Tenure(NamedTuple):
    """A worker's time in the fleet, in seconds on the outcomes' clock (``end_s`` None: to the end)."""

    device: str
    start_s: float
    end_s: float | None


class Scorecard(BaseModel):
    queries: int
    slo_attainment: float
    #: percent (points), as the papers give it
    effective_accuracy: float | None
    p50_ms: float | None
    p99_ms: float | None
    dropped: int
    cost_dollars: float


def accuracies(profiles: ProfileSet) -> dict[str, float]:
    """Variant -> accuracy in percent (a variant's accuracy is the same on every device)."""
    return {p.variant: 100.0 * p.accuracy for p in profiles.variants if p.accuracy is not None}


def fleet_cost(tenures: Sequence[Tenure], prices: Mapping[str, float], start_s: float, end_s: float) -> float:
    """Dollars the fleet cost over ``[start_s, end_s]``: each worker's time within it at its device's price."""
    return round(fleet_dollars_per_hour(tenures, prices, start_s, end_s) * (end_s - start_s) / 3600.0, 6)


def fleet_dollars_per_hour(tenures: Sequence[Tenure], prices: Mapping[str, float], start_s: float,
                           end_s: float) -> float:
    """The fleet's mean $/h over ``[start_s, end_s]``."""
    if not end_s > start_s:
        return 0.0
    worker_seconds = 0.0
    for tenure in tenures:
        stop = end_s if tenure.end_s is None else min(tenure.end_s, end_s)
        worker_seconds += max(0.0, stop - max(tenure.start_s, start_s)) * prices.get(tenure.device, 0.0)
    return worker_seconds / (end_s - start_s)


def score(outcomes: Outcomes, accuracy: Mapping[str, float], cost_dollars: float, *, draws: int = 1) -> Scorecard:
    """``outcomes`` may pool ``draws`` draws of the same queries (`Outcomes.pooled`): the rates and
    quantiles are over all of them, the counts per draw."""
    latency_ms = (outcomes.answered_s - outcomes.sent_s) * 1000.0
    ok = ~np.isnan(latency_ms)
    within = ok & (np.nan_to_num(latency_ms, nan=np.inf) <= outcomes.slo_ms)
    served = [accuracy[v] for v in outcomes.variant[ok] if v in accuracy]
    queries = len(outcomes.sent_s) // draws

    def quantile(q: float) -> float | None:
        return round(float(np.quantile(latency_ms[ok], q)), 3) if ok.any() else None

    return Scorecard(queries=queries, slo_attainment=round(float(within.mean()), 5) if queries else 0.0,
                     effective_accuracy=round(float(np.mean(served)), 4) if served else None,
                     p50_ms=quantile(0.5), p99_ms=quantile(0.99), dropped=round((len(ok) - int(ok.sum())) / draws),
                     cost_dollars=cost_dollars)


def longest_silence_s(answered_s: Sequence[np.ndarray], start_s: float, end_s: float) -> float:
    """The longest stretch within [start, end] without a single ``ok`` answer (of any query), the longest
    over the draws given (each an array of answer times, NaN for none): a stall of the whole path."""
    longest = 0.0
    for answers in answered_s:
        times = np.sort(answers[~np.isnan(answers) & (answers >= start_s) & (answers <= end_s)])
        longest = max(longest, float(np.max(np.diff(np.concatenate([[start_s], times, [end_s]])))))
    return round(longest, 3)


def over_time(outcomes: Outcomes, accuracy: Mapping[str, float], *, start_s: float, bin_s: float, draws: int = 1
              ) -> dict[str, list[float]]:
    """Per ``bin_s`` of send time: queries sent, SLO attainment and effective accuracy (NaN if none)."""
    if not len(outcomes.sent_s):
        return {"t_s": [], "sent": [], "slo_attainment": [], "effective_accuracy": []}
    bins = np.floor((outcomes.sent_s - start_s) / bin_s).astype(int)
    series: dict[str, list[float]] = {"t_s": [], "sent": [], "slo_attainment": [], "effective_accuracy": []}
    for b in range(int(bins.max()) + 1):
        card = score(outcomes.only(bins == b), accuracy, 0.0, draws=draws)
        series["t_s"].append(round(b * bin_s, 3))
        series["sent"].append(card.queries)
        series["slo_attainment"].append(card.slo_attainment if card.queries else math.nan)
        series["effective_accuracy"].append(math.nan if card.effective_accuracy is None else card.effective_accuracy)
    return series
