"""A replicated broker cluster: three KRaft nodes on loopback, every topic on three replicas with
``min.insync.replicas`` 2, and the leader of the loaded partition killed under load."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from services.drills.scenarios import DrillConfig, leader_kill
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.kafka_io import ensure_core_topics, make_admin

pytestmark = pytest.mark.integration

#: the killed node stays down until its partitions' leaders have moved (after the controller's 9 s broker
#: session timeout); the SLO outlasts all of it: a query that is not answered was lost, not late
DRILL = DrillConfig(rate_qps=30.0, duration_s=20.0, fault_at_s=4.0, outage_s=12.0, slo_ms=30_000.0, settle_s=90.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalStack]:
    """Three Kafka nodes (ports 19800-19805) and Redis, only these tests use (they kill a node)."""
    with LocalStack(var_dir=tmp_path_factory.mktemp("cluster-var"), kafka_port=19800, kafka_brokers=3,
                    redis_port=16679, components=("kafka", "redis")) as stack:
        yield stack


def test_every_topic_has_three_replicas_and_needs_two_in_sync(cluster) -> None:
    settings = cluster.settings()
    ensure_core_topics(settings)
    admin = make_admin(settings)
    try:
        assert len(admin.describe_cluster()["brokers"]) == 3
        described = admin.describe_topics([topics.QUERIES, topics.WORKER_EVENTS, "__consumer_offsets"])
        assert all(len(p["replica_nodes"]) == 3 and len(p["isr_nodes"]) == 3
                   for t in described for p in t["partitions"]), described
        config = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topics.QUERIES)], config_filter="all")
        assert config["topic"][topics.QUERIES]["min.insync.replicas"]["value"] == "2"
    finally:
        admin.close()


def test_killing_the_leader_under_load_loses_no_query(cluster, tmp_path) -> None:
    outcome = leader_kill(cluster, tmp_path, 19810, DRILL)
    assert outcome.sent == int(DRILL.rate_qps * DRILL.duration_s)
    assert outcome.lost == 0, outcome
    assert outcome.errors == 0 and outcome.rejected == 0, outcome
    assert outcome.answered + outcome.dropped == outcome.sent
    assert outcome.notes["leader_after"] not in (-1, outcome.notes["killed_node"]), outcome.notes
    assert outcome.recovery_s is not None and outcome.notes["isr_rejoin_s"] >= 0.0, outcome
