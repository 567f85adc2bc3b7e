"""Proteus live: the planner solves the MILP from load statistics and publishes plans, the fleet service
starts the workers each plan places, and the scheduler routes and batches by the plan. When the load
grows, the planner re-plans on the burst and trades accuracy for throughput.

Workers emulate cpu-1t EfficientNet-Lite0/1/2 from their measured profiles (published accuracies)."""
from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from schemas import AllocationPlan, Query, ResultStatus
from services.launcher import LocalLauncher, read_metric, wait_until
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_consumer
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

SCHEDULER, PLANNER, FLEET = 19781, 19782, 19783
ENV = {"MERIDIAN_APPLICATIONS": '{"vision": ["efficientnet-lite"]}', "MERIDIAN_LOCAL_DEVICE": "none",
       "MERIDIAN_SCHEDULER_POLICY": "proteus", "MERIDIAN_PLANNER": "proteus",
       "MERIDIAN_PLANNER_FLEET": '{"cpu-1t": 2}', "MERIDIAN_REPLAN_PERIOD_S": "10",
       "MERIDIAN_LOAD_STATS_INTERVAL_S": "1.0", "MERIDIAN_FLEET_METRICS_PORT_BASE": "19790"}
SLO_MS = 400.0
FASTER = {"efficientnet-lite0", "efficientnet-lite1"}


@pytest.fixture(scope="module")
def proteus(stack, tmp_path_factory) -> Iterator[LocalLauncher]:
    with LocalLauncher({**stack.env, **ENV}, tmp_path_factory.mktemp("proteus-logs")) as launcher:
        services = [launcher.start_scheduler(metrics_port=SCHEDULER),
                    launcher.start_planner(metrics_port=PLANNER), launcher.start_fleet(metrics_port=FLEET)]
        wait_until(lambda: all(read_metric(p.metrics_port, "meridian_dead_letters_total") is not None
                               for p in services), 90, "scheduler, planner and fleet", services)
        yield launcher


def query() -> Query:
    return Query(query_id=f"pr-{uuid.uuid4().hex}", application="vision", model="efficientnet-lite", slo_ms=SLO_MS,
                 batch_size=1, sent_at=time.time())


def plans_so_far(settings) -> list[AllocationPlan]:
    consumer = make_consumer(settings, topics.PLANS, group_id=None, consumer_timeout_ms=2000)
    try:
        return [AllocationPlan.model_validate_json(r.value) for r in consumer]
    finally:
        consumer.close()


def test_plans_are_applied_and_accuracy_scales_with_the_load(proteus, settings) -> None:
    with MeridianClient(settings, applications=["vision"]) as client:
        with Sender(client, query, 15.0) as sender:
            wait_until(lambda: any(r.status is ResultStatus.OK for r, _ in list(client.results.values())), 120,
                       "the first plan's workers to answer", list(proteus.processes.values()))
            time.sleep(5.0)
            light_from = time.time()
            time.sleep(8.0)
            sender.follow(lambda _: 150.0)
            heavy_from = time.time()
            wait_until(lambda: any(p.planner == "proteus" and "burst" in p.message and p.at >= heavy_from
                                   and set(p.routing.get("vision", {})) & FASTER for p in plans_so_far(settings)),
                       90, "a re-plan on the burst that routes to a faster, less accurate variant",
                       list(proteus.processes.values()))
            time.sleep(12.0)  # the new plan's workers start before the old ones stop
            steady_from = time.time()
            time.sleep(8.0)
        client.flush()
        ids = [q.query_id for q in sender.sent]
        assert client.wait_for(ids, timeout_s=60), "every query gets exactly one final result"

    def served(start: float, end: float) -> Counter:
        return Counter(client.results[q.query_id][0].variant or client.results[q.query_id][0].status.value
                       for q in sender.sent if start <= q.sent_at < end)

    light, steady = served(light_from, heavy_from), served(steady_from, float("inf"))
    assert light.most_common(1)[0][0] == "efficientnet-lite2", light
    # the MILP keeps as much accuracy as the load allows: part of the load moves to faster variants
    assert sum(steady[v] for v in FASTER) > 0.4 * sum(steady.values()), steady
    assert steady["dropped"] < 0.2 * sum(steady.values()), steady
    assert (read_metric(FLEET, "meridian_scaling_actions_total") or 0) >= 3, "initial workers, then a change"
