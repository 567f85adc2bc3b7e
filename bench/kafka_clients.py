"""``python -m bench.kafka_clients``: one Kafka hop (produce -> consume) per candidate Python client, side by side.

A query crosses several hops (client -> scheduler -> worker -> client), each paid in some client library's
latency and CPU; this measures one hop per candidate in the same run on a real broker, so the choice rests on
ratios the machine's noise does not change much.

Per (candidate, rate): a fresh single-partition topic (like a worker's dispatch topic); a consumer process
reading it by assignment (as the worker and the client do, no group rebalance) and then a producer process
sending ~1 KB messages at a fixed rate, ``time.time()`` embedded (same host clock). Both sides use the same
library. The first second is a warm-up (connections, first metadata, first fetch): not what is compared.
CPU is user+system time of each whole process (the libraries' I/O threads included) over the measured
messages, per message. Offsets are not committed: only the transport is compared.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import struct
import tempfile
import time
import uuid
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka
import numpy as np

from services.stack import LocalStack
from shared.adapters import kafka_io, topics
from shared.settings import Settings

MESSAGE_BYTES = 1024
WARMUP_S = 1.0
HEADER = struct.Struct("<dq")  # send time (time.time()), sequence number
MAX_REQUEST_BYTES = 16 * 1024 * 1024  # as kafka_io and the scheduler


@dataclass(frozen=True)
class Candidate:
    client: str  # "kafka-python", "aiokafka" or "confluent-kafka"
    fetch_wait_ms: int  # how long the broker may hold a fetch that has no data

    @property
    def settings(self) -> str:
        base = {"kafka-python": "kafka_io.make_producer/make_consumer",
                "aiokafka": "acks=all idempotent linger=0",
                "confluent-kafka": "acks=all idempotent linger=0 nagle off"}[self.client]
        return f"{base}, fetch wait {self.fetch_wait_ms} ms"


#: fetch wait 100 ms is kafka_io's; 1500 ms is what faust's aiokafka driver hard-codes for the scheduler
CANDIDATES = (*(Candidate(client, wait) for client in ("kafka-python", "aiokafka", "confluent-kafka")
                for wait in (100, 5, 0)), Candidate("aiokafka", 1500))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Pacer:
    """Fixed-interval send schedule; message ``seq`` carries the time it was built."""

    def __init__(self, rate: float, total: int) -> None:
        self.interval, self.total, self.start = 1.0 / rate, total, time.time()
        self.padding = b"x" * (MESSAGE_BYTES - HEADER.size)

    def delay(self, seq: int) -> float:
        return self.start + seq * self.interval - time.time()

    def payload(self, seq: int) -> bytes:
        return HEADER.pack(time.time(), seq) + self.padding


class Recorder:
    """Latency of each measured message at receipt; CPU from the first measured message to the last."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total
        self.latencies_ms: list[float] = []
        self.cpu_from = self.cpu_to = 0.0

    def record(self, value: bytes, now: float) -> bool:
        """True once the last message has arrived."""
        sent, seq = HEADER.unpack_from(value)
        if seq >= self.warmup:
            if not self.latencies_ms:
                self.cpu_from = cpu_s()
            self.latencies_ms.append((now - sent) * 1000.0)
            self.cpu_to = cpu_s()
        return seq == self.total - 1

    def report(self) -> dict[str, Any]:
        return {"latencies_ms": self.latencies_ms, "cpu_s": self.cpu_to - self.cpu_from}


def produce(candidate: Candidate, settings: Settings, topic: str, rate: float, warmup: int, total: int,
            out: Queue) -> None:
    """Producer process: send ``total`` messages paced at ``rate``, flush, report measured CPU and send span."""
    pacer = Pacer(rate, total)
    marks: dict[str, float] = {}

    def mark(seq: int) -> None:
        if seq == warmup:
            marks.update(cpu=cpu_s(), first=time.time())
        elif seq == total - 1:
            marks["last"] = time.time()

    if candidate.client == "aiokafka":
        async def run() -> None:
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True, linger_ms=0,
                max_request_size=MAX_REQUEST_BYTES)
            await producer.start()
            try:
                for seq in range(total):
                    if (delay := pacer.delay(seq)) > 0:
                        await asyncio.sleep(delay)
                    mark(seq)
                    await producer.send(topic, pacer.payload(seq))
                await producer.flush()
            finally:
                await producer.stop()
        asyncio.run(run())
    elif candidate.client == "confluent-kafka":
        producer = confluent_kafka.Producer({
            "bootstrap.servers": settings.kafka_bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "message.max.bytes": MAX_REQUEST_BYTES, "socket.nagle.disable": True})
        for seq in range(total):
            if (delay := pacer.delay(seq)) > 0:
                time.sleep(delay)
            mark(seq)
            producer.produce(topic, pacer.payload(seq))
            producer.poll(0)  # serve delivery reports
        producer.flush()
    else:
        producer = kafka_io.make_producer(settings)
        for seq in range(total):
            if (delay := pacer.delay(seq)) > 0:
                time.sleep(delay)
            mark(seq)
            producer.send(topic, pacer.payload(seq))
        producer.flush()
        producer.close()
    out.put(("producer", {"cpu_s": cpu_s() - marks["cpu"], "send_s": marks["last"] - marks["first"]}))


