"""How large a batch to make from a queue whose queries have deadlines.

A batch limited to what its head's deadline allows shrinks to a row at a time once a backlog brings the
heads near their deadlines, and then never catches up; one as large as the worker takes outlasts every
deadline in it. Two rules do neither:

- `most_in_time` (INFaaS): the prefix of the queue behind the chosen query that finishes the most of its
  queries in time;
- `most_in_time_per_second` (FCFS, Kairos' ``batch_queries``): of the batch sizes, the one that finishes the
  most queries in time per second of the worker's time, made of the oldest queries it finishes in time. Per
  second, because a size a device runs slowly per row would otherwise win whenever it holds one more query
  in time, and the fleet would serve less than arrives; only those in time, because computing a query late
  makes the ones behind it late too.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

__all__ = ["most_in_time", "most_in_time_per_second"]


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


def most_in_time_per_second(rows: Sequence[int], left_ms: Sequence[float],
                            sizes: Iterable[tuple[int, float, float]]) -> list[int]:
    """Which queued queries to batch so that the most of them finish in time per second of the worker's time.

    Parameters
    ----------
    rows : each query's rows, oldest first.
    left_ms : the compute time each has left.
    sizes : ``(rows, latency_ms, finish_ms)`` per batch size, smallest first: a batch of up to so many rows
        occupies the worker ``latency_ms`` (what it serves) and is done within ``finish_ms`` (what a deadline
        can count on; at least ``latency_ms``).

    Returns
    -------
    list of int
        The chosen queries' positions, oldest first: of the sizes, the one with the most queries done within
        ``finish_ms`` per ``latency_ms`` (the smaller on a tie), filled with the oldest such queries. Empty when
        no size finishes any query in time.

    Examples
    --------
    >>> most_in_time_per_second([1] * 4, [100.0] * 4, [(1, 10.0, 10.0), (2, 12.0, 12.0), (4, 40.0, 40.0)])
    [0, 1]
    >>> most_in_time_per_second([1] * 4, [5.0, 100.0, 100.0, 100.0], [(1, 10.0, 10.0), (4, 20.0, 20.0)])
    [1, 2, 3]
    >>> most_in_time_per_second([3, 3], [100.0, 100.0], [(1, 1.0, 1.0), (4, 8.0, 8.0), (8, 10.0, 10.0)])
    [0, 1]
    >>> most_in_time_per_second([1] * 3, [100.0] * 3, [(1, 0.0, 0.0), (4, 0.0, 0.0)])  # a device not profiled yet
    [0, 1, 2]
    """
    best: list[int] = []
    best_rate = 0.0
    for size, latency_ms, finish_ms in sizes:
        chosen, total, full = [], 0, False
        for position, (query_rows, left) in enumerate(zip(rows, left_ms)):
            if left < finish_ms:
                continue
            if total + query_rows > size:
                full = True
                break
            chosen.append(position)
            total += query_rows
        rate = len(chosen) / max(latency_ms, 1e-9)  # a latency not known yet (predicted 0) costs nothing
        if rate > best_rate:
            best, best_rate = chosen, rate
        if not full:
            break  # every query in time fits already; a larger batch only ends later
    return best
