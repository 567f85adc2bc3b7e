"""Real photographs served through Kafka by a real onnxruntime worker: encoded images (OIP ``BYTES``) that any
EfficientNet-Lite variant serves at its own resolution, batches of them, and bad images answered alone."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from schemas import Query, ResultStatus
from services.demo.photos import InProcess
from services.drills.hostile_images import HOSTILE_IMAGES, hostile_images
from services.launcher import LocalLauncher, ManagedProcess
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.modelzoo import photos
from shared.settings import Settings
from shared.tensors import encode_images

pytestmark = pytest.mark.integration

APPLICATION = "photos"
VARIANTS = ["efficientnet-lite0", "efficientnet-lite2"]
ENV = {"MERIDIAN_APPLICATIONS": json.dumps({APPLICATION: ["efficientnet-lite"]})}
SLO_MS = 60_000.0  # what is checked here is the answer, not its latency


@pytest.fixture(scope="module")
def image_worker(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, ManagedProcess]]:
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("images")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19401, extra_env=ENV)
        worker = launcher.start_worker("img-w1", variants=VARIANTS, metrics_port=19402, extra_env=ENV)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        yield stack.settings().model_copy(update={"applications": {APPLICATION: ["efficientnet-lite"]}}), worker


@pytest.fixture(scope="module")
def serving(image_worker: tuple[Settings, ManagedProcess]) -> Settings:
    return image_worker[0]


def in_process(variant: str, images: list[bytes], settings: Settings) -> list[int]:
    """The top-1 class of each image, ``variant`` run here on the same preprocessing."""
    return InProcess(settings.models_dir).top1(variant, images)


def image_query(images: list[bytes], *, model: str = "efficientnet-lite", prefix: str = "img") -> tuple[Query, bytes]:
    inputs = encode_images(images)
    query = Query(query_id=f"{prefix}-{uuid.uuid4().hex[:12]}", application=APPLICATION, model=model, slo_ms=SLO_MS,
                  batch_size=len(images), inputs=inputs.tensors, sent_at=time.time())
    return query, inputs.binary


def served(settings: Settings, queries: list[tuple[Query, bytes]], timeout_s: float = 120.0) -> dict[str, object]:
    with MeridianClient(settings, applications=[APPLICATION]) as client:
        for query, binary in queries:
            client.send(query, binary)
        client.flush()
        assert client.wait_for([q.query_id for q, _ in queries], timeout_s)
        return {query_id: result for query_id, (result, _) in client.results.items()}


def test_one_image_query_is_served_by_each_variant_at_its_own_resolution(serving: Settings) -> None:
    shots = photos.photographs()
    queries = {(shot.name, variant): image_query([shot.jpeg], model=variant) for shot in shots for variant in VARIANTS}
    results = served(serving, list(queries.values()))
    for (name, variant), (query, _) in queries.items():
        result = results[query.query_id]
        shot = next(s for s in shots if s.name == name)
        assert result.status is ResultStatus.OK and result.variant == variant and not result.emulated, result
        assert result.predictions == in_process(variant, [shot.jpeg], serving), (name, variant)
        assert result.predictions[0] in shot.classes, f"{name} ({shot.subject}) on {variant}: {result.predictions}"


def test_a_query_of_64_photographs_is_served_as_one_batch(serving: Settings) -> None:
    shots = photos.augmented(64, seed=1)
    query, binary = image_query([s.jpeg for s in shots], model="efficientnet-lite0")
    result = served(serving, [(query, binary)])[query.query_id]
    assert result.status is ResultStatus.OK and len(result.predictions) == 64
    assert result.predictions == in_process("efficientnet-lite0", [s.jpeg for s in shots], serving)


def test_bad_images_are_answered_alone_with_their_reasons_and_memory_stays_bounded(
        image_worker: tuple[Settings, ManagedProcess]) -> None:
    """bench-faults' hostile-images drill, one round: every kind answered ``error`` with its reason, the
    photographs between them ``ok``, the worker up, its peak memory grown by less than one image's bound."""
    settings, worker = image_worker
    outcome = hostile_images(settings, APPLICATION, worker, rounds=1)
    assert outcome.hostile == len(HOSTILE_IMAGES) and outcome.answered_with_their_reason == outcome.hostile, outcome
    assert outcome.genuine_ok == outcome.genuine and outcome.worker_alive, outcome
    assert outcome.peak_rss_after_mb - outcome.peak_rss_before_mb <= outcome.memory_bound_mb, outcome