def consume(candidate: Candidate, settings: Settings, topic: str, warmup: int, total: int, timeout_s: float,
            out: Queue) -> None:
    """Consumer process: announce readiness once assigned, then record every message until the last one."""
    recorder = Recorder(warmup, total)
    deadline = time.monotonic() + timeout_s
    if candidate.client == "aiokafka":
        async def run() -> None:
            consumer = aiokafka.AIOKafkaConsumer(
                bootstrap_servers=settings.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=candidate.fetch_wait_ms, fetch_min_bytes=1,
                max_partition_fetch_bytes=MAX_REQUEST_BYTES)
            await consumer.start()
            try:
                partition = aiokafka.TopicPartition(topic, 0)
                consumer.assign([partition])
                await consumer.position(partition)
                out.put(("ready", None))
                while time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=100)  # as faust's fetcher
                    now = time.time()
                    if any(recorder.record(m.value, now) for records in batches.values() for m in records):
                        return
            finally:
                await consumer.stop()
        asyncio.run(run())
    elif candidate.client == "confluent-kafka":
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": settings.kafka_bootstrap, "group.id": f"bench.{topic}",
            "enable.auto.commit": False, "fetch.wait.max.ms": candidate.fetch_wait_ms, "fetch.min.bytes": 1,
            "socket.nagle.disable": True})
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        out.put(("ready", None))
        try:
            while time.monotonic() < deadline:
                # poll, not consume(n, timeout): consume waits for n messages or the whole timeout
                message = consumer.poll(0.1)
                if message is not None and message.error() is None and recorder.record(message.value(), time.time()):
                    break
        finally:
            consumer.close()
    else:
        consumer = kafka_io.make_consumer(settings, group_id=None, fetch_max_wait_ms=candidate.fetch_wait_ms)
        partition = kafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.position(partition)
        out.put(("ready", None))
        try:
            while time.monotonic() < deadline:
                polled = consumer.poll(timeout_ms=100)  # as the client; the worker adds max_records=64
                now = time.time()
                if any(recorder.record(r.value, now) for records in polled.values() for r in records):
                    break
        finally:
            consumer.close()
    out.put(("consumer", recorder.report()))


def measure_hop(settings: Settings, candidate: Candidate, rate: float, duration_s: float) -> dict[str, Any]:
    """One candidate at one rate, on its own topic, producer and consumer in their own processes."""
    topic = f"bench.clients.{uuid.uuid4().hex[:8]}"
    admin = kafka_io.make_admin(settings)
    topics.ensure_topics(admin, [topics.TopicSpec(topic, 1)])
    warmup, measured = int(rate * WARMUP_S), int(rate * duration_s)
    context = mp.get_context("spawn")  # no threads or sockets inherited from this process
    out: Queue = context.Queue()
    consumer = context.Process(target=consume, args=(candidate, settings, topic, warmup, warmup + measured,
                                                     WARMUP_S + duration_s + 30.0, out))
    producer = context.Process(target=produce, args=(candidate, settings, topic, rate, warmup, warmup + measured,
                                                     out))
    try:
        consumer.start()
        if out.get(timeout=60)[0] != "ready":
            raise RuntimeError(f"{candidate} consumer did not start")
        producer.start()
        reports = dict(out.get(timeout=WARMUP_S + duration_s + 60.0) for _ in range(2))
    finally:
        for process in (producer, consumer):
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        admin.delete_topics([topic])
        admin.close()
    latencies = np.asarray(reports["consumer"]["latencies_ms"])
    return {
        "client": candidate.client, "settings": candidate.settings, "fetch_wait_ms": candidate.fetch_wait_ms,
        "rate_qps": rate, "sent_qps": round((measured - 1) / reports["producer"]["send_s"], 1),
        "received": f"{len(latencies)}/{measured}",
        "p50_ms": round(float(np.percentile(latencies, 50)), 2) if len(latencies) else None,
        "p99_ms": round(float(np.percentile(latencies, 99)), 2) if len(latencies) else None,
        "cpu_ms_per_msg_producer": round(1000.0 * reports["producer"]["cpu_s"] / measured, 4),
        "cpu_ms_per_msg_consumer": round(1000.0 * reports["consumer"]["cpu_s"] / max(1, len(latencies)), 4),
    }


def measure_clients(settings: Settings, *, rates: tuple[float, ...] = (200.0, 1000.0), duration_s: float = 10.0,
                    candidates: tuple[Candidate, ...] = CANDIDATES) -> list[dict[str, Any]]:
    """One row per (candidate, rate); rates are the outer loop, so each rate's rows are close in time."""
    if settings.kafka_security.security_protocol != "PLAINTEXT":
        raise ValueError("the client comparison runs on the loopback PLAINTEXT stack only")
    measure_hop(settings, candidates[0], rates[0], WARMUP_S)  # the fresh broker's JIT warms on no candidate's time
    return [measure_hop(settings, candidate, rate, duration_s) for rate in rates for candidate in candidates]


COLUMNS = ("client", "fetch_wait_ms", "rate_qps", "sent_qps", "received", "p50_ms", "p99_ms",
           "cpu_ms_per_msg_producer", "cpu_ms_per_msg_consumer")


def format_table(rows: list[dict[str, Any]]) -> str:
    cells = [[str(column) for column in COLUMNS], *([str(row[c]) for c in COLUMNS] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_clients", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=lambda s: tuple(float(r) for r in s.split(",")), default=(200.0, 1000.0))
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per candidate and rate")
    parser.add_argument("--kafka-port", type=int, default=49592)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="meridian-kafka-clients-") as var_dir, \
            LocalStack(var_dir=Path(var_dir), kafka_port=args.kafka_port, components=("kafka",)) as stack:
        rows = measure_clients(stack.settings(), rates=args.rates, duration_s=args.duration)
    versions = {"kafka-python": kafka.__version__, "aiokafka": aiokafka.__version__,
                "confluent-kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0]}
    print(format_table(rows))
    print(json.dumps({"versions": versions, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
