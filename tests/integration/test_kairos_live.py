"""Kairos live: the scheduler matches queries to an emulated heterogeneous fleet that the planner chose
from the observed query sizes and the fleet service started, all through Kafka."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from kafka import TopicPartition

from schemas import AllocationPlan, Query, ResultStatus
from services.launcher import LocalLauncher, read_metric, wait_until
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_consumer
from shared.sim.arrivals import deeprecsys_sizes
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

ENV = {
    "MERIDIAN_PROFILE_SOURCES": json.dumps(["kairos"]),
    "MERIDIAN_APPLICATIONS": json.dumps({"rm2": ["rm2"]}),
    "MERIDIAN_PLANNER_MIN_QUERIES": "300",
    "MERIDIAN_PLANNER_BUDGET_PER_HOUR": "1.0",
    "MERIDIAN_FLEET_METRICS_PORT_BASE": "19400",
}


@pytest.fixture(scope="module")
def kairos_stack(stack, tmp_path_factory) -> Iterator[LocalLauncher]:
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("kairos-logs")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19331, policy="kairos", extra_env=ENV)
        planner = launcher.start_planner(metrics_port=19332, extra_env=ENV)
        fleet = launcher.start_fleet(metrics_port=19333, extra_env=ENV)
        for process in (scheduler, planner, fleet):
            wait_until(lambda p=process: read_metric(p.metrics_port, "python_info") is not None, 60,
                       f"{process.name} metrics", [process])
        yield launcher


def query(batch_size: int) -> Query:
    return Query(query_id=f"rm2-{uuid.uuid4().hex}", application="rm2", model="rm2", slo_ms=350.0,
                 batch_size=batch_size, sent_at=time.time())


def send(client: MeridianClient, sizes: np.ndarray, rate: float) -> list[str]:
    batch_sizes = iter(sizes)
    sender = Sender(client, lambda: query(int(next(batch_sizes))), rate, count=len(sizes))
    sender.wait()
    client.flush()
    return [q.query_id for q in sender.sent]


def test_planner_chooses_a_fleet_and_kairos_serves_on_it(kairos_stack, settings) -> None:
    plans = make_consumer(settings, group_id=None, fetch_max_wait_ms=100)
    partition = TopicPartition(topics.PLANS, 0)
    plans.assign([partition])
    plans.seek_to_end(partition)
    plans.position(partition)  # resolve "end" now, before the plan can be written
    rng = np.random.default_rng(3)
    with MeridianClient(settings, applications=["rm2"]) as client:
        send(client, deeprecsys_sizes(400, rng), rate=150.0)  # no workers yet: these show the planner the sizes
        plan = None
        deadline = time.monotonic() + 30
        while plan is None and time.monotonic() < deadline:
            for records in plans.poll(timeout_ms=500).values():
                plan = AllocationPlan.model_validate_json(records[-1].value)
        plans.close()
        assert plan is not None, "the planner published no plan"
        assert plan.planner == "kairos" and plan.status == "feasible" and plan.cost_per_hour <= 1.0
        devices = [p.device for p in plan.placements]
        assert "g4dn.xlarge" in devices, plan.message
        scheduler = kairos_stack.processes["scheduler"]
        kairos_stack.wait_for_workers(scheduler, len(devices), timeout_s=90)
        served = send(client, deeprecsys_sizes(300, rng), rate=20.0)
        answered = client.wait_for(served, timeout_s=60)
        got = [client.results[q][0] for q in served if q in client.results]
        assert answered, f"{len(got)} of {len(served)} answered: {sorted({(r.status.value, r.reason) for r in got})[:5]}"
        results = [client.results[q][0] for q in served]
    # the largest queries need ~70% of their 350 ms SLO on the fastest device: one held up in transport may
    # no longer make its deadline, and is then dropped, saying so (by the scheduler, or by the worker when
    # the deadline passed on its way there), rather than answered late
    ok = [r for r in results if r.status is ResultStatus.OK]
    assert all(r.status is ResultStatus.DROPPED and ("would miss its deadline" in r.reason
                                                     or "its deadline passed" in r.reason)
               for r in results if r.status is not ResultStatus.OK), {r.reason for r in results}
    assert len(ok) >= 0.95 * len(results), f"{len(ok)} of {len(results)} ok"
    assert all(r.emulated for r in ok)
    assert {r.device for r in ok} <= set(devices)
    assert len({r.device for r in ok}) > 1, "Kairos should use the heterogeneous fleet, not only the GPU"
