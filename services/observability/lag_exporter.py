"""Kafka consumer-lag exporter: how far behind every consumer group is, as Prometheus gauges.

Consumes nothing. Every ``--interval`` seconds it asks the broker (kafka-python 3.x admin API:
``list_groups``, ``list_group_offsets``, ``describe_groups``, ``list_partition_offsets``) for each
consumer group's committed offsets and each partition's log end, and exports
``meridian_kafka_consumer_lag_messages{group,topic}`` (log end minus committed offset, summed over the
topic's partitions the group committed) and ``meridian_kafka_consumer_group_members{group}``.
Groups without a committed offset (e.g. readers with no group) have no lag to report.

Run: ``python -m services.observability.lag_exporter [--metrics-port 9113] [--interval 2]``; from code,
``start_lag_exporter(launcher, metrics_port=...)`` starts it as a scraped process of a `LocalLauncher`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError

from services.log import configure_logging
from shared import metrics
from shared.adapters.kafka_io import make_admin
from shared.settings import Settings

SERVICE = "lag_exporter"
#: default metrics port (beside the other services' 9101..9112)
DEFAULT_INTERVAL_S = 2.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LagSnapshot:
    """One collection round: lag per (group, topic) and members per group."""

    lag_messages: dict[tuple[str, str], int]
    members: dict[str, int]
    #: groups that only hold committed offsets (no protocol type): their readers assign themselves their
    #: partitions and commit, never joining (the workers, ``shared.adapters.rdkafka``), so they have no
    #: members however busy they are
    by_assignment: frozenset[str] = frozenset()


def group_lags(committed: Mapping[str, Mapping[TopicPartition, int]],
               log_ends: Mapping[TopicPartition, int]) -> dict[tuple[str, str], int]:
    """Sum over partitions of ``log end - committed`` per (group, topic); partitions with no committed
    offset (negative) or no known log end are left out, a committed offset past the end counts 0.

    >>> tp0, tp1 = TopicPartition("q", 0), TopicPartition("q", 1)
    >>> group_lags({"g": {tp0: 4, tp1: -1}, "h": {tp0: 9}}, {tp0: 10, tp1: 6})
    {('g', 'q'): 6, ('h', 'q'): 1}
    """
    lags: dict[tuple[str, str], int] = {}
    for group, offsets in committed.items():
        for tp, offset in offsets.items():
            if offset < 0 or tp not in log_ends:
                continue
            key = (group, tp.topic)
            lags[key] = lags.get(key, 0) + max(0, log_ends[tp] - offset)
    return lags


def collect(admin: KafkaAdminClient, *, group_prefix: str = "") -> LagSnapshot:
    """Ask the broker for every consumer group's committed offsets, members and the log ends."""
    listed = {g["group_id"]: g.get("protocol_type") for g in admin.list_groups()
              if g["group_id"].startswith(group_prefix) and g.get("protocol_type") in ("consumer", "")}
    groups = sorted(listed)
    if not groups:
        return LagSnapshot({}, {})
    described = admin.describe_groups(groups)
    members = {group: len(described.get(group, {}).get("members") or ()) for group in groups}
    committed = {group: {tp: meta.offset for tp, meta in offsets.items()}
                 for group, offsets in admin.list_group_offsets({group: None for group in groups}).items()}
    partitions = {tp for offsets in committed.values() for tp in offsets}
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions}) if partitions else {}
    return LagSnapshot(group_lags(committed, {tp: end.offset for tp, end in ends.items()}), members,
                       frozenset(group for group, protocol in listed.items() if protocol == ""))


class LagGauges:
    """Sets the gauges from each snapshot and removes the series of groups and topics that went away."""

    def __init__(self) -> None:
        self._lag_keys: set[tuple[str, str]] = set()
        self._groups: set[str] = set()

    def update(self, snapshot: LagSnapshot) -> None:
        for group, topic in self._lag_keys - set(snapshot.lag_messages):
            metrics.CONSUMER_LAG.remove(group, topic)
        for group in self._groups - set(snapshot.members):
            metrics.CONSUMER_GROUP_MEMBERS.remove(group)
        for (group, topic), lag in snapshot.lag_messages.items():
            metrics.CONSUMER_LAG.labels(group, topic).set(lag)
        for group, count in snapshot.members.items():
            metrics.CONSUMER_GROUP_MEMBERS.labels(group).set(count)
        self._lag_keys, self._groups = set(snapshot.lag_messages), set(snapshot.members)


def run(settings: Settings, stop: threading.Event, *, interval_s: float, group_prefix: str = "") -> None:
    """Collect every ``interval_s`` until ``stop``; a failed round is counted and retried next round."""
    gauges = LagGauges()
    admin: KafkaAdminClient | None = None
    failing = False
    for status in ("ok", "error"):
        metrics.LAG_COLLECTIONS.labels(status)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            admin = admin or make_admin(settings)
            gauges.update(collect(admin, group_prefix=group_prefix))
        except (KafkaError, OSError, ValueError, KeyError):
            metrics.LAG_COLLECTIONS.labels("error").inc()
            if not failing:  # log the first failure of a run of them, not every round
                logger.warning("collection failed (retrying every %g s):\n%s", interval_s,
                               traceback.format_exc(limit=3))
            failing = True
            if admin is not None:
                admin.close()
                admin = None  # reconnect next round (the broker may have restarted)
        else:
            if failing:
                logger.info("collecting again")
            failing = False
            metrics.LAG_COLLECTIONS.labels("ok").inc()
            metrics.LAG_COLLECT_DURATION.observe(time.perf_counter() - started)
        stop.wait(max(0.0, interval_s - (time.perf_counter() - started)))
    if admin is not None:
        admin.close()


def start_lag_exporter(launcher, *, metrics_port: int, interval_s: float = DEFAULT_INTERVAL_S,
                       extra_env: dict[str, str] | None = None):
    """Start the exporter as process ``lag_exporter`` of a `services.launcher.LocalLauncher` (a scrape target)."""
    return launcher.start_service(SERVICE, "services.observability.lag_exporter", "--metrics-port", str(metrics_port),
                                  "--interval", str(interval_s), metrics_port=metrics_port, extra_env=extra_env)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.observability.lag_exporter",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics-port", type=int, default=None, help="default: MERIDIAN_LAG_EXPORTER_METRICS_PORT")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between collections")
    parser.add_argument("--group-prefix", default="", help="only groups whose id starts with this")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings()
    metrics.serve_metrics(args.metrics_port or settings.lag_exporter_metrics_port, settings.bind_host)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run(settings, stop, interval_s=args.interval, group_prefix=args.group_prefix)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    configure_logging()
    main()
