"""The scheduler's handlers alone, without faust or a broker: a stand-in publisher and stand-in events.

A query's message is acknowledged only once what answers it was written; a message that does not parse
is answered ``rejected`` under its position and copied to the dead letters; queries read one after another
are decided in one step.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from schemas import Query, WorkerHeartbeat, position
from services.scheduler.app import build_context, make_core
from services.scheduler.handlers import CREATE_TIME, SchedulerHandlers
from services.scheduler.switching import PolicySwitcher
from shared.adapters import topics
from shared.catalogue import Catalogue
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.settings import Settings

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 1000.0},
    variants=[VariantProfile(variant="small", family="fam", device="cpu", accuracy=0.9,
                             batch_latency_ms={1: 1.0, 2: 1.5, 4: 2.0, 8: 4.0}, max_batch=8)])


class WrittenLater:
    """Publishes nothing: keeps each send, and resolves its future when told (a delivery report)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, asyncio.Future[None]]] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[None]:
        written = asyncio.get_running_loop().create_future()
        self.sent.append((topic, value, written))
        return written

    def deliver_all(self) -> None:
        for _, _, written in self.sent:
            if not written.done():
                written.set_result(None)


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: float
    timestamp_type: int = CREATE_TIME


@dataclass
class Event:
    value: bytes
    message: Message
    acked: int = field(default=0)

    def ack(self) -> None:
        self.acked += 1


def query_event(value: bytes, offset: int) -> Event:
    return Event(value, Message(topics.QUERIES, 0, offset, time.time()))


async def handlers() -> tuple[SchedulerHandlers, WrittenLater]:
    settings = Settings(scheduler_policy="fcfs")
    core = make_core(settings, Catalogue(PROFILES, {"alpha": ["fam"]}))
    publisher = WrittenLater()
    switcher = PolicySwitcher(core, feeds=set(), context=build_context(settings))
    handling = SchedulerHandlers(settings, core, publisher, switcher=switcher, metadata=None)
    await handling.take_over(set())
    await handling.on_worker_event(WorkerHeartbeat(worker_id="w1", device="cpu", emulated=True, variants=["small"],
                                                   max_batch=8, inflight=0, busy_fraction=0.0, price_per_hour=0.1,
                                                   at=time.time()))
    return handling, publisher


def test_a_query_is_dispatched_and_acknowledged_once_its_batch_is_written() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        query = Query(query_id="q1", application="alpha", slo_ms=1000.0, batch_size=1, sent_at=time.time())
        event = query_event(query.model_dump_json().encode(), 7)
        await handling.on_query(event)
        await asyncio.sleep(0)  # the step runs once the loop is free
        (topic, value, _), = [s for s in publisher.sent if s[0] == topics.dispatch_topic("w1")]
        batch = json.loads(value)
        assert [q["query_id"] for q in batch["queries"]] == ["q1"]
        assert batch["queries"][0]["query_position"] == position(topics.QUERIES, 0, 7)
        await asyncio.sleep(0)
        assert event.acked == 0, "not acknowledged before the batch is written"
        publisher.deliver_all()
        await asyncio.sleep(0)
        assert event.acked == 1

    asyncio.run(scenario())


def test_a_message_that_does_not_parse_is_rejected_under_its_position_with_a_dead_letter() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        event = query_event(b'{"query_id": "q2", "application": ', 3)
        await handling.on_query(event)
        by_topic = {topic: json.loads(value) for topic, value, _ in publisher.sent}
        result = by_topic[topics.results_topic(None)]
        assert result["status"] == "rejected" and result["query_id"] == position(topics.QUERIES, 0, 3)
        assert by_topic[topics.DEAD_LETTER]["offset"] == 3
        publisher.deliver_all()
        await asyncio.sleep(0)
        assert event.acked == 1, "a final answer acknowledges the message"

    asyncio.run(scenario())


def test_queries_read_one_after_another_are_decided_in_one_step() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        for offset in range(3):
            query = Query(query_id=f"q{offset}", application="alpha", slo_ms=1000.0, batch_size=1, sent_at=time.time())
            await handling.on_query(query_event(query.model_dump_json().encode(), offset))
        assert not publisher.sent, "nothing decided while queries are still being read"
        await asyncio.sleep(0)
        batches = [json.loads(value) for topic, value, _ in publisher.sent if topic == topics.dispatch_topic("w1")]
        assert [[q["query_id"] for q in b["queries"]] for b in batches] == [["q0", "q1", "q2"]]

    asyncio.run(scenario())
