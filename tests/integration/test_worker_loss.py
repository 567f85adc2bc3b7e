"""A worker killed under load loses no query: its unfinished batches are re-dispatched, and a worker
restarted with the same id resumes from its committed offset; the client sees one result per query."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from schemas import ResultStatus
from services.launcher import LocalLauncher
from shared.adapters.client import MeridianClient
from tests.integration.helpers import digits_rows, make_query

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_workers(stack, digits_variants, tmp_path_factory) -> Iterator[LocalLauncher]:
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("loss-logs")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19341)
        for index in (1, 2):
            launcher.start_worker(f"loss-w{index}", variants=digits_variants[:1], metrics_port=19341 + index)
        launcher.wait_for_workers(scheduler, 2, timeout_s=90)
        yield launcher


def test_sigkill_and_restart_of_a_worker_loses_nothing(two_workers, settings, digits_variants) -> None:
    x, _ = digits_rows()
    rng = np.random.default_rng(11)
    queries = [make_query(x[rng.integers(0, len(x), size=2)], slo_ms=2000.0) for _ in range(400)]
    with MeridianClient(settings) as client:
        def kill_then_restart() -> None:
            time.sleep(1.5)
            two_workers.processes["worker-loss-w1"].kill()
            time.sleep(4.0)  # past the 3-heartbeat timeout: the scheduler re-queues its batches
            two_workers.processes.pop("worker-loss-w1")
            two_workers.start_worker("loss-w1", variants=digits_variants[:1], metrics_port=19342)

        chaos = threading.Thread(target=kill_then_restart)
        chaos.start()
        for query in queries:
            client.send(query)
            time.sleep(0.01)
        client.flush()
        chaos.join()
        ids = [q.query_id for q in queries]
        assert client.wait_for(ids, timeout_s=60), f"{len(set(ids) - set(client.results))} queries lost"
        statuses = [client.results[q][0].status for q in ids]
    assert statuses.count(ResultStatus.OK) + statuses.count(ResultStatus.DROPPED) == len(ids)
    assert statuses.count(ResultStatus.OK) >= 0.9 * len(ids), "re-dispatch should answer nearly all in time"
