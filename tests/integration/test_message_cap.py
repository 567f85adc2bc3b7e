"""No batch's message exceeds the cap, and a send that fails is answered, not wedged.

40 EfficientNet-Lite0 input tensors (588 KiB each, 23.5 MB together) queue behind a batch of 64
photographs on a real worker. The scheduler's catalogue is given a profile of Lite0 whose batches cost
little more as they grow (1 s for one row, 2 s for 64), so first come first served batches every query
that waits; the worker computes for real whatever the profile says.

- With the default bound, the core cuts that batch to what one message carries: every query is answered
  ``ok``, in batches of at most 15 MiB of inputs.
- Told that a batch may carry 64 MiB (more than the 16 MiB librdkafka and the broker take), the
  scheduler builds the 23.5 MB batch; librdkafka refuses it, each of its queries is answered ``error``
  with the reason, and the worker, freed, serves what comes next.
"""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import Query, ResultStatus
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.modelzoo import efficientnet, photos
from shared.onnx_runtime import make_session, run_batch
from shared.profiles import ProfileSet
from shared.settings import REPO_ROOT, Settings
from shared.tensors import encode_binary
from tests.integration.test_images import APPLICATION, SLO_MS, image_query, served

pytestmark = pytest.mark.integration

APPLICATIONS = {APPLICATION: ["efficientnet-lite"]}
TENSORS = 40


def batching_profiles(directory: Path) -> Path:
    """The committed EfficientNet-Lite profiles, Lite0's batch latencies replaced by 1 s + 1 s * rows / 64."""
    committed = ProfileSet.load(REPO_ROOT / "profiles" / "efficientnet-lite.json")
    variants = [p.model_copy(update={"batch_latency_ms": {b: 1000.0 + 1000.0 * b / 64 for b in p.batch_latency_ms},
                                     "latency_samples_ms": None}) if p.variant == "efficientnet-lite0" else p
                for p in committed.variants]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "efficientnet-lite.json").write_text(committed.model_copy(update={"variants": variants})
                                                      .model_dump_json(indent=1))
    return directory


@pytest.fixture
def launch(stack: LocalStack, tmp_path: Path) -> Iterator:
    """Starts a scheduler (with ``extra_env``) and a real Lite0 worker; returns the client's settings."""
    env = {"MERIDIAN_APPLICATIONS": json.dumps(APPLICATIONS),
           "MERIDIAN_PROFILES_DIR": str(batching_profiles(tmp_path / "profiles")),
           # the worker announces no measurement: the scheduler and its policy serve it by the profile above
           "MERIDIAN_WORKER_SELF_MEASURE": "false"}
    with LocalLauncher(stack.env, tmp_path / "logs") as launcher:
        def start(extra_env: dict[str, str]) -> Settings:
            scheduler = launcher.start_scheduler(metrics_port=19411, extra_env={**env, **extra_env})
            launcher.start_worker("cap-w1", variants=["efficientnet-lite0"], metrics_port=19412, extra_env=env)
            launcher.wait_for_workers(scheduler, 1, timeout_s=120)
            return stack.settings().model_copy(update={"applications": APPLICATIONS, **{
                "max_batch_payload_bytes": int(extra_env.get("MERIDIAN_MAX_BATCH_PAYLOAD_BYTES", 15 * 2**20))}})
        yield start


def queued_tensors() -> tuple[list[tuple[Query, bytes]], int]:
    """A batch of 64 photographs, then ``TENSORS`` Lite0 input tensors; and the top-1 class of that tensor."""
    tensor = efficientnet.preprocess(photos.pixels("coffee"), 224)
    rows = encode_binary(tensor)
    busy = image_query([s.jpeg for s in photos.augmented(64, seed=3)], model="efficientnet-lite0")
    tensors = [(Query(query_id=f"big-{uuid.uuid4().hex[:12]}", application=APPLICATION, model="efficientnet-lite0",
                      slo_ms=SLO_MS, batch_size=1, inputs=rows.tensors, sent_at=time.time()), rows.binary)
               for _ in range(TENSORS)]
    session = make_session(Settings().models_dir / "efficientnet-lite0.onnx")
    return [busy, *tensors], int(run_batch(session, tensor).argmax())


def test_a_batch_is_cut_to_what_one_message_carries(launch) -> None:
    settings = launch({})
    queries, expected = queued_tensors()
    results = served(settings, queries)
    answers = [results[q.query_id] for q, _ in queries[1:]]
    assert all(r.status is ResultStatus.OK for r in answers), Counter(r.reason for r in answers)
    per_batch = Counter(r.batch_id for r in answers)
    rows_per_message = settings.max_batch_payload_bytes // len(queries[1][1])
    assert max(per_batch.values()) == rows_per_message, per_batch  # the policy batched all it could
    assert {r.predictions[0] for r in answers} == {expected}


def test_a_batch_over_the_message_cap_is_answered_error_and_its_worker_serves_on(launch) -> None:
    settings = launch({"MERIDIAN_MAX_BATCH_PAYLOAD_BYTES": str(64 * 2**20)})
    queries, _ = queued_tensors()
    results = served(settings, queries)
    answers = [results[q.query_id] for q, _ in queries[1:]]
    failed = [r for r in answers if r.status is ResultStatus.ERROR]
    assert failed, Counter(r.batch_id for r in answers)
    assert all("its batch could not be sent to worker cap-w1" in r.reason and "too large" in r.reason.lower()
               for r in failed), failed[0].reason
    after = image_query([photos.photographs()[0].jpeg], model="efficientnet-lite0")
    assert served(settings, [after])[after[0].query_id].status is ResultStatus.OK
