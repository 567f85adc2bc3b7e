"""RAMSIS live: a policy set generated offline into Redis by the CLI, then an `ramsis` scheduler choosing
model and batch per worker queue from it. Workers emulate cpu-1t EfficientNet-Lite0/1/2 from their
measured profiles (published accuracies)."""
from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from schemas import Query, ResultStatus
from services.launcher import LocalLauncher
from shared.adapters.client import MeridianClient
from shared.adapters.ramsis_store import RedisPolicyStore
from shared.settings import REPO_ROOT
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

SET_NAME = f"it-vision-{uuid.uuid4().hex[:6]}"
VARIANTS = ["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"]
ENV = {"MERIDIAN_APPLICATIONS": '{"vision": ["efficientnet-lite"]}', "MERIDIAN_LOCAL_DEVICE": "none",
       "MERIDIAN_SCHEDULER_POLICY": "ramsis", "MERIDIAN_RAMSIS_POLICY_SET": SET_NAME}


@pytest.fixture(scope="module")
def ramsis(stack, settings, tmp_path_factory) -> Iterator[LocalLauncher]:
    generated = subprocess.run(
        [sys.executable, "-m", "services.ramsis_generate",
         "--profiles", str(REPO_ROOT / "profiles/efficientnet-lite.json"),
         "--family", "efficientnet-lite", "--device", "cpu-1t", "--slo-ms", "400", "--workers", "2",
         "--min-rate", "5", "--max-rate", "120", "--num-rates", "4", "--name", SET_NAME,
         "--redis-url", settings.redis_url], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert generated.returncode == 0, generated.stderr[-2000:]
    with LocalLauncher({**stack.env, **ENV}, tmp_path_factory.mktemp("ramsis-logs")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19761)
        for index in (1, 2):
            launcher.start_worker(f"ramsis-w{index}", variants=VARIANTS, metrics_port=19761 + index,
                                  emulate="cpu-1t", extra_env=ENV)
        launcher.wait_for_workers(scheduler, 2, timeout_s=120)
        yield launcher


def test_the_policy_set_lives_in_redis(ramsis, settings) -> None:
    policies = RedisPolicyStore(redis.Redis.from_url(settings.redis_url)).load(SET_NAME)
    assert policies.workers == (2,) and len(policies) >= 4


def query() -> Query:
    return Query(query_id=f"rm-{uuid.uuid4().hex}", application="vision", model="efficientnet-lite", slo_ms=400.0,
                 batch_size=1, sent_at=time.time())


def send(client: MeridianClient, rate_qps: float, duration_s: float) -> list[str]:
    sender = Sender(client, query, rate_qps, count=int(rate_qps * duration_s))
    sender.wait()
    client.flush()
    return [q.query_id for q in sender.sent]


def test_queries_are_served_by_the_policy_and_accuracy_scales_with_load(ramsis, settings) -> None:
    with MeridianClient(settings, applications=["vision"]) as client:
        light = send(client, 5.0, 6.0)
        heavy = send(client, 110.0, 6.0)
        assert client.wait_for(light + heavy, timeout_s=60), "every query gets a final result"
        results = {q: client.results[q][0] for q in light + heavy}
    ok = [r for r in results.values() if r.status is ResultStatus.OK]
    assert len(ok) >= 0.9 * len(results), Counter(r.reason for r in results.values())
    assert all(r.variant in VARIANTS and r.emulated for r in ok)
    served = {name: Counter(results[q].variant for q in ids if results[q].status is ResultStatus.OK)
              for name, ids in (("light", light), ("heavy", heavy))}
    # light load: the policy can afford the most accurate model; heavy load: it trades accuracy for capacity
    assert served["light"].most_common(1)[0][0] == "efficientnet-lite2", served
    assert sum(n for v, n in served["heavy"].items() if v != "efficientnet-lite2") > 0, served
