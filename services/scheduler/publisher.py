"""The scheduler's sends (dispatch, results, dead letters, load statistics) through librdkafka.

`make bench-pipeline`'s stage profile found faust's producer (aiokafka, Python) the largest share of the
scheduler's CPU per query; librdkafka encodes and sends in its own threads. A send returns at once with a
future the event loop resolves once the broker holds the message (or gave up on it): only then may the
queries it stands for be acknowledged, their offsets committed.

The event loop serves librdkafka's delivery reports every 5 ms while a send awaits its report, and not at
all while none does: polling every 5 ms regardless was 200 wake-ups a second on an idle scheduler. A
thread of its own waiting in librdkafka for reports was as cheap idle, but its one run at 1,000 q/s (beside
another change, since reverted) gave `make bench-pipeline`'s added latency a p99 of 587 ms, against
120-189 ms polling from the loop.
"""
from __future__ import annotations

import asyncio

from confluent_kafka import KafkaError, KafkaException, Message

from shared.adapters.rdkafka import RdProducer

#: how often the event loop serves delivery reports while some are awaited: they only gate offset
#: commits, which happen every 0.5 s
REPORTS_INTERVAL_S = 0.005


class Publisher:
    def __init__(self, producer: RdProducer) -> None:
        self._producer = producer
        self._sending = asyncio.Event()

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[None]:
        """Hand the message to librdkafka; the future is done once the broker has it, or failed with why not
        (at once when librdkafka refuses the message itself, as it does one over the size cap)."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def report(error: KafkaError | None, _: Message) -> None:  # on this thread, from a poll
            if written.done():
                return
            if error is None:
                written.set_result(None)
            else:
                written.set_exception(KafkaException(error))

        self._sending.set()
        try:
            self._producer.produce(topic, value=value, key=key, on_delivery=report)
        except KafkaException as exc:  # refused at once (too large, unknown topic ...): no report will come
            written.set_exception(exc)
        return written

    async def serve_delivery_reports(self) -> None:
        while True:
            if not self._producer.unreported():
                self._sending.clear()
                await self._sending.wait()
            await asyncio.sleep(REPORTS_INTERVAL_S)
            self._producer.poll()

    def flush(self) -> None:
        """Deliver what is queued, for up to 10 s (a stopping scheduler's last sends)."""
        self._producer.flush(timeout=10.0)
