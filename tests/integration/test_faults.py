"""Fault drills on the real stack: every query gets a final result at the client (which suppresses the
duplicates a crash can cause), none is lost.

Each drill runs a short steady load (the benchmark ``make bench-faults`` runs them longer). The broker
and Redis drills restart this session's broker and Redis, so they run on a stack of their own.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from services.drills.hostile import flood
from services.drills.scenarios import DRILLS, DrillConfig, scheduler_restart
from services.launcher import LocalLauncher, read_metric, wait_until
from services.stack import LocalStack

pytestmark = pytest.mark.integration

#: deadlines count from the client's send, so the SLO outlasts the outage (and the restart after it): every
#: query can still be answered, and one that is not was lost or dropped for a reason other than its age
SHORT = DrillConfig(rate_qps=30.0, duration_s=12.0, fault_at_s=4.0, outage_s=4.0, slo_ms=30_000.0, settle_s=90.0)

#: hypothesis takes ~5 ms of CPU per message on a slow host: 10,000 a topic (make bench-faults' count) cost CI
#: nine minutes, a third of its run; a thousand still covers every kind of corruption many times over
HOSTILE_PER_TOPIC = 1_000


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory) -> Iterator[LocalStack]:
    """A broker and Redis only these drills use (they restart them)."""
    with LocalStack(var_dir=tmp_path_factory.mktemp("faults-var"), kafka_port=19592, redis_port=16479,
                    components=("kafka", "redis")) as stack:
        yield stack


@pytest.mark.parametrize("drill", ["worker_kill", "scheduler_restart", "broker_restart", "redis_outage"])
def test_a_fault_under_load_loses_no_query(drill, own_stack, tmp_path) -> None:
    outcome = DRILLS[drill](own_stack, tmp_path, 19600, SHORT)
    assert outcome.sent == int(SHORT.rate_qps * SHORT.duration_s)
    assert outcome.lost == 0, outcome
    assert outcome.errors == 0 and outcome.rejected == 0, outcome
    assert outcome.answered + outcome.dropped == outcome.sent
    assert outcome.answered >= 0.9 * outcome.sent, outcome


def test_a_scheduler_restarted_at_once_hands_no_query_on_twice(own_stack, tmp_path) -> None:
    """Started again with no pause, the new scheduler re-reads the queries the killed one had handed on but
    not yet acknowledged: its read-back of the dispatch and results topics must skip every one of them."""
    outcome = scheduler_restart(own_stack, tmp_path, 19600, replace(SHORT, rate_qps=60.0, outage_s=0.0))
    assert outcome.lost == 0 and outcome.errors == 0, outcome
    assert outcome.duplicates_seen_by_client == 0, outcome


def test_overload_drops_explicitly_keeps_memory_bounded_and_recovers(own_stack, tmp_path) -> None:
    outcome = DRILLS["overload"](own_stack, tmp_path, 19610, DrillConfig(duration_s=15.0, slo_ms=1000.0))
    assert outcome.lost == 0, outcome
    assert outcome.dropped > 0, "3x capacity must shed load explicitly"
    # queries are dropped once queued a whole SLO (1 s): the queue holds a few seconds of arrivals at most,
    # not the whole run's (15 s)
    assert outcome.notes["peak_queue_depth"] <= 3 * outcome.notes["offered_qps"], outcome.notes
    assert outcome.notes["scheduler_rss_mb_peak"] < outcome.notes["scheduler_rss_mb_before"] + 100, outcome.notes
    assert outcome.notes["after_overload_within_slo_fraction"] >= 0.95, outcome.notes


def test_hostile_input_on_every_topic_is_dead_lettered_and_nothing_crashes(own_stack, tmp_path, digits_variants):
    with LocalLauncher(own_stack.env, tmp_path) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19620)
        launcher.start_worker("hostile-w", variants=digits_variants[:1], metrics_port=19621)
        launcher.start_planner(metrics_port=19622)
        registry = launcher.start_registry(metrics_port=19623)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        wait_until(lambda: read_metric(19623, "meridian_registry_ready") == 1.0, 60, "the registry", [registry])
        outcome = flood(own_stack.settings(), "hostile-w", per_topic=HOSTILE_PER_TOPIC, timeout_s=300,
                        alive=lambda: all(p.alive() for p in launcher.processes.values()))
    assert outcome.services_alive, outcome
    assert outcome.lost == 0, outcome.per_topic
