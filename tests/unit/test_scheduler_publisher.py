"""The scheduler's publisher with a stand-in librdkafka producer: a send's future is settled once the
broker answered and the event loop served its report, and the loop polls for reports only while a send
awaits one."""
from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException

from services.scheduler.publisher import Publisher


class StandInProducer:
    """Holds each send until `answer` says the broker answered; a poll then serves the reports, as
    librdkafka does. Counts the polls."""

    def __init__(self) -> None:
        self.unanswered: list = []
        self.answered: list = []
        self.polls = 0

    def produce(self, topic: str, *, value: bytes, key: bytes | None = None, on_delivery=None) -> None:
        self.unanswered.append(on_delivery)

    def answer(self, error: KafkaError | None = None) -> None:
        self.answered += [(report, error) for report in self.unanswered]
        self.unanswered.clear()

    def unreported(self) -> int:
        return len(self.unanswered) + len(self.answered)

    def poll(self) -> None:
        self.polls += 1
        reports, self.answered = self.answered, []
        for report, error in reports:
            report(error, None)

    def flush(self, timeout: float | None = None) -> None:
        self.answer()
        self.poll()


async def serving(producer: StandInProducer) -> tuple[Publisher, asyncio.Task]:
    publisher = Publisher(producer)
    return publisher, asyncio.create_task(publisher.serve_delivery_reports())


def test_a_send_is_settled_once_the_broker_answers_and_the_loop_polls_only_while_one_awaits() -> None:
    async def run() -> None:
        producer = StandInProducer()
        publisher, task = await serving(producer)
        await asyncio.sleep(0.1)
        assert producer.polls == 0, "polled with nothing sent"
        written = publisher.send("t", b"v")
        await asyncio.sleep(0.1)
        assert not written.done(), "settled before the broker answered"
        producer.answer()
        await asyncio.wait_for(written, timeout=1.0)
        await asyncio.sleep(0.02)
        polls = producer.polls
        await asyncio.sleep(0.1)
        assert producer.polls == polls, "kept polling with no send awaiting its report"
        task.cancel()
    asyncio.run(run())


def test_a_delivery_the_broker_gave_up_on_fails_its_send() -> None:
    async def run() -> None:
        producer = StandInProducer()
        publisher, task = await serving(producer)
        written = publisher.send("t", b"v")
        producer.answer(KafkaError(KafkaError._MSG_TIMED_OUT))
        with pytest.raises(KafkaException):
            await asyncio.wait_for(written, timeout=1.0)
        task.cancel()
    asyncio.run(run())


def test_flush_settles_every_send_before_it_returns() -> None:
    async def run() -> None:
        publisher = Publisher(StandInProducer())  # nothing serves reports but the flush
        sent = [publisher.send("t", b"v") for _ in range(3)]
        publisher.flush()
        assert all(written.done() and written.exception() is None for written in sent)
    asyncio.run(run())
