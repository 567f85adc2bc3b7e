"""Hostile image files among real photographs, sent to a real image worker through the scheduler.

Each file is a well-formed query whose one image cannot be served: a decompression bomb (a PNG of a few
hundred bytes whose header claims 30000 x 30000 pixels), one just over the pixel bound, a truncated JPEG,
PNGs with an alpha channel or a single one, a file that is no image, an empty one. The scheduler cannot
tell (it never reads the bytes); the worker answers each ``error`` with the reason of its kind and goes
on serving the photographs sent between them, which must all be answered ``ok``. The largest image a
worker accepts (`shared.imaging.MAX_IMAGE_PIXELS`, a black PNG of a few KB) is sent too, as the worst
case for memory: a worker decodes one image at a time, so its peak resident memory may grow by at most
`MEMORY_BOUND_MB` over what it reached serving a burst of photographs first. onnxruntime's own memory
grows with the batch, so every query asks for one variant, and the first burst (`BASELINE_PHOTOGRAPHS`)
holds two of the largest batches a worker runs.
"""
from __future__ import annotations

import io
import struct
import time
import uuid
import zlib
from collections.abc import Callable

import numpy as np
from PIL import Image
from pydantic import BaseModel

from schemas import Query, ResultStatus
from services.launcher import ManagedProcess
from shared.adapters.client import MeridianClient
from shared.imaging import MAX_IMAGE_PIXELS
from shared.modelzoo import photos
from shared.settings import Settings
from shared.tensors import encode_images

#: what preparing one image may take at most: RGB at the pixel bound twice (Pillow's decoded image and
#: its central crop, at most as large), plus the float32 row of the largest variant's input (Lite2, 260 px)
MEMORY_BOUND_MB = 2 * 3 * MAX_IMAGE_PIXELS / 1e6 + 3 * 260 * 260 * 4 / 1e6

#: photographs of the first burst: two batches of 64 (the profiles' largest), so that the batch of
#: 64 onnxruntime's memory is sized by is served before the hostile files are
BASELINE_PHOTOGRAPHS = 128


def encoded(array: np.ndarray, fmt: str, **options: object) -> bytes:
    """``array`` (uint8 pixels) as a ``fmt`` (JPEG, PNG) file."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels, with hardly any data after it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def largest_allowed_png() -> bytes:
    """A black RGB PNG of exactly `MAX_IMAGE_PIXELS` pixels: a few KB that decode to 72 MB."""
    return encoded(np.zeros((4_000, MAX_IMAGE_PIXELS // 4_000, 3), np.uint8), "PNG")


def _truncated_jpeg() -> bytes:
    return photos.encode_jpeg(photos.pixels("chelsea"))[:5_000]


#: hostile image files by kind: (how to make the file, what the reason of its ``error`` says)
HOSTILE_IMAGES: dict[str, tuple[Callable[[], bytes], str]] = {
    "a decompression bomb (30000x30000 pixels claimed)": (lambda: bomb_png(30_000, 30_000), "a decompression bomb?"),
    "over the pixel bound (6000x5000)": (lambda: bomb_png(6_000, 5_000), "more than the 24,000,000 a worker decodes"),
    "a truncated JPEG": (_truncated_jpeg, "image file is truncated"),
    "a PNG with an alpha channel": (lambda: encoded(np.zeros((40, 40, 4), np.uint8), "PNG"), "mode RGBA"),
    "a PNG of one channel": (lambda: encoded(np.zeros((40, 40), np.uint8), "PNG"), "mode L"),
    "not an image": (lambda: b"plain text, not pixels", "not a JPEG or PNG image"),
    "an empty file": (lambda: b"", "not a JPEG or PNG image"),
}


class HostileImagesOutcome(BaseModel):
    kinds: list[str]
    #: hostile queries sent (each kind, every round), and those answered ``error`` with their kind's reason
    hostile: int
    answered_with_their_reason: int
    #: photographs (the first burst, those between the hostile files, the largest allowed image each round),
    #: and those answered ``ok``
    genuine: int
    genuine_ok: int
    worker_alive: bool
    #: the worker's peak resident memory after the burst of photographs alone, and at the end (MB, VmHWM)
    peak_rss_before_mb: float
    peak_rss_after_mb: float
    memory_bound_mb: float
    elapsed_s: float


def hostile_images(settings: Settings, application: str, worker: ManagedProcess, *, rounds: int = 3,
                   model: str = "efficientnet-lite0", slo_ms: float = 60_000.0, timeout_s: float = 300.0
                   ) -> HostileImagesOutcome:
    """A burst of photographs first (the worker's peak memory after it is the baseline), then ``rounds`` of
    every hostile kind, each followed by a photograph, and the largest allowed image; all for ``model``."""
    started = time.monotonic()
    shots = [shot.jpeg for shot in photos.augmented(BASELINE_PHOTOGRAPHS + rounds * len(HOSTILE_IMAGES), seed=7)]
    files = {kind: make() for kind, (make, _) in HOSTILE_IMAGES.items()}
    largest = largest_allowed_png()
    with MeridianClient(settings, applications=[application]) as client:
        def send(image: bytes, prefix: str) -> str:
            inputs = encode_images([image])
            query = Query(query_id=f"{prefix}-{uuid.uuid4().hex[:12]}", application=application, model=model,
                          slo_ms=slo_ms, batch_size=1, inputs=inputs.tensors, sent_at=time.time())
            client.send(query, inputs.binary)
            return query.query_id

        baseline = [send(shot, "photo") for shot in shots[:BASELINE_PHOTOGRAPHS]]
        client.flush()
        client.wait_for(baseline, timeout_s)
        before_mb = peak_rss_mb(worker)
        hostile: dict[str, str] = {}
        genuine = list(baseline)
        photographs = iter(shots[BASELINE_PHOTOGRAPHS:])
        for _ in range(rounds):
            for kind, image in files.items():
                hostile[send(image, "hostile")] = kind
                genuine.append(send(next(photographs), "photo"))
            genuine.append(send(largest, "largest"))
        client.flush()
        client.wait_for([*hostile, *genuine], timeout_s)
        answers = {query_id: client.results[query_id][0] for query_id in [*hostile, *genuine]
                   if query_id in client.results}
    with_reason = sum(
        (answer := answers.get(query_id)) is not None and answer.status is ResultStatus.ERROR
        and HOSTILE_IMAGES[kind][1] in (answer.reason or "") for query_id, kind in hostile.items())
    genuine_ok = sum(query_id in answers and answers[query_id].status is ResultStatus.OK for query_id in genuine)
    alive = worker.alive()
    return HostileImagesOutcome(
        kinds=list(HOSTILE_IMAGES), hostile=len(hostile), answered_with_their_reason=with_reason,
        genuine=len(genuine), genuine_ok=genuine_ok, worker_alive=alive, peak_rss_before_mb=before_mb,
        peak_rss_after_mb=peak_rss_mb(worker) if alive else float("nan"),
        memory_bound_mb=round(MEMORY_BOUND_MB, 1), elapsed_s=round(time.monotonic() - started, 1))


def peak_rss_mb(worker: ManagedProcess) -> float:
    """The process's peak resident memory so far (Linux ``VmHWM``), in MB."""
    return round(worker.status_kb("VmHWM") * 1024 / 1e6, 1)
