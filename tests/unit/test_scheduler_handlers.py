"""The scheduler's handlers alone, without faust or a broker: a stand-in publisher and messages as the
query reader hands them over.

A query's message is acknowledged (its offset committable) only once what answers it was written; a
message that does not parse is answered ``rejected`` under its position and copied to the dead letters;
the queries of one poll are decided in one step.
"""
from __future__ import annotations

import asyncio
import json
import time

from schemas import Query, WorkerHeartbeat, position
from services.scheduler.app import build_context, make_core
from services.scheduler.handlers import SchedulerHandlers
from services.scheduler.query_reader import QueryMessage
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

    flush = deliver_all


def query_message(value: bytes, offset: int) -> QueryMessage:
    return QueryMessage(value, 0, offset, time.time())


async def handlers() -> tuple[SchedulerHandlers, WrittenLater]:
    settings = Settings(scheduler_policy="fcfs")
    core = make_core(settings, Catalogue(PROFILES, {"alpha": ["fam"]}))
    publisher = WrittenLater()
    switcher = PolicySwitcher(core, feeds=set(), context=build_context(settings))
    handling = SchedulerHandlers(settings, core, publisher, switcher=switcher, metadata=None)
    await handling.take_over(set())
    handling.owned = {0, 1}  # as if taken over with nothing handed on (reading that back needs a broker)
    await handling.on_worker_event(WorkerHeartbeat(worker_id="w1", device="cpu", emulated=True, variants=["small"],
                                                   max_batch=8, inflight=0, busy_fraction=0.0, price_per_hour=0.1,
                                                   at=time.time()))
    return handling, publisher


def test_a_query_is_dispatched_and_acknowledged_once_its_batch_is_written() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        query = Query(query_id="q1", application="alpha", slo_ms=1000.0, batch_size=1, sent_at=time.time())
        await handling.on_queries([query_message(query.model_dump_json().encode(), 7)])
        (topic, value, _), = [s for s in publisher.sent if s[0] == topics.dispatch_topic("w1")]
        batch = json.loads(value)
        assert [q["query_id"] for q in batch["queries"]] == ["q1"]
        assert batch["queries"][0]["query_position"] == position(topics.QUERIES, 0, 7)
        await asyncio.sleep(0)
        assert await handling.commit_points() == {0: 7}, "not acknowledged before the batch is written"
        publisher.deliver_all()
        await asyncio.sleep(0)
        assert await handling.commit_points() == {0: 8}

    asyncio.run(scenario())


def test_a_message_that_does_not_parse_is_rejected_under_its_position_with_a_dead_letter() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        await handling.on_queries([query_message(b'{"query_id": "q2", "application": ', 3)])
        by_topic = {topic: json.loads(value) for topic, value, _ in publisher.sent}
        result = by_topic[topics.results_topic(None)]
        assert result["status"] == "rejected" and result["query_id"] == position(topics.QUERIES, 0, 3)
        assert by_topic[topics.DEAD_LETTER]["offset"] == 3
        publisher.deliver_all()
        await asyncio.sleep(0)
        assert await handling.commit_points() == {0: 4}, "a final answer acknowledges the message"

    asyncio.run(scenario())


def test_the_queries_of_one_poll_are_decided_in_one_step() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        polled = [query_message(Query(query_id=f"q{offset}", application="alpha", slo_ms=1000.0, batch_size=1,
                                      sent_at=time.time()).model_dump_json().encode(), offset) for offset in range(3)]
        await handling.on_queries(polled)
        batches = [json.loads(value) for topic, value, _ in publisher.sent if topic == topics.dispatch_topic("w1")]
        assert [[q["query_id"] for q in b["queries"]] for b in batches] == [["q0", "q1", "q2"]]

    asyncio.run(scenario())


def test_released_partitions_let_their_waiting_queries_go_and_say_where_to_resume() -> None:
    async def scenario() -> None:
        handling, publisher = await handlers()
        first = Query(query_id="p0", application="alpha", slo_ms=1000.0, batch_size=1, sent_at=time.time())
        await handling.on_queries([query_message(first.model_dump_json().encode(), 5)])
        publisher.deliver_all()
        await asyncio.sleep(0)  # p0 dispatched and written: worker w1 is busy with it
        waiting = Query(query_id="p1", application="alpha", slo_ms=1000.0, batch_size=1, sent_at=time.time())
        await handling.on_queries([QueryMessage(waiting.model_dump_json().encode(), 1, 40, time.time())])
        assert handling.core.depth_by_application() == {"alpha": 1}
        assert await handling.release({1}) == {1: 40}, "the new owner starts at the query let go"
        assert handling.core.depth_by_application() == {"alpha": 0} and handling.owned == {0}
        assert await handling.commit_points() == {0: 6}

    asyncio.run(scenario())
