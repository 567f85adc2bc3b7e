"""The words of a reason: durations as a person would write them (`850 ms`, `12.3 s`, `365 days`), a
reason's first clause, and its kind, to count reasons by."""
from __future__ import annotations

import re


def duration(seconds: float) -> str:
    """
    Examples
    --------
    >>> [duration(s) for s in (0.0004, 0.85, 12.34, 5400.0, 31_536_000.0)]
    ['0.4 ms', '850 ms', '12.3 s', '1.5 h', '365 days']
    """
    if seconds < 1.0:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 120.0:
        return f"{seconds:.3g} s"
    if seconds < 2 * 86_400.0:
        return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds / 60:.3g} min"
    return f"{seconds / 86_400:.3g} days"


def reason_clause(reason: str) -> str:
    """A reason's first clause, its numbers as they are.

    Examples
    --------
    >>> reason_clause("would miss its deadline by 2.76 ms: sent 288 ms ago with a 300 ms SLO")
    'would miss its deadline by 2.76 ms'
    """
    return reason.split("; ")[0].split(": sent")[0]


def reason_kind(reason: str) -> str:
    """What kind of reason it is: its first clause, numbers as ``n``.

    Examples
    --------
    >>> reason_kind("would miss its deadline by 2.76 ms: sent 288 ms ago with a 300 ms SLO")
    'would miss its deadline by n ms'
    """
    return re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "n", reason_clause(reason))
