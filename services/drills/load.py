"""A steady query stream and the ledger of what came back, per query id."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, Field

from schemas import Query, Result, ResultStatus
from shared.adapters.client import MeridianClient
from shared.settings import Settings


class DrillOutcome(BaseModel):
    """What the client saw. ``lost`` must be 0; duplicates are counted (the client suppresses them)."""

    sent: int
    answered: int
    dropped: int
    rejected: int
    errors: int
    #: queries with no final result by the end of the settle time
    lost: int
    #: extra results for a query id that reached the client (it suppresses them; the wire carried them)
    duplicates_seen_by_client: int
    #: from the fault to the last disturbed result (not ``ok``, or slower than 3x the p99 before the
    #: fault); 0 when nothing was disturbed, None when queries were lost
    recovery_s: float | None
    #: from the repair (the broken part healthy again) to the last disturbed result; 0 when the
    #: disturbance ended before the repair, None when queries were lost
    recovery_after_repair_s: float | None = None
    #: from the repair to the first ``ok`` received after it (a restarted process serving again)
    first_ok_after_repair_s: float | None = None
    #: the client -> scheduler hop (the scheduler's receipt less the client's send), its median in each
    #: second of receipt after the recovery, at its highest: a path left slow after the disturbance shows here
    longest_client_hop_p50_ms_after_recovery: float | None = None
    #: answered ``ok`` but after their SLO, counted at the client
    late: int = 0
    #: answered within their SLO, of those sent
    within_slo_fraction: float
    notes: dict[str, int | float | str] = Field(default_factory=dict)
    #: per second since the first send, as the client saw it: ``t_s``, ``sent``, ``goodput`` (``ok``
    #: within SLO, by the second received), ``late`` and ``dropped``; a drill may add its own samples
    series: dict[str, list[float]] = Field(default_factory=dict)


@dataclass
class SteadyLoad:
    """Sends ``make_query()`` at ``rate_qps`` from a thread for ``duration_s``, remembering send times."""

    client: MeridianClient
    make_query: Callable[[], Query]
    rate_qps: float
    duration_s: float
    sent_at: dict[str, float] = field(default_factory=dict)
    slo_ms: dict[str, float] = field(default_factory=dict)

    def run(self) -> None:
        start = time.monotonic()
        count = int(self.rate_qps * self.duration_s)
        for k in range(count):
            delay = start + k / self.rate_qps - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            query = self.client.send(self.make_query())
            self.sent_at[query.query_id] = query.sent_at
            self.slo_ms[query.query_id] = query.slo_ms
        self.client.flush()


def run_drill(settings: Settings, make_query: Callable[[], Query], *, rate_qps: float, duration_s: float,
              fault_at_s: float, inject: Callable[[], None], settle_s: float = 60.0) -> DrillOutcome:
    """Drive the load, call ``inject`` at ``fault_at_s`` (it blocks while the fault lasts: its return is the
    repair), then wait up to ``settle_s`` after the last send for every final result."""
    received: dict[str, float] = {}
    with MeridianClient(settings, on_result=lambda result, at: received.setdefault(result.query_id, at)) as client:
        load = SteadyLoad(client, make_query, rate_qps, duration_s)
        sender = threading.Thread(target=load.run, name="steady-load")
        sender.start()
        time.sleep(fault_at_s)
        fault_s = time.time()
        inject()
        repaired_s = time.time()
        sender.join()
        client.wait_for(list(load.sent_at), timeout_s=settle_s)
        results = {qid: result for qid, (result, _) in client.results.items() if qid in load.sent_at}
        duplicates = client.duplicates
    return summarize(load.sent_at, load.slo_ms, results, received, duplicates, fault_s, repaired_s)


def summarize(sent_at: dict[str, float], slo_ms: dict[str, float], results: dict[str, Result],
              received: dict[str, float], duplicates: int, fault_s: float,
              repaired_s: float | None = None) -> DrillOutcome:
    """The ledger as counts (pure, so it is unit-tested).

    Examples
    --------
    >>> from schemas import HopTimestamps
    >>> def ok(qid): return Result(query_id=qid, status=ResultStatus.OK, timestamps=HopTimestamps())
    >>> sent, slo = {"a": 0.0, "b": 2.0, "c": 3.0}, {"a": 500.0, "b": 500.0, "c": 500.0}
    >>> out = summarize(sent, slo, {"a": ok("a"), "b": ok("b")}, {"a": 0.1, "b": 4.0}, 0, 1.0)
    >>> out.answered, out.lost, out.recovery_s
    (2, 1, None)
    >>> summarize(sent, slo, {q: ok(q) for q in sent}, {"a": 0.1, "b": 4.0, "c": 3.1}, 0, 1.0).recovery_s
    3.0
    """
    statuses = [r.status for r in results.values()]
    latency_s = {qid: received[qid] - sent_at[qid] for qid in results if qid in received}
    normal = [latency_s[qid] for qid in latency_s if received[qid] < fault_s]
    threshold_s = max(0.1, 3 * float(np.quantile(normal, 0.99))) if normal else 0.1
    disturbed = [received[qid] for qid, r in results.items() if qid in received and received[qid] >= fault_s
                 and (r.status is not ResultStatus.OK or latency_s[qid] > threshold_s)]
    last_disturbed = max(disturbed, default=fault_s)
    recovery_s = None if len(results) < len(sent_at) else round(last_disturbed - fault_s, 3)
    after_repair = (None if recovery_s is None or repaired_s is None
                    else round(max(0.0, last_disturbed - repaired_s), 3))
    oks_after_repair = [received[qid] for qid, r in results.items()
                        if r.status is ResultStatus.OK and qid in received and repaired_s is not None
                        and received[qid] >= repaired_s]
    first_ok = None if not oks_after_repair else round(min(oks_after_repair) - repaired_s, 3)
    in_slo = sum(1 for qid, r in results.items() if r.status is ResultStatus.OK and qid in received
                 and (received[qid] - sent_at[qid]) * 1000.0 <= slo_ms[qid])
    answered = statuses.count(ResultStatus.OK)
    return DrillOutcome(
        series=per_second(sent_at, slo_ms, results, received),
        sent=len(sent_at), answered=answered, late=answered - in_slo, dropped=statuses.count(ResultStatus.DROPPED),
        rejected=statuses.count(ResultStatus.REJECTED), errors=statuses.count(ResultStatus.ERROR),
        lost=len(sent_at) - len(results), duplicates_seen_by_client=duplicates, recovery_s=recovery_s,
        recovery_after_repair_s=after_repair, first_ok_after_repair_s=first_ok,
        longest_client_hop_p50_ms_after_recovery=longest_hop_p50_ms(results.values(), after_s=last_disturbed),
        within_slo_fraction=round(in_slo / len(sent_at), 4) if sent_at else 0.0)


def longest_hop_p50_ms(results: Iterable[Result], *, after_s: float) -> float | None:
    """The highest per-second median of the client -> scheduler hop, over the seconds of the scheduler's
    receipt after ``after_s`` (None: no result says both times).

    Examples
    --------
    >>> from schemas import HopTimestamps
    >>> def at(sent, got): return Result(query_id="q", status=ResultStatus.OK,
    ...                                  timestamps=HopTimestamps(client_sent=sent, scheduler_received=got))
    >>> longest_hop_p50_ms([at(0.0, 0.9), at(10.0, 10.002), at(10.5, 10.504), at(11.0, 11.03)], after_s=5.0)
    30.0
    """
    by_second: dict[int, list[float]] = {}
    for result in results:
        sent, got = result.timestamps.client_sent, result.timestamps.scheduler_received
        if sent is not None and got is not None and got > after_s:
            by_second.setdefault(int(got - after_s), []).append((got - sent) * 1000.0)
    return round(max(float(np.median(hops)) for hops in by_second.values()), 3) if by_second else None


def per_second(sent_at: dict[str, float], slo_ms: dict[str, float], results: dict[str, Result],
               received: dict[str, float]) -> dict[str, list[float]]:
    """Sends per second, and answers per second of receipt: good (``ok`` in SLO), late, dropped.

    Examples
    --------
    >>> from schemas import HopTimestamps
    >>> ok = Result(query_id="a", status=ResultStatus.OK, timestamps=HopTimestamps())
    >>> per_second({"a": 0.0, "b": 0.5}, {"a": 100.0, "b": 100.0}, {"a": ok, "b": ok}, {"a": 0.05, "b": 1.2})
    {'t_s': [0.0, 1.0], 'sent': [2, 0], 'goodput': [1, 0], 'late': [0, 1], 'dropped': [0, 0]}
    """
    if not sent_at:
        return {}
    start = min(sent_at.values())
    end = max([*sent_at.values(), *received.values()])
    seconds = int(end - start) + 1
    series = {name: [0] * seconds for name in ("sent", "goodput", "late", "dropped")}
    for sent in sent_at.values():
        series["sent"][int(sent - start)] += 1
    for qid, result in results.items():
        if qid not in received:
            continue
        second = int(received[qid] - start)
        if result.status is ResultStatus.DROPPED:
            series["dropped"][second] += 1
        elif result.status is ResultStatus.OK:
            in_slo = (received[qid] - sent_at[qid]) * 1000.0 <= slo_ms[qid]
            series["goodput" if in_slo else "late"][second] += 1
    return {"t_s": [float(k) for k in range(seconds)], **series}
