"""Which result answers which of a client's queries: the client library's bookkeeping, without its I/O.

Query ids are the clients' to choose, so another sender may claim one of a client's. Every result names
the query message it answers (``Result.query_position``), and the producer's delivery report tells the
client where its own message landed: a result naming that position is the answer to the client's query,
whatever arrived first, and any other result for the id is kept apart in ``refusals``.
"""
from __future__ import annotations

from schemas import Result

ResultAt = tuple[Result, float]


class Answers:
    """The first answer per query id (``results``), the results kept apart (``refusals``), and the repeats
    suppressed (``duplicates``). Not thread-safe: the client holds its lock around every call.

    ``own_only``: keep nothing for queries this client did not send (a long-running reader of a results
    topic that others' answers share, like the gateway, which also lets go of each query it answered: `forget`).
    """

    def __init__(self, *, own_only: bool = False) -> None:
        self.own_only = own_only
        #: results for no query of this client's, not kept (``own_only``)
        self.ignored = 0
        self.results: dict[str, ResultAt] = {}
        #: query id -> results for it not taken as its answer: refusals of messages that claimed it, and
        #: answers to messages other than this client's
        self.refusals: dict[str, list[Result]] = {}
        self.duplicates = 0
        #: the ids this client sent, and where each of its messages landed (position -> id, and back)
        self._sent: set[str] = set()
        self._mine: dict[str, str] = {}
        self._position_of: dict[str, str] = {}
        #: sent and not yet reported delivered: their results wait in ``_early`` for the report
        self._early: dict[str, list[ResultAt]] = {}

    def sending(self, query_id: str) -> None:
        """The client sends a query with this id: whatever was taken for it before belongs to another's
        message (this client's own earlier answer excepted: a re-sent id keeps its first answer)."""
        taken = self.results.get(query_id)
        if taken is not None and taken[0].query_position not in self._mine:
            del self.results[query_id]
            self.refusals.setdefault(query_id, []).append(taken[0])
        self._sent.add(query_id)
        self._early.setdefault(query_id, [])

    def delivered(self, query_id: str, position: str | None) -> list[ResultAt]:
        """Its delivery report (``position`` None: never delivered, so no result is its answer); returns the
        results that waited for it, to `keep` now."""
        if position is not None and query_id in self._sent:
            self._mine[position] = query_id
            self._position_of[query_id] = position
        return self._early.pop(query_id, [])

    def keep(self, result: Result, received: float) -> Result | None:
        """File ``result``; returns it (as the answer to the client's query id) if it is a query's first answer."""
        owner = self._mine.get(result.query_position) if result.query_position is not None else None
        if owner is None and result.query_id in self._early:
            self._early[result.query_id].append((result, received))
            return None
        if owner is None and (result.query_id in self._sent or result.claimed_query_id is not None
                              or "/" in result.query_id):
            claimed = result.claimed_query_id or result.query_id
            if self.own_only and claimed not in self._sent:
                self.ignored += 1
            else:
                self.refusals.setdefault(claimed, []).append(result)
            return None
        if owner is None and self.own_only:
            self.ignored += 1
            return None
        if owner is None:  # a query not sent by this client (another client's, or sent raw): as it says
            owner = result.query_id
        elif owner != result.query_id:  # this client's own message, refused under its position
            result = result.model_copy(update={"query_id": owner})
        if owner in self.results:
            self.duplicates += 1
            return None
        self.results[owner] = (result, received)
        return result

    def forget(self, query_id: str) -> None:
        """Keep nothing more of ``query_id``: its answer, its message's position, what was kept apart for it.
        A result for it from now on is another's (with ``own_only``, ignored)."""
        self.results.pop(query_id, None)
        self.refusals.pop(query_id, None)
        self._sent.discard(query_id)
        self._early.pop(query_id, None)
        position = self._position_of.pop(query_id, None)
        if position is not None:
            del self._mine[position]
