"""Priority classes in front of every policy: a higher class is served first, a lower one shed first.

Policies see one queue in the order queries were shown to them, and none of them knows classes. So the
core shows a policy a query of a lower class only while the work already shown would keep the fleet busy
for at most ``hold_share`` of the SLO of the higher classes: a query of a higher class, always shown at
once, then waits behind at most that much lower-class work, however many lower-class queries wait
behind the gate. While the fleet keeps up, nothing waits there long; under overload the lower classes wait
there, the newest of the highest of them shown first whenever the shown work falls below the bound (the
oldest have the least time left, and a policy that sizes batches by the SLO alone would answer them late),
and each one that can no longer start in time is shed, answered ``dropped`` with why. A higher class keeps its
SLO as long as the fleet can serve that class alone.

A class is held back only while a higher class of its application is about: one of its queries was
admitted within ``memory_s``. With one class (every query of the default class, say) nothing is ever held,
and the core serves exactly as without classes. The first query of a higher class after a quiet spell
longer than ``memory_s`` may meet a full queue: the gate closes behind it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from schemas import DEFAULT_PRIORITY


@dataclass(slots=True)
class _Seen:
    at_s: float
    slo_ms: float


class PriorityGate:
    """Which classes of each application are about, and how much lower-class work may be shown.

    Pure: the core tells it each admission (`seen`) and asks it for a class's bound (`bound_s`)."""

    def __init__(self, *, hold_share: float, memory_s: float, defaults: Mapping[str, int]) -> None:
        #: the most lower-class work shown to the policy, as a share of the tightest SLO of a higher class about
        self.hold_share = hold_share
        #: a class is about for this long after its latest query was admitted
        self.memory_s = memory_s
        #: application -> the class of its queries that name none (else `DEFAULT_PRIORITY`)
        self.defaults = dict(defaults)
        #: application -> class -> its latest admission and that query's SLO
        self._seen: dict[str, dict[int, _Seen]] = {}

    def class_of(self, application: str, priority: int | None) -> int:
        """A query's class: the one it names, else its application's default."""
        return priority if priority is not None else self.defaults.get(application, DEFAULT_PRIORITY)

    def seen(self, application: str, priority: int, slo_ms: float, now_s: float) -> None:
        classes = self._seen.setdefault(application, {})
        latest = classes.get(priority)
        if latest is None:
            classes[priority] = _Seen(now_s, slo_ms)
        else:
            latest.at_s, latest.slo_ms = now_s, slo_ms

    def bound_s(self, application: str, priority: int, now_s: float) -> float:
        """The most shown work (seconds of the fleet's time) a query of ``priority`` may join: a share of the
        tightest SLO of the higher classes about, or infinite when none is (it is never held)."""
        slos = self._higher_about(application, priority, now_s).values()
        return self.hold_share * min(slos) / 1000.0 if slos else math.inf

    def higher_about(self, application: str, priority: int, now_s: float) -> list[int]:
        """The higher classes of ``application`` about now, highest first (for a shed query's reason)."""
        return sorted(self._higher_about(application, priority, now_s))

    def _higher_about(self, application: str, priority: int, now_s: float) -> dict[int, float]:
        """Class -> latest SLO of each class of ``application`` above ``priority`` that is about now."""
        horizon = now_s - self.memory_s
        return {higher: seen.slo_ms for higher, seen in self._seen.get(application, {}).items()
                if higher < priority and seen.at_s >= horizon}
