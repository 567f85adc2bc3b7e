"""Two scheduler processes in one consumer group split four applications; one leaves and comes back
under load (SIGTERM, then SIGKILL): at the client, no query is lost and none is answered twice. Each is a
static member of the group under its name: stopped, it leaves the group; killed, it stays a member, for
its restart to take its partitions back."""
from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable

import numpy as np
import pytest
from kafka.partitioner.default import murmur2

from schemas import Query
from services.drills.load import run_drill
from services.drills.scenarios import DIGITS_TEST_SPLIT, DIGITS_VARIANTS
from services.launcher import LocalLauncher, ManagedProcess, read_metric, wait_until
from services.stack import LocalStack
from shared.adapters import topics
from shared.adapters.kafka_io import make_admin
from shared.settings import Settings
from shared.tensors import encode

pytestmark = pytest.mark.integration

#: one per partition of meridian.queries (keyed by application, murmur2 as the client partitions)
TENANTS = ("tenant-0", "tenant-1", "tenant-2", "tenant-3")
APPLICATIONS = {tenant: ["digits"] for tenant in TENANTS}
ENV = {"MERIDIAN_APPLICATIONS": json.dumps(APPLICATIONS)}
PORTS = {"scheduler-1": 19771, "scheduler-2": 19772}
#: the SLO outlasts the rebalance: a query that is not answered was lost, not late
RATE_QPS, DURATION_S, FAULT_AT_S, AWAY_S, SLO_MS = 40.0, 24.0, 6.0, 6.0, 30_000.0


def static_members(settings: Settings) -> set[str]:
    """The lasting names of the scheduler group's members, as its coordinator describes it now."""
    admin = make_admin(settings)
    try:
        group = admin.describe_groups([topics.SCHEDULER_GROUP])[topics.SCHEDULER_GROUP]
    finally:
        admin.close()
    return {member["group_instance_id"] for member in group["members"]}


def owned(process: ManagedProcess) -> int:
    return int(read_metric(process.metrics_port, "meridian_scheduler_query_partitions") or 0)


def tenant_queries() -> Callable[[], Query]:
    x = np.load(DIGITS_TEST_SPLIT)["x"].astype(np.float32)
    tenants, rng = itertools.cycle(TENANTS), np.random.default_rng(0)

    def make() -> Query:
        rows = x[rng.integers(0, len(x), size=1)]
        return Query(query_id=f"split-{uuid.uuid4().hex}", application=next(tenants), model="digits", slo_ms=SLO_MS,
                     batch_size=1, inputs=encode(rows), sent_at=time.time())
    return make


def test_the_tenants_fall_on_every_partition() -> None:
    assert sorted((murmur2(t.encode()) & 0x7FFFFFFF) % Settings().query_partitions for t in TENANTS) == [0, 1, 2, 3]


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_scheduler_leaving_and_returning_under_load_loses_and_repeats_nothing(how, stack: LocalStack, tmp_path):
    settings = stack.settings().model_copy(update={"applications": APPLICATIONS})
    with LocalLauncher(stack.env, tmp_path) as launcher:
        first = launcher.start_scheduler(name="scheduler-1", metrics_port=PORTS["scheduler-1"], extra_env=ENV)
        for index in (1, 2):
            launcher.start_worker(f"split-w{index}", variants=DIGITS_VARIANTS, metrics_port=19772 + index,
                                  extra_env=ENV)
        launcher.wait_for_workers(first, 2, timeout_s=120)
        second = launcher.start_scheduler(name="scheduler-2", metrics_port=PORTS["scheduler-2"], extra_env=ENV)
        launcher.wait_for_workers(second, 2, timeout_s=120)
        wait_until(lambda: owned(first) == owned(second) == 2, 60, "the two schedulers to own two partitions each",
                   [first, second])

        def leave_and_return() -> None:
            process = launcher.processes.pop("scheduler-2")
            process.stop() if how == "sigterm" else process.kill()
            # within the 10 s session timeout: only a stop, not a crash, takes it out of the group at once
            assert ("scheduler-2" in static_members(settings)) == (how == "sigkill")
            wait_until(lambda: owned(first) == 4, 60, "scheduler-1 to take every partition", [first])
            time.sleep(AWAY_S)
            back = launcher.start_scheduler(name="scheduler-2", metrics_port=PORTS["scheduler-2"], extra_env=ENV)
            wait_until(lambda: owned(first) == owned(back) == 2, 60, "the partitions to split again", [first, back])
        outcome = run_drill(settings, tenant_queries(), rate_qps=RATE_QPS, duration_s=DURATION_S,
                            fault_at_s=FAULT_AT_S, inject=leave_and_return, settle_s=90.0)
    assert outcome.sent == int(RATE_QPS * DURATION_S)
    assert outcome.lost == 0, outcome
    assert outcome.duplicates_seen_by_client == 0, outcome
    assert outcome.errors == 0 and outcome.rejected == 0 and outcome.dropped == 0, outcome
    assert outcome.answered == outcome.sent
