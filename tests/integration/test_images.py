"""Real photographs served through Kafka by a real onnxruntime worker: encoded images (OIP ``BYTES``) that any
EfficientNet-Lite variant serves at its own resolution, batches of them, and bad images answered alone."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from schemas import Query, ResultStatus
from services.demo.photos import InProcess
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.modelzoo import photos
from shared.settings import Settings
from shared.tensors import encode_images
from tests.unit.test_imaging import _bomb_png, _encoded

pytestmark = pytest.mark.integration

APPLICATION = "photos"
VARIANTS = ["efficientnet-lite0", "efficientnet-lite2"]
ENV = {"MERIDIAN_APPLICATIONS": json.dumps({APPLICATION: ["efficientnet-lite"]})}
SLO_MS = 60_000.0  # what is checked here is the answer, not its latency


@pytest.fixture(scope="module")
def serving(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with LocalLauncher(stack.env, tmp_path_factory.mktemp("images")) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19401, extra_env=ENV)
        launcher.start_worker("img-w1", variants=VARIANTS, metrics_port=19402, extra_env=ENV)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        yield stack.settings().model_copy(update={"applications": {APPLICATION: ["efficientnet-lite"]}})


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


def test_bad_images_are_answered_alone_with_their_reasons(serving: Settings) -> None:
    photo = np.asarray(photos.pixels("chelsea"))
    bad = {
        "a decompression bomb": (_bomb_png(30_000, 30_000), "a decompression bomb?"),
        "a truncated JPEG": (photos.encode_jpeg(photo)[:5000], "image file is truncated"),
        "a PNG with an alpha channel": (_encoded(np.zeros((40, 40, 4), np.uint8), "PNG"), "mode RGBA"),
        "a PNG of one channel": (_encoded(np.zeros((40, 40), np.uint8), "PNG"), "mode L"),
        "not an image": (b"plain text", "not a JPEG or PNG image"),
    }
    queries = {kind: image_query([encoded], prefix="bad-img") for kind, (encoded, _) in bad.items()}
    good = image_query([photos.photographs()[0].jpeg])
    results = served(serving, [*queries.values(), good])
    for kind, (query, _) in queries.items():
        result = results[query.query_id]
        assert result.status is ResultStatus.ERROR and bad[kind][1] in result.reason, (kind, result.reason)
    assert results[good[0].query_id].status is ResultStatus.OK
