"""How large a batch to make from a queue whose queries have deadlines: one rule for every policy that
batches queued queries behind the one it chose (INFaaS, Kairos' ``batch_queries``).

A batch limited to what its head's deadline allows shrinks to a row at a time once a backlog brings the
heads near their deadlines, and then never catches up; one as large as the worker takes outlasts every
deadline in it. The batch that finishes the most of its queries in time does neither.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["most_in_time"]


def most_in_time(rows: Sequence[int], left_ms: Sequence[float],
                 latency_ms: Callable[[int], float | None]) -> tuple[int, int]:
    """How many of the queued queries, in order, to batch so that the most of them finish in time, and how
    many of them do.

    Parameters
    ----------
    rows : each query's rows, the chosen one first.
    left_ms : the compute time each has left.
    latency_ms : a batch of so many rows takes this long (None: it cannot run).

    Returns
    -------
    (int, int)
        The size: at least 1 (the first query goes, whatever its deadline); the fewer on a tie. The first may be made
        late when that finishes more of the others in time: in a backlog, holding every batch to the
        oldest query's deadline serves fewer queries in time than the backlog's arrivals.

    Examples
    --------
    >>> most_in_time([1, 1, 1], [50.0, 50.0, 5.0], lambda n: 10.0 * n)
    (2, 2)
    >>> most_in_time([1, 1, 1], [5.0, 50.0, 50.0], lambda n: 10.0 * n)
    (3, 2)
    """
    best, most, total = 1, 0, 0
    for size, (query_rows, _) in enumerate(zip(rows, left_ms), 1):
        total += query_rows
        latency = latency_ms(total)
        if latency is None:
            break
        in_time = sum(left >= latency for left in left_ms[:size])
        if in_time > most:
            best, most = size, in_time
    return best, most
