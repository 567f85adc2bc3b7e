"""``meridian status`` without a stack: each worker once however many series Prometheus still holds of it,
and consumer groups as the broker describes them (a worker's group is read by assignment: no members)."""
from __future__ import annotations

import argparse

import pytest
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata, OffsetAndTimestamp

from services.cli import status
from services.cli.status import VIEWS, WORKERS, group_text, newest_per
from services.observability.lag_exporter import LagSnapshot, collect


def series(value: str, **labels: str) -> dict:
    return {"metric": labels, "value": [1000.0, value]}


class BrokerAdmin:
    """Answers as Kafka 4.1 did for a running scheduler (faust, subscribed) and worker (assign + commit)."""

    queries, dispatch = TopicPartition("meridian.queries", 0), TopicPartition("meridian.dispatch.w1", 0)

    def list_groups(self):
        return [{"group_id": "meridian-scheduler", "protocol_type": "consumer", "group_state": "Stable"},
                {"group_id": "meridian.worker.w1", "protocol_type": "", "group_state": "Empty"},
                {"group_id": "meridian.worker.gone", "protocol_type": "", "group_state": "Empty"}]

    def describe_groups(self, group_ids):
        return {g: {"group_id": g, "error": None, "members": [{"member_id": "m"}] if g == "meridian-scheduler" else []}
                for g in group_ids}

    def list_group_offsets(self, group_specs):
        offsets = {"meridian-scheduler": {self.queries: 40}, "meridian.worker.w1": {self.dispatch: 9},
                   "meridian.worker.gone": {}}
        return {g: {tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets[g].items()} for g in group_specs}

    def list_partition_offsets(self, specs):
        ends = {self.queries: 42, self.dispatch: 9}
        return {tp: OffsetAndTimestamp(ends[tp], -1, 0) for tp in specs}

    def close(self) -> None:
        pass


def test_newest_per_keeps_one_series_a_worker_the_latest_sampled() -> None:
    rows = newest_per([series("1700000002.5", worker="w1", instance="127.0.0.1:9105"),
                       series("1700000001", worker="w0", instance="127.0.0.1:9104"),
                       series("1699999990", worker="w1", instance="127.0.0.1:9102")], "worker")
    assert [(r["metric"]["worker"], r["metric"]["instance"]) for r in rows] == [("w0", "127.0.0.1:9104"),
                                                                                ("w1", "127.0.0.1:9105")]


def test_every_view_reads_only_series_sampled_lately() -> None:
    """An earlier run's series answer for 5 minutes after a Prometheus restart: each query drops them."""
    for expr in [WORKERS, *(e for e, _ in VIEWS.values())]:
        assert f"> time() - {status.LIVE_S}" in expr, expr
    assert "max by (application)" in VIEWS["seconds since the last plan"][0]


def test_collect_tells_groups_read_by_assignment_from_members() -> None:
    snapshot = collect(BrokerAdmin(), group_prefix="meridian")
    assert snapshot.members == {"meridian-scheduler": 1, "meridian.worker.w1": 0, "meridian.worker.gone": 0}
    assert snapshot.by_assignment == {"meridian.worker.w1", "meridian.worker.gone"}
    assert snapshot.lag_messages == {("meridian-scheduler", "meridian.queries"): 2,
                                     ("meridian.worker.w1", "meridian.dispatch.w1"): 0}


@pytest.mark.parametrize("group, workers, text", [
    ("meridian-scheduler", {"w1"}, "meridian-scheduler: 1 member(s); lag meridian.queries 2"),
    ("meridian.worker.w1", {"w1"}, "meridian.worker.w1: no members, read by assignment by worker w1 (running); "
                                   "lag meridian.dispatch.w1 0"),
    ("meridian.worker.gone", {"w1"}, "meridian.worker.gone: no members, read by assignment by worker gone "
                                     "(not running); lag none"),
    ("meridian.worker.w1", None, "meridian.worker.w1: no members, read by assignment; lag meridian.dispatch.w1 0"),
])
def test_group_text(group: str, workers: set[str] | None, text: str) -> None:
    assert group_text(group, collect(BrokerAdmin()), workers) == text


def test_group_text_of_a_group_without_lag() -> None:
    assert group_text("g", LagSnapshot({}, {"g": 0}), set()) == "g: 0 member(s); lag none"


def test_status_lists_a_restarted_worker_once(monkeypatch, capsys) -> None:
    """Prometheus restarted: the earlier worker process (port 9102) still answers beside the current one."""
    answers = {WORKERS: [series("1700000000", worker="w1", device="cpu-1t", emulated="false", instance=":9102"),
                         series("1700000100", worker="w1", device="g4dn-emu", emulated="true", instance=":9105")],
               VIEWS["seconds since the last plan"][0]: [series("1.99", application="fleet")]}
    monkeypatch.setattr(status, "query", lambda url, expr: answers.get(expr, []))
    monkeypatch.setattr(status, "require_broker", lambda bootstrap: None)
    monkeypatch.setattr(status, "make_admin", lambda settings: BrokerAdmin())
    assert status.run(argparse.Namespace(prometheus="http://prometheus")) == 0
    out = capsys.readouterr().out
    assert "  workers: w1 (g4dn-emu, emulated)\n" in out, out
    assert "  seconds since the last plan: fleet 1.99\n" in out and "  queued queries: none\n" in out, out
    assert "  meridian-scheduler: 1 member(s); lag meridian.queries 2\n" in out, out
    assert "by worker w1 (running)" in out and "by worker gone (not running)" in out, out


def test_status_without_prometheus_says_so_once_and_still_reads_kafka(monkeypatch, capsys) -> None:
    def unreachable(url: str, expr: str) -> list:
        raise OSError("connection refused")

    monkeypatch.setattr(status, "query", unreachable)
    monkeypatch.setattr(status, "require_broker", lambda bootstrap: None)
    monkeypatch.setattr(status, "make_admin", lambda settings: BrokerAdmin())
    assert status.run(argparse.Namespace(prometheus="http://prometheus")) == 0
    out = capsys.readouterr().out
    assert out.count("Prometheus unreachable (connection refused)") == 1, out
    assert "meridian.worker.w1: no members, read by assignment; lag" in out, out
