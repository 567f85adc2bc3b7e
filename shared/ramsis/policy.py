"""MS policies and the load-indexed policy set (spec §3.7), with their JSON form.

A `RamsisPolicy` maps a worker-queue state ``(n, j)`` to ``(model, batch)`` for one
(K workers, SLO, load, arrival process). A `PolicySet` holds policies for several K and loads and
answers the online question: the lowest-load policy that covers the anticipated load.

JSON (``format`` ``meridian.ramsis.policy``, ``version`` 1; `shared.adapters.ramsis_store` keeps one per Redis
hash field)::

    {"format": "meridian.ramsis.policy", "version": 1,
     "workers": K, "rate_qps": λ, "slo_ms": SLO, "device": "cpu-1t",
     "models": ["fastest", ...], "accuracy": [...], "slack_ms": [T_0 = 0, ..., SLO],
     "max_queue": N, "batching": "maximal" | "variable",
     "arrivals": {"kind": "poisson" | "gamma", "cv": 1.0},
     "model": [[m per slack bin] per n = 0..N],   # -1: wait for an arrival (n = 0)
     "batch": [[b per slack bin] per n = 0..N],
     "full_model": m,                             # n > N: serve the whole queue on this model
     "expected_accuracy": 0.99, "expected_violation": 0.001}

A whole set in one file (``python -m services.ramsis_generate --output``) is
``{"format": "meridian.ramsis.policy-set", "version": 1, "policies": [<policy>, ...]}``.
"""
from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.ramsis.arrivals import ArrivalProcess

FORMAT = "meridian.ramsis.policy"
SET_FORMAT = "meridian.ramsis.policy-set"
VERSION = 1


