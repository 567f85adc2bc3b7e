"""Building queries and reading topics in integration tests."""
from __future__ import annotations

import select
import signal
import subprocess
import time
import uuid

import numpy as np
from kafka import TopicPartition

from schemas import DeadLetter, Query
from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer
from shared.settings import REPO_ROOT, Settings
from shared.tensors import encode

TEST_SPLIT = REPO_ROOT / "var/models/digits-test.npz"


def read_until(process: subprocess.Popen, marker: str, timeout_s: float) -> str:
    """A command's output until a line holds ``marker`` (asserted), or it exits, or the time is up."""
    seen, deadline = "", time.monotonic() + timeout_s
    while marker not in seen and time.monotonic() < deadline and process.poll() is None:
        if select.select([process.stdout], [], [], 1.0)[0]:
            seen += process.stdout.readline()
    assert marker in seen, seen
    return seen


def stop_serving(process: subprocess.Popen) -> None:
    """Ctrl-C a `meridian serve` (it stops what it started; a kill would leave its services running)."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def digits_rows() -> tuple[np.ndarray, np.ndarray]:
    data = np.load(TEST_SPLIT)
    return data["x"].astype(np.float32), data["y"]


def make_query(rows: np.ndarray, **overrides: object) -> Query:
    fields = dict(query_id=f"q-{uuid.uuid4().hex}", application="digits", model="digits", slo_ms=1000.0,
                  batch_size=len(rows), inputs=encode(rows), sent_at=time.time())
    fields.update(overrides)
    return Query(**fields)


class DeadLetterReader:
    """Reads the dead-letter topic from its end at creation time."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=50)
        tp = TopicPartition(topics.DEAD_LETTER, 0)
        self._consumer.assign([tp])
        self._consumer.seek_to_end(tp)
        self._consumer.position(tp)

    def read(self, expected: int, timeout_s: float = 20.0) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        deadline = time.monotonic() + timeout_s
        while len(letters) < expected and time.monotonic() < deadline:
            for records in self._consumer.poll(timeout_ms=200).values():
                letters.extend(DeadLetter.model_validate_json(r.value) for r in records)
        return letters

    def close(self) -> None:
        self._consumer.close()
