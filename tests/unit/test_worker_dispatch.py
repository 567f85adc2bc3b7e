"""A worker's answer to a batch it cannot run because its variant was unloaded on the batch's way."""
from __future__ import annotations

from schemas import DispatchBatch, HopTimestamps, QueryWork, Result, ResultStatus, worker_event_adapter
from services.worker.app import WorkerContext, handle_dispatch
from services.worker.executors import EmulatedExecutor
from shared.profiles import DeviceType, ProfileSet, VariantProfile

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
