"""The scheduler's messages, made from what the serving core decided.

The core keeps each admitted query as its payload (`Received`: the `Query`, its message's position and
its binary section, a slice of the message as read); here it becomes the `QueryWork` of a dispatched batch,
whose message carries the queries' binary sections one after another, never decoded, or the `Result` of
a query the scheduler answers itself (rejected, dropped, or failed when its batch could not be sent).
Every answer names the position of the message it answers.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from schemas import DispatchBatch, HopTimestamps, Query, QueryWork, Result, ResultStatus, wire
from shared.serving import Dispatch, Queued


class Received(NamedTuple):
    """An admitted query and where its message was read: what its answer names."""

    query: Query
    position: str
    #: the binary data its inputs declare (`schemas.wire`), as read
    binary: memoryview


def rejected(query_id: str, reason: str, *, position: str, application: str | None = None,
             timestamps: HopTimestamps | None = None) -> Result:
    return Result(query_id=query_id, query_position=position, application=application,
                  status=ResultStatus.REJECTED, reason=reason, timestamps=timestamps or HopTimestamps())


def rejected_at(position: str, reason: str, *, claimed_query_id: str | None, application: str | None = None) -> Result:
    """The rejection of a message whose query id cannot be trusted, under the message's position."""
    return Result(query_id=position, query_position=position, claimed_query_id=claimed_query_id or None,
                  application=application, status=ResultStatus.REJECTED, reason=reason, timestamps=HopTimestamps())


def dropped(item: Queued, reason: str, now_s: float) -> Result:
    query, position, _ = item.payload
    return Result(query_id=query.query_id, query_position=position, application=query.application,
                  status=ResultStatus.DROPPED, priority=item.pending.priority, reason=reason,
                  timestamps=HopTimestamps(client_sent=query.sent_at, scheduler_received=item.admitted_s,
                                           result_sent=now_s))


def failed(item: Queued, reason: str, now_s: float) -> Result:
    """The answer of a query whose batch could not be sent."""
    query, position, _ = item.payload
    return Result(query_id=query.query_id, query_position=position, application=query.application,
                  status=ResultStatus.ERROR, priority=item.pending.priority, reason=reason,
                  timestamps=HopTimestamps(client_sent=query.sent_at, scheduler_received=item.admitted_s,
                                           result_sent=now_s))


def dispatch_batch(dispatch: Dispatch) -> DispatchBatch:
    return DispatchBatch(
        batch_id=dispatch.batch_id, worker_id=dispatch.worker_id, incarnation=dispatch.incarnation,
        variant=dispatch.variant, queries=[_work(item, dispatch.at_s) for item in dispatch.items])


def dispatch_value(dispatch: Dispatch) -> bytes:
    """The batch's Kafka value: its JSON, then each query's binary section as it was read."""
    batch = dispatch_batch(dispatch)
    return wire.pack(batch.model_dump_json().encode(), [item.payload.binary for item in dispatch.items])


def _work(item: Queued, dispatched_s: float) -> QueryWork:
    query, position, _ = item.payload
    return QueryWork(query_id=query.query_id, query_position=position, application=query.application,
                     batch_size=query.batch_size, slo_ms=query.slo_ms, priority=item.pending.priority,
                     inputs=query.inputs, note=item.note,
                     timestamps=HopTimestamps(client_sent=query.sent_at, scheduler_received=item.admitted_s,
                                              dispatched=dispatched_s),
                     deadline_at=item.deadline_s if math.isfinite(item.deadline_s) else None)


def reason_class(result: Result) -> str:
    """A metric label from the reason's first word (bounded: never the free text)."""
    return (result.reason or "").split(":")[0].split(" ")[0][:32] or "none"