@dataclass(frozen=True, eq=False)
class RamsisPolicy:
    """The action of every worker-queue state, for one (K, SLO, load, arrival process)."""

    workers: int
    rate_qps: float
    slo_ms: float
    device: str
    models: tuple[str, ...]
    accuracy: tuple[float, ...]
    slack_ms: np.ndarray
    max_queue: int
    batching: str
    arrivals: ArrivalProcess
    #: (N+1, J) model index per state, -1 for the empty queue
    model: np.ndarray
    #: (N+1, J) batch size per state
    batch: np.ndarray
    full_model: int
    expected_accuracy: float
    expected_violation: float

    def __post_init__(self) -> None:
        shape = (self.max_queue + 1, len(self.slack_ms))
        if self.model.shape != shape or self.batch.shape != shape:
            raise ValueError(f"`model` and `batch` must be {shape} for `max_queue` and `slack_ms`")
        if self.model[1:].min() < 0 or self.model.max() >= len(self.models) or len(self.accuracy) != len(self.models):
            raise ValueError("`model` must index `models` (and `accuracy` match it)")

    def action(self, queued: int, slack_ms: float) -> tuple[int, int]:
        """``(model index, batch size)`` for ``queued`` > 0 queries whose earliest slack is ``slack_ms``;
        beyond ``max_queue`` the whole queue goes to ``full_model``."""
        if queued > self.max_queue:
            return self.full_model, queued
        j = int(np.clip(np.searchsorted(self.slack_ms, slack_ms, side="right") - 1, 0, len(self.slack_ms) - 1))
        return int(self.model[queued, j]), int(self.batch[queued, j])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "workers": self.workers,
            "rate_qps": self.rate_qps,
            "slo_ms": self.slo_ms,
            "device": self.device,
            "models": list(self.models),
            "accuracy": list(self.accuracy),
            "slack_ms": self.slack_ms.tolist(),
            "max_queue": self.max_queue,
            "batching": self.batching,
            "arrivals": self.arrivals.to_dict(),
            "model": self.model.tolist(),
            "batch": self.batch.tolist(),
            "full_model": self.full_model,
            "expected_accuracy": self.expected_accuracy,
            "expected_violation": self.expected_violation,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RamsisPolicy:
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ValueError(
                f"not a {FORMAT} v{VERSION} document: format {data.get('format')!r}, version {data.get('version')!r}"
            )
        return cls(
            workers=int(data["workers"]),
            rate_qps=float(data["rate_qps"]),
            slo_ms=float(data["slo_ms"]),
            device=str(data["device"]),
            models=tuple(data["models"]),
            accuracy=tuple(float(a) for a in data["accuracy"]),
            slack_ms=np.asarray(data["slack_ms"], dtype=np.float64),
            max_queue=int(data["max_queue"]),
            batching=str(data["batching"]),
            arrivals=ArrivalProcess.from_dict(data["arrivals"]),
            model=np.asarray(data["model"], dtype=np.int64),
            batch=np.asarray(data["batch"], dtype=np.int64),
            full_model=int(data["full_model"]),
            expected_accuracy=float(data["expected_accuracy"]),
            expected_violation=float(data["expected_violation"]),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> RamsisPolicy:
        return cls.from_dict(json.loads(text))


class PolicySet:
    """Policies of one application (SLO, device, models) indexed by (K, load); immutable.

    Examples
    --------
    >>> from shared.ramsis.generator import PolicyGenerator
    >>> from shared.ramsis.testing import tiny_problem
    >>> make = PolicyGenerator(tiny_problem())
    >>> policies = PolicySet([make(2, rate) for rate in (20.0, 60.0, 120.0)])
    >>> policies.lookup(2, 50.0).rate_qps, policies.lookup(2, 200.0), policies.workers
    (60.0, None, (2,))
    """

    __slots__ = ("_by_workers", "policies")

    def __init__(self, policies: Iterable[RamsisPolicy] = ()) -> None:
        unique: dict[tuple[int, float], RamsisPolicy] = {}
        for policy in policies:
            unique[(policy.workers, policy.rate_qps)] = policy  # a later policy replaces an earlier one
        ordered = tuple(sorted(unique.values(), key=lambda p: (p.workers, p.rate_qps)))
        if ordered:
            first = ordered[0]
            odd = [p for p in ordered if (p.slo_ms, p.device, p.models) != (first.slo_ms, first.device, first.models)]
            if odd:
                raise ValueError(
                    f"`policies` must share SLO, device and models; {len(odd)} differ from "
                    f"({first.slo_ms}, {first.device!r}, {list(first.models)})"
                )
        by_workers: dict[int, list[RamsisPolicy]] = {}
        for policy in ordered:
            by_workers.setdefault(policy.workers, []).append(policy)
        self.policies: tuple[RamsisPolicy, ...] = ordered
        self._by_workers = {k: tuple(v) for k, v in by_workers.items()}

    def __len__(self) -> int:
        return len(self.policies)

    @property
    def workers(self) -> tuple[int, ...]:
        """The worker counts K that have policies."""
        return tuple(sorted(self._by_workers))

    def for_workers(self, workers: int) -> tuple[RamsisPolicy, ...]:
        """The policies for K workers, by increasing load."""
        return self._by_workers.get(workers, ())

    def lookup(self, workers: int, rate_qps: float) -> RamsisPolicy | None:
        """The lowest-load policy for K workers whose load is >= ``rate_qps`` (None: none covers it)."""
        policies = self.for_workers(workers)
        i = bisect.bisect_left([p.rate_qps for p in policies], rate_qps)
        return policies[i] if i < len(policies) else None

    def highest(self, workers: int) -> RamsisPolicy | None:
        policies = self.for_workers(workers)
        return policies[-1] if policies else None

    def with_policy(self, policy: RamsisPolicy) -> PolicySet:
        return PolicySet(self.policies + (policy,))

    def to_json(self) -> str:
        return json.dumps({"format": SET_FORMAT, "version": VERSION, "policies": [p.to_dict() for p in self.policies]})

    @classmethod
    def from_json(cls, text: str | bytes) -> PolicySet:
        data = json.loads(text)
        if data.get("format") != SET_FORMAT or data.get("version") != VERSION:
            raise ValueError(f"not a {SET_FORMAT} v{VERSION} document")
        return cls(RamsisPolicy.from_dict(p) for p in data["policies"])

    def max_spacing(self, workers: int) -> float:
        """Largest expected-accuracy difference between load-adjacent policies for K workers."""
        acc = [p.expected_accuracy for p in self.for_workers(workers)]
        return float(np.max(np.abs(np.diff(acc)))) if len(acc) > 1 else 0.0
