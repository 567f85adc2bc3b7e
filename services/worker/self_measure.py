"""A real worker measures the variants it serves on its own machine, once per machine and model file.

Every first start of a worker measures each variant it starts with: the latency of one `run_batch` per
batch size (the profiler's powers of two, up to the worker's largest batch), the time its session took to
load, and, for a variant that takes encoded images, the time to decode and prepare one. It stops growing
the batch once the variant's share of the time (`MEASURE_BUDGET_S`) is spent or one call outlasts
`SLOW_BATCH_MS`: the scheduler scales the committed profile's larger batches by what was measured (see
`shared.profiles.measured.with_measured`). The result is kept in `MeasurementCache`, keyed by device
key, machine and the model file's digest, so a restart, or another worker of the same machine, reads it
instead of measuring again; workers sharing the cache measure one at a time (`MeasurementCache.alone`).
What this measures is the profiler's own measurement (`shared.modelzoo.profiler`), shortened to seconds:
a restart of the worker should not wait for minutes.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image
from pydantic import ValidationError

from schemas import MachineDescription, MeasuredLatency
from shared.modelzoo.profiler import BATCH_SIZES, measure_batch_latency, measure_image_prepare_ms, static_input_shape
from shared.onnx_runtime import input_dtype
from shared.profiles import ImagePreprocessing

logger = logging.getLogger(__name__)

#: seconds of measuring one variant may take at most (the batch sizes after it are left out)
MEASURE_BUDGET_S = 2.0
#: a batch size whose one call takes longer than this is the last one measured
SLOW_BATCH_MS = 400.0
#: timed calls per batch size, after one untimed call; the latency is their median
REPEATS = 5
#: encoded images (JPEG, quality 90, photograph-sized) the preparation time is measured on
PREPARE_IMAGES = 8


def model_digest(path: Path) -> str:
    """The first 16 hex digits of the model file's SHA-256: a changed file is measured again."""
    digest = hashlib.sha256()
    with open(path, "rb") as model:
        for block in iter(lambda: model.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


class MeasurementCache:
    """Measured latencies on disk, one JSON file per (device key, machine, variant, model digest)."""

    def __init__(self, directory: Path) -> None:
        self._directory = Path(directory)

    def _path(self, device: str, machine: MachineDescription, variant: str, digest: str) -> Path:
        who = hashlib.sha256(machine.model_dump_json().encode()).hexdigest()[:8]
        return self._directory / device / f"{variant}-{digest}-{who}.json"

    def get(self, device: str, machine: MachineDescription, variant: str, digest: str) -> MeasuredLatency | None:
        path = self._path(device, machine, variant, digest)
        try:
            return MeasuredLatency.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            logger.warning("ignoring an unreadable measurement %s: %s", path, exc)
            return None

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the cache's lock: workers of one host that share the cache measure one at a time. Two
        measuring at once measure each other's load: on 2026-12-03 a two-thread worker started beside a
        one-thread one on this 2-core host measured batch 16 of digits-cnn-l at 2.7 ms, twice the other's."""
        self._directory.mkdir(parents=True, exist_ok=True)
        with open(self._directory / ".measuring.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def put(self, device: str, machine: MachineDescription, variant: str, digest: str,
            measured: MeasuredLatency) -> None:
        path = self._path(device, machine, variant, digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(measured.model_dump_json())
        partial.replace(path)  # whole or not at all: two workers of one machine may measure at once


def measure_session(session, *, max_batch: int, load_ms: float, images: ImagePreprocessing | None,
                    budget_s: float = MEASURE_BUDGET_S) -> MeasuredLatency:
    """What one variant's loaded ``session`` takes here (see the module's docstring)."""
    shape, dtype = static_input_shape(session), input_dtype(session)
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    latencies: dict[int, float] = {}
    for batch in (b for b in BATCH_SIZES if b <= max_batch):
        x = (rng.integers(0, 128, (batch, *shape)) if dtype.kind in "iu" else rng.standard_normal((batch, *shape))
             ).astype(dtype)
        samples = measure_batch_latency(session, {batch: x}, num_warmup=1, num_repeats=REPEATS, num_rounds=1)
        latencies[batch] = statistics.median(samples[batch])
        if latencies[batch] > SLOW_BATCH_MS or time.perf_counter() - began > budget_s:
            break
    prepare_ms = measure_image_prepare_ms(_images(), images, num_rounds=2) if images is not None else None
    return MeasuredLatency(batch_latency_ms=latencies, load_latency_ms=load_ms, image_prepare_ms=prepare_ms)


def _images() -> list[bytes]:
    """`PREPARE_IMAGES` photograph-sized JPEGs of smooth random scenes (a worker ships no photographs)."""
    rng = np.random.default_rng(0)
    made = []
    for _ in range(PREPARE_IMAGES):
        coarse = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
        scene = np.asarray(Image.fromarray(coarse).resize((480, 360), Image.Resampling.BICUBIC), dtype=np.int16)
        noisy = np.clip(scene + rng.integers(-12, 13, size=scene.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(noisy).save(buffer, format="JPEG", quality=90)
        made.append(buffer.getvalue())
    return made


def describe(measured: MeasuredLatency) -> str:
    """``b1 9.60 ms, b2 17.90 ms, ...``: a log line's worth."""
    return ", ".join(f"b{b} {ms:.2f} ms" for b, ms in measured.batch_latency_ms.items())
