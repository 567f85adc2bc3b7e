"""The scheduler's sends (dispatch, results, dead letters, load statistics) through librdkafka, beside
faust's consumer.

`make bench-pipeline`'s stage profile found faust's producer (aiokafka, Python) the largest share of the
scheduler's CPU per query; librdkafka encodes and sends in its own threads. A send returns at once with a
future the event loop resolves once the broker holds the message (or gave up on it): only then may the
queries it stands for be acknowledged, their offsets committed.
"""
from __future__ import annotations

import asyncio

from confluent_kafka import KafkaError, KafkaException, Message

from shared.adapters.rdkafka import RdProducer
from shared.settings import Settings

#: how often the event loop serves librdkafka's delivery reports: they only gate offset commits, which
#: happen every 0.5 s
REPORTS_INTERVAL_S = 0.005


class Publisher:
    def __init__(self, settings: Settings) -> None:
        self._producer = RdProducer(settings)

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[None]:
        """Hand the message to librdkafka; the future is done once the broker has it."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def report(error: KafkaError | None, _: Message) -> None:  # on this thread, from a poll
            if written.done():
                return
            if error is None:
                written.set_result(None)
            else:
                written.set_exception(KafkaException(error))

        self._producer.send(topic, value=value, key=key, on_delivery=report)
        return written

    async def serve_delivery_reports(self) -> None:
        while True:
            self._producer.poll()
            await asyncio.sleep(REPORTS_INTERVAL_S)

    def flush(self) -> None:
        """Deliver what is queued, for up to 10 s (a stopping scheduler's last sends)."""
        self._producer.flush(timeout=10.0)
