"""A worker's answers: to a batch it cannot run because its variant was unloaded on the batch's way, and to
queries whose inputs it cannot prepare."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from schemas import DispatchBatch, HopTimestamps, QueryWork, Result, ResultStatus, worker_event_adapter
from services.worker.app import WorkerContext, handle_dispatch
from services.worker.executors import EmulatedExecutor, OnnxExecutor
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.tensors import encode_binary, encode_images

REPO_ROOT = Path(__file__).resolve().parents[2]

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)],
    variants=[VariantProfile(variant="small", family="fam", device="cpu", batch_latency_ms={1: 1.0}, max_batch=1)])


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def send(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.sent.append((topic, value))


def test_a_batch_for_a_variant_it_does_not_hold_is_handed_back_unanswered() -> None:
    producer = RecordingProducer()
    ctx = WorkerContext(worker_id="w1", executor=EmulatedExecutor(PROFILES, "cpu"), producer=producer, max_batch=1,
                        price_per_hour=0.1)
    batch = DispatchBatch(batch_id="b1", worker_id="w1", variant="small", queries=[QueryWork(
        query_id="q1", application="app", batch_size=1, slo_ms=100.0, timestamps=HopTimestamps())])
    handle_dispatch(ctx, batch, received_at=1.0)
    [(topic, value)] = producer.sent  # no result: the scheduler re-queues its queries
    event = worker_event_adapter.validate_json(value)
    assert topic == "meridian.worker-events" and event.event == "batch_refused"
    assert (event.batch_id, event.variant) == ("b1", "small") and "not loaded" in event.reason


def test_every_answer_names_the_query_message_it_answers() -> None:
    producer = RecordingProducer()
    executor = EmulatedExecutor(PROFILES, "cpu")
    executor.load("small")
    ctx = WorkerContext(worker_id="w1", executor=executor, producer=producer, max_batch=1, price_per_hour=0.1)
    work = dict(application="app", batch_size=1, slo_ms=100.0, timestamps=HopTimestamps())
    batch = DispatchBatch(batch_id="b1", worker_id="w1", variant="small", queries=[
        QueryWork(query_id="q1", query_position="meridian.queries/2/17", **work),
        QueryWork(query_id="q2", query_position="meridian.queries/0/5", deadline_at=0.5, **work)])
    handle_dispatch(ctx, batch, received_at=1.0)
    results = {r.query_id: r for r in (Result.model_validate_json(v) for t, v in producer.sent
                                         if t.startswith("meridian.results"))}
    assert results["q1"].status is ResultStatus.OK and results["q1"].query_position == "meridian.queries/2/17"
    assert results["q2"].status is ResultStatus.DROPPED and results["q2"].query_position == "meridian.queries/0/5"


def test_a_query_whose_input_cannot_be_prepared_fails_alone_and_the_rest_of_its_batch_runs() -> None:
    """A real model (the shipped digits MLP): one query's rows in the binary section, another's "image" for a
    model that takes no images; each is answered on its own."""
    executor = OnnxExecutor(REPO_ROOT / "profiles" / "digits")
    executor.load("digits-mlp-s")
    producer = RecordingProducer()
    ctx = WorkerContext(worker_id="w1", executor=executor, producer=producer, max_batch=8, price_per_hour=0.0)
    rows, image = encode_binary(np.zeros((2, 1, 8, 8), np.float32)), encode_images([b"\xff\xd8 a JPEG"])
    work = dict(application="app", slo_ms=100.0, timestamps=HopTimestamps())
    batch = DispatchBatch(batch_id="b1", worker_id="w1", variant="digits-mlp-s", queries=[
        QueryWork(query_id="rows", batch_size=2, inputs=rows.tensors, **work),
        QueryWork(query_id="image", batch_size=1, inputs=image.tensors, **work)])
    handle_dispatch(ctx, batch, received_at=1.0, binary=rows.binary + image.binary)
    results = {r.query_id: r for r in (Result.model_validate_json(v) for t, v in producer.sent if "results" in t)}
    assert results["rows"].status is ResultStatus.OK and len(results["rows"].predictions) == 2
    assert results["image"].status is ResultStatus.ERROR
    assert results["image"].reason == "variant 'digits-mlp-s' takes no encoded images (its profile says no preprocessing)"
    [finished] = [worker_event_adapter.validate_json(v) for t, v in producer.sent if t == "meridian.worker-events"]
    assert finished.rows == 2


def test_a_batch_whose_binary_section_is_cut_short_fails_every_query_with_the_reason() -> None:
    executor = OnnxExecutor(REPO_ROOT / "profiles" / "digits")
    executor.load("digits-mlp-s")
    producer = RecordingProducer()
    ctx = WorkerContext(worker_id="w1", executor=executor, producer=producer, max_batch=8, price_per_hour=0.0)
    rows = encode_binary(np.zeros((1, 1, 8, 8), np.float32))
    batch = DispatchBatch(batch_id="b1", worker_id="w1", variant="digits-mlp-s", queries=[QueryWork(
        query_id="rows", batch_size=1, inputs=rows.tensors, application="app", slo_ms=100.0,
        timestamps=HopTimestamps())])
    handle_dispatch(ctx, batch, received_at=1.0, binary=rows.binary[:-4])
    [result] = [Result.model_validate_json(v) for t, v in producer.sent if "results" in t]
    assert result.status is ResultStatus.ERROR and "declare 256 bytes of binary data, but the message carries 252" \
        in result.reason
