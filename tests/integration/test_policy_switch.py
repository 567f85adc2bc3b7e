"""A dispatch policy per application, switched while serving: under steady load an operator switches one
application from fcfs to proteus (`meridian switch`); every query still gets exactly
one answer, that application's later batches are proteus's, the other application stays with fcfs, and a
switch the scheduler cannot make goes to the dead letters while serving goes on.

Workers emulate cpu-1t from the measured profiles: two serve EfficientNet-Lite, one the digits family.
The applications' names are this test's own, and the control topic is emptied afterwards, so that no
scheduler started later in the session replays these switches.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from itertools import cycle

import pytest
from kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from schemas import Query, ResultStatus, SwitchPolicy
from services.launcher import LocalLauncher, metrics_text, wait_until
from shared.adapters import topics
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin, make_consumer, make_producer
from shared.settings import Settings
from tests.integration.helpers import DeadLetterReader
from tests.integration.senders import Sender

pytestmark = pytest.mark.integration

SCHEDULER = 19861
VISION, DIGITS = "sw-vision", "sw-digits"
ENV = {"MERIDIAN_APPLICATIONS": f'{{"{VISION}": ["efficientnet-lite"], "{DIGITS}": ["digits"]}}'}
WORKERS = {"sw-v1": (["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"], 19862),
           "sw-v2": (["efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2"], 19863),
           "sw-d1": (["digits-cnn-s", "digits-cnn-l"], 19864)}


@pytest.fixture(scope="module")
def serving(stack, settings: Settings, tmp_path_factory) -> Iterator[LocalLauncher]:
    launcher = LocalLauncher({**stack.env, **ENV}, tmp_path_factory.mktemp("switch-logs"))
    try:
        scheduler = launcher.start_scheduler(metrics_port=SCHEDULER, policy="fcfs")
        for worker_id, (variants, port) in WORKERS.items():
            launcher.start_worker(worker_id, variants=variants, metrics_port=port, emulate="cpu-1t")
        launcher.wait_for_workers(scheduler, len(WORKERS), timeout_s=60)
        yield launcher
    finally:
        launcher.stop_all()
        forget_switches(settings)


def forget_switches(settings: Settings) -> None:
    """Delete what this test published on the control topic: a scheduler reads it from its start."""
    partition = TopicPartition(topics.CONTROL, 0)
    consumer = make_consumer(settings, group_id=None)
    admin = make_admin(settings)
    try:
        admin.delete_records({partition: consumer.end_offsets([partition])[partition]})
    finally:
        admin.close()
        consumer.close()


def sample(name: str, **labels: str) -> float | None:
    """One sample of the scheduler's metrics, by name and exact labels (None if absent)."""
    for family in text_string_to_metric_families(metrics_text(SCHEDULER)):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return None


def dispatched(application: str, policy: str) -> float:
    return sample("meridian_scheduler_dispatched_queries_total", application=application, policy=policy) or 0.0


def query(application: str, model: str, slo_ms: float) -> Query:
    return Query(query_id=f"sw-{uuid.uuid4().hex}", application=application, model=model, slo_ms=slo_ms,
                 batch_size=1, sent_at=time.time())


def test_one_application_switches_from_fcfs_to_proteus_under_load(serving, stack, settings) -> None:
    scheduler = serving.processes["scheduler"]
    letters = DeadLetterReader(settings)
    with MeridianClient(settings, applications=[VISION, DIGITS]) as client:
        both = cycle(((VISION, "efficientnet-lite", 400.0), (DIGITS, "digits", 1000.0)))
        sender = Sender(client, lambda: query(*next(both)), 2 * 10.0)  # 10 queries/s to each application
        try:
            wait_until(lambda: {r.application for r, _ in list(client.results.values())
                                if r.status is ResultStatus.OK} == {VISION, DIGITS}, 30, "both applications served",
                       [scheduler])
            time.sleep(2.0)
            command = subprocess.run([sys.executable, "-m", "services.cli.switch", "--application", VISION,
                                      "--policy", "proteus", "--requested-by", "test"], env={**os.environ, **stack.env},
                                     capture_output=True, text=True, timeout=60)
            assert command.returncode == 0, command.stderr
            wait_until(lambda: sample("meridian_scheduler_policy", application=VISION, policy="proteus") == 1.0, 15,
                       "the scheduler to switch", [scheduler])
            switched_at, fcfs_before = time.time(), dispatched(VISION, "fcfs")
            time.sleep(4.0)

            producer = make_producer(settings)
            bad = SwitchPolicy(application=VISION, policy="nonesuch", at=time.time())
            producer.send(topics.CONTROL, key=VISION.encode(), value=bad.model_dump_json().encode())
            producer.send(topics.CONTROL, key=VISION.encode(), value=b'{"application": ')
            producer.flush()
            producer.close()
            refused, deadline = [], time.monotonic() + 20
            while len(refused) < 2 and time.monotonic() < deadline:
                refused += [letter for letter in letters.read(1, timeout_s=1) if letter.source_topic == topics.CONTROL]
            refused_at = time.time()
            time.sleep(3.0)
        finally:
            sender.stop()
            letters.close()
        client.flush()
        ids = [q.query_id for q in sender.sent]
        assert client.wait_for(ids, timeout_s=30), "every query has a final result"
        assert client.duplicates == 0 and len(set(ids)) == len(ids)
        results = {query_id: client.results[query_id][0] for query_id in ids}

    statuses = Counter(r.status.value for r in results.values())
    assert statuses["ok"] >= 0.95 * len(ids) and not statuses["rejected"], statuses
    # the refused switches: one line of reason each, and serving went on with proteus
    reasons = sorted(letter.reason for letter in refused)
    assert len(reasons) == 2 and reasons[0].startswith("malformed message: the message is not valid JSON"), reasons
    assert reasons[1].startswith("unknown dispatch policy 'nonesuch'; valid: fcfs,"), reasons
    assert sample("meridian_scheduler_policy", application=VISION, policy="proteus") == 1.0
    after_refusal = [results[q.query_id] for q in sender.sent if q.sent_at > refused_at]
    # serving went on: answered, and in time but for what a 2-core machine's hiccup may cost
    after = Counter(r.status for r in after_refusal)
    assert after_refusal and not after[ResultStatus.REJECTED], after
    assert after[ResultStatus.OK] >= 0.9 * len(after_refusal), after
    # every dispatched query counted once, under the policy that chose its batch
    for application in (VISION, DIGITS):
        sent_to_workers = sum(1 for r in results.values() if r.application == application and r.timestamps.dispatched)
        assert dispatched(application, "fcfs") + dispatched(application, "proteus") == sent_to_workers, application
    assert dispatched(VISION, "fcfs") == fcfs_before > 0, "no fcfs batch for the switched application after the switch"
    vision_later = sum(1 for q in sender.sent
                       if q.application == VISION and q.sent_at > switched_at and results[q.query_id].variant)
    assert dispatched(VISION, "proteus") >= vision_later > 20
    # the other application never noticed
    assert sample("meridian_scheduler_policy", application=DIGITS, policy="fcfs") == 1.0
    assert sample("meridian_scheduler_policy", application=DIGITS, policy="proteus") is None
    assert dispatched(DIGITS, "proteus") == 0 and dispatched(DIGITS, "fcfs") > 50
    assert sample("meridian_scheduler_policy", application=VISION, policy="fcfs") == 0.0
    log = scheduler.log_path.read_text()
    assert f"application '{VISION}': dispatch policy fcfs -> proteus, as test asked" in log
    assert "unknown dispatch policy 'nonesuch'" in log
