"""Replay: a recorded range of the queries topic, read back from the real broker and served again in the
simulator by several policies, from the command line; what-if fleets and clear errors."""
from __future__ import annotations

import json
import time
import uuid

import pytest
from kafka import TopicPartition

from services.replay.__main__ import main as replay
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin, make_consumer
from tests.integration.helpers import digits_rows, make_query

pytestmark = pytest.mark.integration

SENT = 150


@pytest.fixture(scope="module")
def recorded_range(pipeline, settings) -> tuple[float, float, list[str]]:
    """150 digits queries at ~60 q/s through the scheduler and two real workers."""
    x, _ = digits_rows()
    ids = []
    with MeridianClient(settings) as client:
        start = time.time()
        for k in range(SENT):
            query = make_query(x[k:k + 1], query_id=f"replay-{uuid.uuid4().hex}", slo_ms=200.0)
            ids.append(client.send(query).query_id)
            time.sleep(1 / 60)
        client.flush()
        end = time.time()
        assert client.wait_for(ids, timeout_s=60)
    return start - 0.01, end + 0.01, ids


def test_a_recorded_range_is_replayed_through_each_policy(recorded_range, stack_env, tmp_path, capsys) -> None:
    start, end, _ = recorded_range
    out, figure = tmp_path / "replay.json", tmp_path / "replay.png"
    code = replay(["--since", str(start), "--until", str(end), "--policies", "fcfs,kairos", "--json", str(out),
                   "--figure", str(figure)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["recorded"]["queries"] == SENT and set(report["simulated"]) == {"fcfs", "kairos"}
    assert report["recorded"]["slo_attainment"] > 0.95
    for card in report["simulated"].values():
        assert card["queries"] == SENT
        assert abs(card["slo_attainment"] - report["recorded"]["slo_attainment"]) < 0.05
    hop = report["transport"]["to_scheduler"]
    assert hop["samples"] + hop["stalls"] == SENT, "hops fitted from the range's answers"
    assert figure.stat().st_size > 10_000
    printed = capsys.readouterr()
    assert "it-w1 (cpu-1t)" in printed.err and "fcfs (simulated)" in printed.out


def test_a_what_if_fleet_replaces_the_recorded_one(recorded_range, stack_env, tmp_path, capsys) -> None:
    start, end, _ = recorded_range
    out = tmp_path / "what-if.json"
    assert replay(["--since", str(start), "--until", str(end), "--policies", "fcfs", "--fleet", "cpu-1t=3",
                   "--json", str(out), "--figure", str(tmp_path / "w.png")]) == 0
    assert "cpu-1t-whatif-2 (cpu-1t)" in capsys.readouterr().err
    assert json.loads(out.read_text())["simulated"]["fcfs"]["queries"] == SENT


@pytest.mark.parametrize("args, says", [
    (["--since", "1000", "--until", "2000"], "no query was sent in the range"),
    (["--last", "60", "--policies", "fcfs,sjf"], "unknown policy 'sjf'"),
    (["--last", "60", "--fleet", "tpu-v9=2"], "device type 'tpu-v9' has no profile"),
])
def test_a_bad_request_gets_one_line_and_exit_code_2(recorded_range, stack_env, args, says, capsys) -> None:
    assert replay(args + ["--figure", "/dev/null"]) == 2
    assert says in capsys.readouterr().err


def test_a_range_past_retention_is_refused(recorded_range, settings, stack_env, capsys) -> None:
    """Records the retention deleted are gone: the command says so instead of replaying part of the range."""
    start, end, _ = recorded_range
    x, _ = digits_rows()
    with MeridianClient(settings) as client:  # one query after the range: the only one retention keeps
        later = client.send(make_query(x[:1], query_id=f"replay-{uuid.uuid4().hex}")).query_id
        client.flush()
        assert client.wait_for([later], timeout_s=30)
    consumer = make_consumer(settings, group_id=None)
    partitions = [TopicPartition(topics.QUERIES, p) for p in consumer.partitions_for_topic(topics.QUERIES)]
    ends = consumer.end_offsets(partitions)
    consumer.close()
    admin = make_admin(settings)
    try:
        admin.delete_records({tp: offset - 1 for tp, offset in ends.items() if offset > 0})
    finally:
        admin.close()
    assert replay(["--since", str(start), "--until", str(end), "--figure", "/dev/null"]) == 2
    assert "retention deleted older ones" in capsys.readouterr().err
