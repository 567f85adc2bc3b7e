"""Meridian on hosts of its own (`services.rig`: network namespaces on one bridge, each host its own address):
three Kafka nodes on three hosts as one cluster, Redis, two schedulers and two real workers each on theirs,
the test the client host. Every service finds the others by the addresses in its configuration alone (its
own 127.0.0.1 is an empty loopback); every link to a broker is TLS (SASL_SSL with SCRAM-SHA-512, the
controllers mutual TLS) under ACLs; and a link cut and healed under load loses no query."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafka import KafkaAdminClient
from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

from bench import hosts as drills
from schemas import ResultStatus
from services.launcher import read_metric
from services.rig import CLIENT_APPLICATION, HostsRig, rig_usable
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(rig_usable() is not None, reason=f"the hosts rig cannot be made here: {rig_usable()}")]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, digits_variants: list[str]) -> Iterator[HostsRig]:
    with HostsRig(tmp_path_factory.mktemp("rig"), prefix="mrt", subnet="10.77.2") as made:
        launchers = drills.start_services(made, digits_variants[0])
        try:
            yield made
        finally:
            drills.stop_services(launchers)


def test_services_on_hosts_of_their_own_find_each_other_by_their_addresses(rig: HostsRig) -> None:
    rows = drills.digits_rows(rig.settings())
    with MeridianClient(rig.settings(), applications=["digits"]) as client:
        sent = [client.send(drills.digits_query(rows, k)) for k in range(200)]
        client.flush()
        assert client.wait_for([q.query_id for q in sent], timeout_s=60)
        answers = [client.results[q.query_id][0] for q in sent]
    assert all(a.status is ResultStatus.OK for a in answers)
    assert {a.worker_id for a in answers} == {"worker1", "worker2"}
    for host in ("worker1", "worker2"):  # each worker's metrics on its own address, none on the client's loopback
        assert read_metric(9102, "meridian_worker_loaded_variants", rig.host(host).address) == 1
        assert read_metric(9102, "meridian_worker_loaded_variants") is None


def test_the_brokers_speak_only_tls_and_the_client_is_held_to_its_acls(rig: HostsRig) -> None:
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):  # no PLAINTEXT listener on any broker
        KafkaAdminClient(bootstrap_servers=rig.kafka_bootstrap, request_timeout_ms=3000, bootstrap_timeout_ms=5000)
    admin = make_admin(rig.settings())  # the client of digits, over SASL_SSL
    try:
        described = {t["name"]: t["error_code"] for t in admin.describe_topics(
            [topics.results_topic(CLIENT_APPLICATION), topics.WORKER_EVENTS, topics.dispatch_topic("worker1")])}
    finally:
        admin.close()
    assert described == {topics.results_topic(CLIENT_APPLICATION): 0,
                         topics.WORKER_EVENTS: TopicAuthorizationFailedError.errno,
                         topics.dispatch_topic("worker1"): TopicAuthorizationFailedError.errno}


def test_a_workers_host_cut_off_under_load_loses_nothing_and_the_other_worker_carries_it(rig: HostsRig) -> None:
    result = drills.run(rig, [("worker", "worker1")], rate=30.0, spacing_s=15.0, cut_s=6.0)
    (drill,) = result["drills"]
    assert result["lost"] == 0
    assert drill["first_ok_after_cut_s"] is not None and drill["first_ok_after_cut_s"] < 2.0
    assert drill["recovery_s"] is not None and drill["recovery_s"] < drill["healed_at_s"] - drill["cut_at_s"]


def test_the_serving_schedulers_host_cut_off_past_its_session_timeout_hands_the_application_to_the_standby(
        rig: HostsRig) -> None:
    before = {h: read_metric(9101, "meridian_batch_rows_count", rig.host(h).address) or 0 for h in ("sched1", "sched2")}
    result = drills.run(rig, [("scheduler", "active")], rate=30.0, spacing_s=25.0, cut_s=14.0)
    (drill,) = result["drills"]
    standby = {"sched1": "sched2", "sched2": "sched1"}[drill["host"]]
    after = read_metric(9101, "meridian_batch_rows_count", rig.host(standby).address) or 0
    assert result["lost"] == 0
    assert after > before[standby], "the standby dispatched nothing: it never took the application over"
    assert drill["recovery_s"] is not None and drill["recovery_s"] < drill["healed_at_s"] - drill["cut_at_s"]
