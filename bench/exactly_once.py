"""``python -m bench.exactly_once``: the scheduler's read-process-write with Kafka transactions against the
read-back it uses today, by duplicates under SIGKILL and by latency, in one run on a real broker.

The scheduler reads queries, hands them on (one dispatch message per batch) and commits the queries'
offsets afterwards. Killed, it re-reads what it had not committed; today it skips what the dispatch and
results topics show it handed on already (``services.scheduler.handed_on``, called here unchanged).
Kafka's alternative is a transaction per batch: the dispatch and the queries' offsets commit together, a
restarted producer with the same ``transactional.id`` fences the dead one, and a ``read_committed``
reader never sees an aborted dispatch.

Both relays below do only that (no policy), on the real topic and group names so that the read-back reads
what it reads live, with the same clients as the per-query path (librdkafka), static group membership as
the scheduler's, offsets committed every 0.5 s (the scheduler's commit interval) or per transaction. A
sender paces queries over the queries topic's partitions; a ``read_committed`` reader of the dispatch
topic records when each query id arrives and how often.

A third mode, ``at_least_once``, is the relay with no read-back: what the read-back saves.

Per mode: latency (send -> dispatch read) at 200 and 1,000 q/s, and at 200 q/s three SIGKILLs with the
relay started again at once: duplicates, lost, and the longest pause. Writes
``bench/results/exactly_once.json`` and a PNG.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import tempfile
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import confluent_kafka
import numpy as np

from bench.common import RESULTS_DIR, save_figure, write_result
from services.scheduler.handed_on import handed_on_query_ids
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.kafka_io import ensure_topics_exist
from shared.settings import Settings

#: at_least_once: today's relay without the read-back (what the read-back saves)
MODES = ("at_least_once", "read_back", "transactions")
QUERY_PARTITIONS = 4
COMMIT_INTERVAL_S = 0.5  # the scheduler's (faust's broker_commit_interval)
WARMUP_S = 2.0
STEADY = ((200.0, 15.0), (1000.0, 10.0))  # (q/s, seconds)
KILLS_AT_S = (6.0, 12.0, 18.0)
KILL_RUN_S = 24.0
KILL_RATE_QPS = 200.0
MAX_BATCH = 500


def common_config(settings: Settings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.kafka_bootstrap, "socket.nagle.disable": True}


def relay(mode: str, settings: Settings, dispatch_topic: str, ready: Event) -> None:
    """One scheduler's read-process-write, without the policy: every poll's queries go out as one batch."""
    consumer = confluent_kafka.Consumer({
        **common_config(settings), "group.id": topics.SCHEDULER_GROUP, "group.instance.id": "scheduler",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5,
        "session.timeout.ms": 10_000, "isolation.level": "read_committed"})
    producer_config = {**common_config(settings), "acks": "all", "linger.ms": 0, "enable.idempotence": True}
    if mode == "transactions":
        # a transaction begun right after the last one's commit meets CONCURRENT_TRANSACTIONS until the broker
        # has written the last one's markers; librdkafka retries after retry.backoff.ms (100 ms by default)
        producer_config.update({"transactional.id": "meridian-scheduler", "retry.backoff.ms": 5})
    producer = confluent_kafka.Producer(producer_config)
    if mode == "transactions":
        producer.init_transactions()  # fences the killed relay's producer and aborts its open transaction
    handed_on: set[str] = set()

    def on_assign(_: confluent_kafka.Consumer, partitions: list[confluent_kafka.TopicPartition]) -> None:
        if mode == "read_back":
            handed_on.update(handed_on_query_ids(settings, [tp.partition for tp in partitions], lookback_s=120.0))
        ready.set()

    consumer.subscribe([topics.QUERIES], on_assign=on_assign)
    delivered: dict[int, int] = {}  # partition -> next offset whose query's dispatch the broker acknowledged
    last_commit = time.monotonic()
    while True:
        messages = poll_batch(consumer)
        if messages:
            next_offsets: dict[int, int] = {}
            fresh = []
            for message in messages:
                next_offsets[message.partition()] = message.offset() + 1
                query = json.loads(message.value())
                if query["query_id"] in handed_on:
                    handed_on.discard(query["query_id"])
                else:
                    fresh.append(query)
            batch = json.dumps({"command": "dispatch_batch", "queries": fresh}).encode()
            if mode == "transactions":
                producer.begin_transaction()
                if fresh:
                    producer.produce(dispatch_topic, batch)
                producer.send_offsets_to_transaction(
                    [confluent_kafka.TopicPartition(topics.QUERIES, p, o) for p, o in next_offsets.items()],
                    consumer.consumer_group_metadata())
                producer.commit_transaction()
            elif fresh:
                producer.produce(dispatch_topic, batch, on_delivery=acknowledge(delivered, next_offsets))
            else:
                delivered.update(next_offsets)
        producer.poll(0)
        if mode != "transactions" and delivered and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
            consumer.commit(offsets=[confluent_kafka.TopicPartition(topics.QUERIES, p, o)
                                     for p, o in delivered.items()], asynchronous=True)
            delivered.clear()
            last_commit = time.monotonic()


def acknowledge(delivered: dict[int, int], offsets: dict[int, int]) -> Any:
    """A delivery report that lets a batch's queries be committed once the broker holds its dispatch."""
    def report(error: confluent_kafka.KafkaError | None, _: confluent_kafka.Message) -> None:
        if error is None:
            delivered.update(offsets)
    return report


