"""Kairos following the load on the real stack: the planner grows the fleet on a rise and shrinks it after
the fall (`shared.kairos.sizing`), the fleet service starts and stops the machines, and no query is lost.

The machines are `make bench-cost`'s: EfficientNet-Lite2 on CPU machine types at the Kairos artifact's
prices, each worker emulated from its profile (an r5n.large serves ~43 images/s), booting in `BOOT_S`.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cost import APPLICATION, FAMILY, SLO_MS, cost_profiles
from schemas import Query, ResultStatus
from services.launcher import LocalLauncher, metrics_text, read_metric, wait_until
from services.serve_config import settings_env
from shared.adapters.client import MeridianClient
from shared.settings import Settings
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

SCHEDULER_PORT, PLANNER_PORT, FLEET_PORT = 19861, 19862, 19863
BOOT_S = 2.0
FIELDS = {"applications": {APPLICATION: [FAMILY]}, "application_slo_ms": {APPLICATION: SLO_MS}, "planner": "kairos",
          "planner_budget_per_hour": 1.1, "planner_min_queries": 100, "planner_kairos_headroom": 1.15,
          "load_stats_interval_s": 1.0, "pipeline_partial_batches": True}
#: the load: one machine's worth, a ramp to two machines' worth, then back to one
LOW_QPS, HIGH_QPS, RAMP_S = 20.0, 65.0, 20.0


@pytest.fixture(scope="module")
def following(stack, tmp_path_factory) -> Iterator[LocalLauncher]:
    profiles_dir = tmp_path_factory.mktemp("following-profiles")
    profiles = cost_profiles(Settings().kairos_data_dir)
    profiles = profiles.model_copy(update={"devices": [d.model_copy(update={"startup_s": BOOT_S})
                                                       for d in profiles.devices]})
    (Path(profiles_dir) / "cost.json").write_text(profiles.model_dump_json())
    env = {**stack.env, **settings_env(FIELDS), "MERIDIAN_PROFILES_DIR": str(profiles_dir),
           "MERIDIAN_LOCAL_DEVICE": "none", "MERIDIAN_FLEET_METRICS_PORT_BASE": "19870"}
    with LocalLauncher(env, tmp_path_factory.mktemp("following-logs")) as launcher:
        services = [launcher.start_scheduler(metrics_port=SCHEDULER_PORT, policy="kairos"),
                    launcher.start_planner(metrics_port=PLANNER_PORT), launcher.start_fleet(metrics_port=FLEET_PORT)]
        for process in services:
            wait_until(lambda p=process: read_metric(p.metrics_port, "meridian_dead_letters_total") is not None, 60,
                       process.name, services)
        yield launcher


def fleet_actions(action: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text(FLEET_PORT).splitlines()
               if line.startswith("meridian_scaling_actions_total{") and f'action="{action}"' in line)


def workers() -> float:
    return read_metric(SCHEDULER_PORT, "meridian_scheduler_workers") or 0.0


def query() -> Query:
    return Query(query_id=f"kf-{uuid.uuid4().hex}", application=APPLICATION, model=FAMILY, slo_ms=SLO_MS,
                 batch_size=1, sent_at=time.time())


def test_the_fleet_grows_into_a_rise_and_shrinks_after_it_losing_no_query(following, settings) -> None:
    client_settings = settings.model_copy(update={"applications": FIELDS["applications"],
                                                  "application_slo_ms": FIELDS["application_slo_ms"]})
    scheduler = following.processes["scheduler"]
    with MeridianClient(client_settings, applications=[APPLICATION]) as client:
        with Sender(client, query, LOW_QPS) as sender:
            # the first queries show the planner the sizes and the rate; they wait for no machine at all
            following.wait_for_workers(scheduler, 1, timeout_s=60)
            serving_from = time.time()
            assert fleet_actions("start") == 1, "planned for the low rate: one machine"
            sender.follow(lambda t: LOW_QPS + (HIGH_QPS - LOW_QPS) * min(1.0, t / RAMP_S))
            following.wait_for_workers(scheduler, 2, timeout_s=RAMP_S + 20)
            grown_at = time.time()
            wait_until(lambda: time.time() - grown_at > 5, 10, "the peak")
            sender.follow(lambda _: LOW_QPS)
            wait_until(lambda: fleet_actions("stop") >= 1 and workers() == 1, 40,
                       "the fleet to give a machine back after the fall", list(following.processes.values()))
        sent = list(sender.sent)
        client.wait_for([q.query_id for q in sent], timeout_s=30)
        missing = [q.query_id for q in sent if q.query_id not in client.results]
        results = {q.query_id: client.results[q.query_id] for q in sent if q.query_id in client.results}
    assert not missing, f"{len(missing)} of {len(sent)} queries got no answer"
    assert {r.status for r, _ in results.values()} <= {ResultStatus.OK, ResultStatus.DROPPED}
    served = [q for q in sent if q.sent_at >= serving_from]
    on_time = sum(1 for q in served if results[q.query_id][0].status is ResultStatus.OK
                  and (results[q.query_id][1] - q.sent_at) * 1000 <= SLO_MS)
    assert on_time >= 0.95 * len(served), f"{on_time} of {len(served)} within the SLO once a machine served"
