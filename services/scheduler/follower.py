"""The scheduler's group-less readers of worker events, plans and policy switches: a librdkafka consumer per
topic, polled on a thread of its own, which puts each poll's messages on the event loop's queue and polls
on, without waiting for the loop.

A poll handed over through ``asyncio.to_thread`` (an executor submission, two futures chained, a
shield) cost ~90 µs of CPU on this machine, measured alone; a thread putting its poll on the loop's queue
costs ~36 µs, and an empty poll costs the loop nothing. At 1,000 q/s a worker event arrives about every
second query.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Message, TopicPartition
from pydantic import BaseModel, ValidationError

from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.rdkafka import make_rd_consumer, poll_messages
from shared.settings import Settings

#: a poll's longest wait for a first message (and so a stop's), and the most it hands over
FOLLOW_POLL_S = 0.1
FOLLOW_MAX_MESSAGES = 500

#: what the reading thread hands the loop: a poll's messages, or why it stopped
Handed = list[Message] | BaseException


async def follow_topic(settings: Settings, topic: str, parse: Callable[[bytes], BaseModel],
                       handle: Callable[[BaseModel], Awaitable[str | None]], *,
                       on_invalid: Callable[[bytes, str, str, int, int], None], from_start: bool) -> None:
    """Read a whole topic with no consumer group, from its start or from now, until cancelled; what does
    not parse, or what ``handle`` refuses (it returns why), goes to ``on_invalid`` with the reason. Messages
    are handled one at a time, in order."""
    loop = asyncio.get_running_loop()
    polls: asyncio.Queue[Handed] = asyncio.Queue()
    stopping = threading.Event()
    hand = functools.partial(loop.call_soon_threadsafe, polls.put_nowait)
    reading = asyncio.ensure_future(asyncio.to_thread(_read, settings, topic, from_start, stopping, hand))
    try:
        while True:
            poll = await polls.get()
            if isinstance(poll, BaseException):
                raise poll
            for message in poll:
                value = message.value()
                try:
                    parsed = parse(value)
                except ValidationError as exc:
                    on_invalid(value, describe_validation_error(exc), topic, message.partition(), message.offset())
                    continue
                refusal = await handle(parsed)
                if refusal is not None:
                    on_invalid(value, refusal, topic, message.partition(), message.offset())
    finally:  # a stop waits for the poll under way, then the consumer closes
        stopping.set()
        await asyncio.wait([reading])


def _read(settings: Settings, topic: str, from_start: bool, stopping: threading.Event,
          hand: Callable[[Handed], None]) -> None:
    consumer = make_rd_consumer(settings, group_id=None)
    try:
        partitions = partitions_of(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING if from_start else OFFSET_END) for p in partitions])
        while not stopping.is_set():
            if messages := poll_messages(consumer, timeout_s=FOLLOW_POLL_S, max_messages=FOLLOW_MAX_MESSAGES):
                hand(messages)
    except Exception as exc:  # the loop raises it: the scheduler stops, as on any task's failure
        if not stopping.is_set():
            hand(exc)
    finally:
        consumer.close()


def partitions_of(consumer: Consumer, topic: str, timeout_s: float = 30.0) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)