def poll_batch(consumer: confluent_kafka.Consumer) -> list[confluent_kafka.Message]:
    """What has arrived, up to ``MAX_BATCH``: a short wait for the first message, none for the rest."""
    messages = []
    message = consumer.poll(0.005)
    while message is not None:
        if message.error() is None:
            messages.append(message)
        if len(messages) == MAX_BATCH:
            break
        message = consumer.poll(0)
    return messages


def send(settings: Settings, run: str, rate_qps: float, duration_s: float) -> None:
    """Queries paced at ``rate_qps`` over the queries topic's partitions, each carrying its send time."""
    producer = confluent_kafka.Producer({**common_config(settings), "acks": "all", "linger.ms": 0,
                                         "enable.idempotence": True})
    start, total = time.time(), int(rate_qps * duration_s)
    for seq in range(total):
        if (delay := start + seq / rate_qps - time.time()) > 0:
            time.sleep(delay)
        query = {"query_id": f"{run}-{seq}", "sent_at": time.time()}
        producer.produce(topics.QUERIES, json.dumps(query).encode(), partition=seq % QUERY_PARTITIONS)
        producer.poll(0)
    producer.flush()


def receive(settings: Settings, dispatch_topic: str, run: str, expected: int, timeout_s: float, ready: Event,
            out: Queue) -> None:
    """Every dispatched query id of ``run`` with the times it arrived, read as the worker reads (committed only)."""
    consumer = confluent_kafka.Consumer({
        **common_config(settings), "group.id": f"bench.{dispatch_topic}", "enable.auto.commit": False,
        "fetch.wait.max.ms": 5, "isolation.level": "read_committed"})
    consumer.assign([confluent_kafka.TopicPartition(dispatch_topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    ready.set()
    arrivals: dict[str, list[float]] = {}
    latencies_ms: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    settled_at: float | None = None
    while time.monotonic() < deadline and (settled_at is None or time.monotonic() < settled_at):
        message = consumer.poll(0.05)
        if message is None or message.error() is not None:
            continue
        now = time.time()
        for query in json.loads(message.value())["queries"]:
            if query["query_id"].startswith(f"{run}-"):
                arrivals.setdefault(query["query_id"], []).append(now)
                latencies_ms.setdefault(query["query_id"], (now - query["sent_at"]) * 1000.0)
        if settled_at is None and len(arrivals) >= expected:
            settled_at = time.monotonic() + 3.0  # late duplicates still count
    consumer.close()
    out.put({"arrivals": arrivals, "latencies_ms": latencies_ms})


def run_once(context: Any, settings: Settings, mode: str, run: str, rate_qps: float, duration_s: float,
             kills_at_s: tuple[float, ...] = ()) -> dict[str, Any]:
    dispatch_topic = topics.dispatch_topic(run)
    ensure_topics_exist(settings, [topics.TopicSpec(dispatch_topic, 1)])
    expected = int(rate_qps * duration_s)
    out: Queue = context.Queue()
    receiver_ready, relay_ready = context.Event(), context.Event()
    receiver = context.Process(target=receive, args=(settings, dispatch_topic, run, expected, duration_s + 60.0,
                                                     receiver_ready, out))
    receiver.start()
    worker = context.Process(target=relay, args=(mode, settings, dispatch_topic, relay_ready))
    worker.start()
    if not (receiver_ready.wait(60) and relay_ready.wait(60)):
        raise TimeoutError(f"{mode}: the relay or the reader did not start within 60 s")
    sender = context.Process(target=send, args=(settings, run, rate_qps, duration_s))
    started = time.time()
    sender.start()
    for kill_at in kills_at_s:
        time.sleep(max(0.0, started + kill_at - time.time()))
        worker.kill()
        worker.join()
        relay_ready = context.Event()
        worker = context.Process(target=relay, args=(mode, settings, dispatch_topic, relay_ready))
        worker.start()
    sender.join()
    received = out.get(timeout=duration_s + 90.0)
    receiver.join()
    worker.kill()
    worker.join()
    return summarize(received, expected, started)


def summarize(received: dict[str, Any], expected: int, started: float) -> dict[str, Any]:
    arrivals, latencies = received["arrivals"], received["latencies_ms"]
    measured = [ms for query_id, ms in latencies.items() if arrivals[query_id][0] - started >= WARMUP_S]
    firsts = np.sort([times[0] for times in arrivals.values()])
    return {
        "sent": expected,
        "lost": expected - len(arrivals),
        "duplicates": sum(len(times) - 1 for times in arrivals.values()),
        "latency_ms_p50": round(float(np.percentile(measured, 50)), 2),
        "latency_ms_p99": round(float(np.percentile(measured, 99)), 2),
        "longest_pause_ms": round(float(np.diff(firsts).max()) * 1000.0, 1) if len(firsts) > 1 else None,
    }


def main() -> None:
    context = mp.get_context("spawn")
    root = Path(tempfile.mkdtemp(prefix="meridian-exactly-once-"))
    modes: dict[str, dict[str, Any]] = {}
    with LocalStack(var_dir=root / "var", kafka_port=29692, redis_port=26679, components=("kafka",)) as stack:
        settings = stack.settings()
        ensure_topics_exist(settings, [topics.TopicSpec(topics.QUERIES, QUERY_PARTITIONS)])
        for mode in MODES:
            runs: dict[str, Any] = {}
            for rate, seconds in STEADY:
                runs[f"steady_{rate:g}_qps"] = run_once(context, settings, mode, f"{mode}-{rate:g}", rate, seconds)
                print(f"{mode} steady {rate:g} q/s: {runs[f'steady_{rate:g}_qps']}", flush=True)
            runs[f"{len(KILLS_AT_S)}_kills_at_{KILL_RATE_QPS:g}_qps"] = run_once(context, settings, mode, f"{mode}-kills", KILL_RATE_QPS, KILL_RUN_S, KILLS_AT_S)
            print(f"{mode} {len(KILLS_AT_S)} kills: {runs[f'{len(KILLS_AT_S)}_kills_at_{KILL_RATE_QPS:g}_qps']}",
                  flush=True)
            modes[mode] = runs
    base, txn = modes["read_back"], modes["transactions"]
    path = write_result("exactly_once", {
        "setup": {"query_partitions": QUERY_PARTITIONS, "commit_interval_s": COMMIT_INTERVAL_S,
                  "steady": [{"rate_qps": r, "duration_s": s} for r, s in STEADY], "warmup_s": WARMUP_S,
                  "kills": {"rate_qps": KILL_RATE_QPS, "duration_s": KILL_RUN_S, "at_s": list(KILLS_AT_S)},
                  "clients": "confluent-kafka (librdkafka), acks=all, idempotent, linger 0, static membership; "
                             "readers read_committed"},
        "modes": modes,
        "transactions_over_read_back": {
            key: round(txn[key]["latency_ms_p50"] / base[key]["latency_ms_p50"], 2) for key in base
            if key.startswith("steady")},
    })
    plot(modes, path.with_suffix(".png"))


def plot(modes: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(next(iter(modes.values())))
    fig, ax = plt.subplots(figsize=(9, 5))
    width = 0.8 / (2 * len(MODES))
    for index, mode in enumerate(MODES):
        for shift, (quantile, hatch) in enumerate((("p50", ""), ("p99", "//"))):
            x = np.arange(len(runs)) + (2 * index + shift + 0.5 - len(MODES)) * width
            values = [modes[mode][run][f"latency_ms_{quantile}"] for run in runs]
            ax.bar(x, values, width, label=f"{mode.replace('_', '-')} {quantile}", hatch=hatch,
                   color=f"C{index}", alpha=0.6 if shift else 1.0)
    labels = ["\n".join([run.replace("_", " ").replace("qps", "q/s"),
                          *(f"{m.replace('_', '-')}: {modes[m][run]['duplicates']} duplicates" for m in MODES)])
              for run in runs]
    ax.set_xticks(np.arange(len(runs)), labels, fontsize=7)
    ax.set_ylabel("send -> dispatch read (ms)")
    ax.set_yscale("log")
    ax.set_title("The scheduler's read-process-write: read-back vs Kafka transactions")
    ax.legend(fontsize=8)
    save_figure(fig, path)
    print(f"wrote {path.relative_to(RESULTS_DIR.parent.parent)}")


if __name__ == "__main__":
    main()
