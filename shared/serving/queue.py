"""The waiting queries, with their drop deadlines and each application's backlog.

A query is either shown to the policy (``items``, in the order it was shown) or held back behind the
priority gate (``held``, `shared.serving.priorities`) until the core shows it. A query is hopeless once it
can no longer finish by its deadline: the core answers it ``dropped`` before it costs worker time. Drop
times sit in a heap, so finding the hopeless ones costs nothing while there are none, however long the queue.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shared.policy.base import PendingQuery


@dataclass(slots=True)
class Queued:
    """One admitted query and what the transport needs back when it leaves the queue."""

    pending: PendingQuery
    #: what the transport keeps for the query (the live scheduler: the `Query` message); opaque here
    payload: Any
    #: what the transport needs to acknowledge the query's message once it is dispatched or final
    ack_token: Hashable | None
    #: when the core admitted it (its ``pending.arrival_s`` is when the client sent it)
    admitted_s: float
    #: the profiled latency of its fastest candidate at its size (preparing its images included)
    fastest_s: float
    #: when its answer stops being useful: sent + its SLO (times the configured drop multiple)
    deadline_s: float
    #: past this time it cannot finish in time any more
    drop_at_s: float
    #: the earliest the work queued ahead of it at admission can be done, on the fleet that may serve it
    ahead_until_s: float = 0.0
    #: why its goals were relaxed at admission, if they were (copied into its result)
    note: str | None = None
    #: what its inputs add to its batch's message (bytes): the core bounds a batch by the sum
    payload_bytes: int = 0
    #: its rows that are encoded images, which the worker decodes and prepares before it runs them
    images: int = 0
    #: it waits behind the priority gate, not shown to the policy yet
    held: bool = False


class QueueView(Sequence[PendingQuery]):
    """The waiting queries as the policy sees them, without copying (cheap ``len``, prefix slices and
    reverse iteration)."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, Queued]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[PendingQuery]:
        return (item.pending for item in self._items.values())

    def __reversed__(self) -> Iterator[PendingQuery]:
        return (item.pending for item in reversed(self._items.values()))

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice) and index.start in (None, 0) and index.step in (None, 1) and index.stop is not None \
                and index.stop >= 0:
            return list(itertools.islice(self, index.stop))
        if isinstance(index, int) and 0 <= index:
            return next(itertools.islice(self, index, None))
        return list(self)[index]


class AdmissionQueue:
    def __init__(self) -> None:
        #: the queries shown to the policy, in the order they were shown
        self.items: dict[str, Queued] = {}
        self.view = QueueView(self.items)
        #: the queries held back behind the priority gate; and per application and class, oldest first
        self.held: dict[str, Queued] = {}
        self._held_by_class: dict[str, dict[int, dict[str, Queued]]] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        #: rows shown per application (the work ahead of a newcomer)
        self._rows: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.items) + len(self.held)

    def __contains__(self, query_id: str) -> bool:
        return query_id in self.items or query_id in self.held

    def waiting(self) -> Iterator[Queued]:
        """Every query waiting, shown or held."""
        return itertools.chain(self.items.values(), self.held.values())

    def rows_waiting(self, application: str) -> int:
        """Rows of ``application`` shown to the policy and not dispatched yet."""
        return self._rows.get(application, 0)

    def push(self, item: Queued) -> None:
        """Show a newly admitted query to the policy."""
        self.items[item.pending.query_id] = item
        self._count(item, +1)
        heapq.heappush(self._deadlines, (item.drop_at_s, next(self._seq), item.pending.query_id))

    def hold(self, item: Queued) -> None:
        """Hold a newly admitted query back behind the priority gate."""
        query = item.pending
        item.held = True
        self.held[query.query_id] = item
        self._held_by_class.setdefault(query.application, {}).setdefault(query.priority, {})[query.query_id] = item
        heapq.heappush(self._deadlines, (item.drop_at_s, next(self._seq), query.query_id))

    def held_applications(self) -> list[str]:
        return [application for application, classes in self._held_by_class.items() if any(classes.values())]

    def held_classes(self, application: str) -> list[int]:
        """The classes ``application`` has queries held of, highest (lowest number) first."""
        return sorted(priority for priority, held in self._held_by_class.get(application, {}).items() if held)

    def newest_held(self, application: str, priority: int) -> Queued | None:
        """The query of ``application`` held in class ``priority`` that arrived last, if any: of those
        held, it has the most time left."""
        held = self._held_by_class[application][priority]
        return held[next(reversed(held))] if held else None

    def show(self, query_id: str) -> Queued:
        """Show a held query to the policy, behind the queries shown before it."""
        item = self._unhold(query_id)
        item.held = False
        self.items[query_id] = item
        self._count(item, +1)
        return item

    def push_front(self, items: list[Queued]) -> None:
        """Put queries back ahead of everything waiting (a lost worker's unfinished batch)."""
        waiting = list(self.items.values())
        self.items.clear()
        for item in items + waiting:
            self.items[item.pending.query_id] = item
        for item in items:
            self._count(item, +1)
            heapq.heappush(self._deadlines, (item.drop_at_s, next(self._seq), item.pending.query_id))

    def pop(self, query_id: str) -> Queued:
        """Take a query out, shown or held."""
        item = self.items.pop(query_id, None)
        if item is None:
            return self._unhold(query_id)
        self._count(item, -1)
        return item

    def _unhold(self, query_id: str) -> Queued:
        item = self.held.pop(query_id)
        del self._held_by_class[item.pending.application][item.pending.priority][query_id]
        return item

    def pop_hopeless(self, now_s: float) -> list[Queued]:
        """Take out every query whose drop deadline is before ``now_s``."""
        out = []
        heap = self._deadlines
        while heap and heap[0][0] < now_s:
            _, _, query_id = heapq.heappop(heap)
            item = self.items.get(query_id) or self.held.get(query_id)
            if item is not None and item.drop_at_s < now_s:
                out.append(self.pop(query_id))
        if len(heap) > 64 and len(heap) > 4 * len(self):
            self._deadlines = [(i.drop_at_s, next(self._seq), i.pending.query_id) for i in self.waiting()]
            heapq.heapify(self._deadlines)
        return out

    def _count(self, item: Queued, sign: int) -> None:
        application = item.pending.application
        self._rows[application] = self._rows.get(application, 0) + sign * item.pending.batch_size

    def depth_by_application(self) -> dict[str, int]:
        """Queries waiting per application, shown or held."""
        depth: dict[str, int] = {}
        for item in self.waiting():
            depth[item.pending.application] = depth.get(item.pending.application, 0) + 1
        return depth
