"""The serving core: admission, drops, workers, re-queueing, and the scheduler messages made from it."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from schemas import BatchFinished, BatchRefused, Query, WorkerHeartbeat, WorkerStopped, position, wire, worker_command_adapter
from services.scheduler.messages import Received, dispatch_batch, dispatch_value, dropped
from shared.catalogue import Catalogue
from shared.policy.base import BatchingPolicy, DispatchDecision, DispatchPolicy
from shared.policy.fcfs import FcfsDispatch
from shared.profiles import DeviceType, ImagePreprocessing, ProfileSet, VariantProfile
from shared.serving import CoreConfig, SchedulerCore
from shared.tensors import encode, encode_binary, encode_images, read_batch, to_array

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 50.0},
    variants=[
        VariantProfile(variant="small", family="fam", device="cpu", accuracy=0.9,
                       batch_latency_ms={1: 1.0, 8: 4.0}, max_batch=8, input_shape=(4,), input_dtype="float32"),
        VariantProfile(variant="large", family="fam", device="cpu", accuracy=0.97,
                       batch_latency_ms={1: 5.0, 8: 20.0}, max_batch=8, input_shape=(4,), input_dtype="float32"),
    ])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A core on a hand-moved clock, spoken to as the live scheduler speaks to it."""

    def __init__(self, policy: DispatchPolicy | None = None, **options: float) -> None:
        self.clock = Clock()
        self.offsets = itertools.count()  # the queries topic, as the scheduler reads it
        self.core = SchedulerCore(policy or FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}),
                                  CoreConfig(drop_after_slo_multiple=options.get("drop", 5.0),
                                             worker_timeout_s=options.get("timeout", 3.0),
                                             max_clock_skew_s=options.get("skew", 5.0),
                                             duplicate_window_s=options.get("window", 600.0),
                                             pipeline_lead_s=options.get("lead", 0.0),
                                             pipeline_partial_batches=bool(options.get("partial", False)),
                                             learn_service_rate=options.get("learn", False),
                                             transport_prior_s=options.get("margin", 0.0),
                                             max_batch_payload_bytes=options.get("payload", float("inf"))),
                                  clock=self.clock)

    def at(self, now: float) -> "Harness":
        self.clock.now = now
        return self

    def admit(self, query: Query, now: float, token=None, *, sent_at: float | None = None, binary: bytes = b"",
              **transport) -> str | None:
        """Admit ``query`` as sent at ``sent_at`` (default: just now), with its binary section."""
        query = query.model_copy(update={"sent_at": now if sent_at is None else sent_at})
        received = Received(query, position("meridian.queries", 0, next(self.offsets)), memoryview(binary))
        rejection = self.at(now).core.admit(query, payload=received, ack_token=token, **transport)
        return None if rejection is None else rejection.reason

    def event(self, event, now: float) -> None:
        self.at(now).core.on_worker_event(event)

    def step(self, now: float):
        return self.at(now).core.step()

    def batches(self, now: float):
        return [(dispatch_batch(d), [i.ack_token for i in d.items])
                for d in self.step(now).dispatches]


def make_query(qid: str, **fields: object) -> Query:
    base = dict(query_id=qid, application="app", model="fam", slo_ms=50.0, batch_size=1,
                inputs=encode(np.zeros((1, 4), np.float32)), sent_at=0.0)
    base.update(fields)
    return Query(**base)


def heartbeat(wid: str, variants=("small",), emulated: bool = False) -> WorkerHeartbeat:
    return WorkerHeartbeat(worker_id=wid, device="cpu", emulated=emulated, variants=list(variants), max_batch=8,
                           inflight=0, busy_fraction=0.0, price_per_hour=0.1, at=0.0)


@pytest.mark.parametrize("fields, reason", [
    ({"application": "other"}, "unknown application"),
    ({"model": "nope"}, "unknown model"),
    ({"slo_ms": 0.5}, "below the fastest"),
    ({"batch_size": 9, "inputs": encode(np.zeros((9, 4), np.float32))}, "exceeds what any variant"),
])
def test_unservable_queries_are_rejected_with_a_reason(fields, reason) -> None:
    assert reason in Harness().admit(make_query("q", **fields), 1.0)


def test_queries_wait_until_a_worker_appears_then_dispatch_with_stamps() -> None:
    core = Harness()
    assert core.admit(make_query("q1"), 1.0, "t1") is None
    assert not core.batches(1.0)
    core.event(heartbeat("w1"), 1.1)
    [(batch, tokens)] = core.batches(1.1)
    assert batch.worker_id == "w1" and batch.variant == "small" and tokens == ["t1"]
    assert batch.queries[0].timestamps.dispatched == 1.1
    assert batch.queries[0].timestamps.scheduler_received == 1.0


def test_accuracy_floor_narrows_the_candidates() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    core.admit(make_query("q1", accuracy_floor=0.95), 1.0, None)
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large"


def test_an_unreachable_accuracy_floor_serves_the_closest_variant_and_says_so() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    assert core.admit(make_query("q1", accuracy_floor=0.99), 1.0, None) is None
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large"
    assert "served the closest, 'large'" in batch.queries[0].note


def test_worker_is_busy_until_its_batch_finishes() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1"), 1.0, None)
    [(batch, _)] = core.batches(1.0)
    core.admit(make_query("q2"), 1.001, None)
    assert not core.step(1.001).dispatches
    core.event(BatchFinished(worker_id="w1", batch_id=batch.batch_id, variant="small", device="cpu",
                             rows=1, compute_ms=1.0, ok=True, at=1.002), 1.002)
    assert [b.queries[0].query_id for b, _ in core.batches(1.002)] == ["q2"]


def test_stale_queries_are_dropped_explicitly() -> None:
    core = Harness(drop=2.0)
    core.admit(make_query("q1"), 1.0, "t")
    assert not core.step(1.0 + 0.098).dropped, "99 ms in 2x 50 ms with 1 ms of work left: still in time"
    [(item, reason)] = core.step(1.0 + 0.0995).dropped
    result = dropped(item, reason, 1.0995)
    assert result.status.value == "dropped" and item.ack_token == "t" and "50 ms SLO" in result.reason
    assert "would miss its deadline by 0.5 ms" in result.reason and "1 ms on its fastest variant" in result.reason
    assert not core.core.queue and result.timestamps.scheduler_received == 1.0
    assert result.query_position == "meridian.queries/0/0", "an answer names the message it answers"


def test_a_lost_workers_batches_are_requeued_first() -> None:
    core = Harness(timeout=3.0)
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1", slo_ms=2000.0), 0.5, "t1")
    core.batches(0.5)
    core.admit(make_query("q2", slo_ms=2000.0), 0.6, "t2")
    core.event(heartbeat("w2"), 3.4)
    core.event(WorkerStopped(worker_id="w1", at=3.5), 3.5)
    assert list(core.core.queue.items) == ["q1", "q2"]
    batches = core.batches(3.5)
    assert [q.query_id for b, _ in batches for q in b.queries] == ["q1", "q2"]
    assert batches[0][1] == [None, "t2"], "q1 was acknowledged at its first dispatch"


def test_a_refused_batch_is_requeued_first_and_its_variant_is_not_sent_there_again() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    core.event(heartbeat("w2", variants=("large",)), 0.0)
    core.admit(make_query("q1", model="small", slo_ms=2000.0), 0.5, "t1")
    (batch, _), = core.batches(0.5)
    assert batch.variant == "small" and batch.worker_id == "w1"
    core.admit(make_query("q2", model="small", slo_ms=2000.0), 0.6, "t2")
    core.event(BatchRefused(worker_id="w1", batch_id=batch.batch_id, variant="small", reason="not loaded", at=0.7), 0.7)
    assert list(core.core.queue.items) == ["q1", "q2"]
    assert core.core.workers["w1"].variants == ("large",)
    assert not core.batches(0.7), "no worker holds `small` now: the queries wait, unanswered"
    core.event(heartbeat("w2", variants=("large", "small")), 0.8)
    (again, acks), = core.batches(0.8)
    assert again.worker_id == "w2" and [q.query_id for q in again.queries] == ["q1", "q2"]
    assert acks == [None, "t2"], "q1 was acknowledged at its first dispatch"


def test_silent_workers_expire() -> None:
    core = Harness(timeout=3.0)
    core.event(heartbeat("w1"), 0.0)
    core.step(3.01)
    assert "w1" not in core.core.workers


def test_queries_without_inputs_need_emulated_workers() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    assert "inputs" in core.admit(make_query("q1", inputs=None), 1.0)
    emulated = Harness()
    emulated.event(heartbeat("e1", emulated=True), 0.0)
    assert emulated.admit(make_query("q1", inputs=None), 1.0) is None


def test_a_redelivered_query_is_queued_once() -> None:
    core = Harness()
    core.admit(make_query("q1"), 1.0, "a")
    core.admit(make_query("q1"), 1.1, "b")
    assert len(core.core.queue) == 1


def test_queries_of_a_partition_moved_to_another_scheduler_are_let_go_unanswered() -> None:
    core = Harness()
    for qid, partition, offset in (("q1", 0, 1), ("q2", 1, 1), ("q3", 0, 2)):
        core.admit(make_query(qid), 1.0, f"ack-{qid}", delivery=(partition, offset))
    assert core.core.release(lambda delivery: delivery[0] == 0) == 2
    assert list(core.core.queue.items) == ["q2"]
    assert not core.step(1.1).dropped, "a let-go query is neither answered nor dropped here"
    # the partition comes back later: the same message is admitted afresh, not taken for a redelivery
    assert core.admit(make_query("q1"), 2.0, "ack-q1", delivery=(0, 1)) is None
    assert "q1" in core.core.queue


def test_a_query_put_back_from_a_lost_worker_stays_with_its_scheduler() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1"), 1.0, "ack-q1", delivery=(0, 1))
    assert core.batches(1.0), "dispatched: the transport acknowledges its message"
    core.event(WorkerStopped(worker_id="w1", at=1.5), 1.5)
    assert "q1" in core.core.queue
    assert core.core.release(lambda delivery: True) == 0 and "q1" in core.core.queue


def test_a_model_less_query_may_use_any_model_of_its_application() -> None:
    core = Harness()
    core.event(heartbeat("w1", variants=("small", "large")), 0.0)
    assert core.admit(make_query("q1", model=None, accuracy_floor=0.95), 1.0, None) is None
    [(batch, _)] = core.batches(1.0)
    assert batch.variant == "large" and batch.queries[0].note is None


def test_a_restarted_worker_is_a_new_incarnation_and_its_old_batches_are_requeued() -> None:
    core = Harness()
    core.event(heartbeat("w1").model_copy(update={"incarnation": "life1"}), 0.0)
    core.admit(make_query("q1", slo_ms=2000.0), 0.5, "t1")
    (batch, _), = core.batches(0.5)
    assert batch.incarnation == "life1", "a batch names the process it is meant for"
    core.event(heartbeat("w1").model_copy(update={"incarnation": "life2"}), 1.0)
    (again, _), = core.batches(1.0)
    assert [q.query_id for q in again.queries] == ["q1"] and again.incarnation == "life2"


def test_the_load_window_reports_each_application_once_then_starts_empty() -> None:
    from services.scheduler.load_window import LoadWindow

    window = LoadWindow(2.0)
    for rows in (1, 3, 2):
        window.record("a", rows)
    first = window.close({"a": 4, "b": 1}, 10.0)
    assert [(s.application, s.arrival_rate_qps, s.queue_depth, s.batch_sizes) for s in first] == [
        ("a", 1.5, 4, [1, 3, 2]), ("b", 0.0, 1, [])]
    assert [(s.application, s.arrival_rate_qps) for s in window.close({}, 12.0)] == []


def test_the_deadline_counts_from_the_clients_send_so_a_query_that_waited_in_kafka_is_dropped_at_once() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    assert core.admit(make_query("late"), 10.0, "t", sent_at=10.0 - 0.3) is None  # 300 ms old, 5x 50 ms allowed
    [(item, reason)] = core.step(10.0).dropped
    assert item.pending.query_id == "late" and "would miss its deadline by 51 ms" in reason, reason
    assert "sent 300 ms ago" in reason


def test_a_query_behind_more_work_than_the_fleet_can_do_in_its_slo_is_dropped_on_arrival() -> None:
    core = Harness(drop=1.0)
    core.event(heartbeat("w1"), 0.0)
    # one worker does at best 2 rows/ms (8 rows in 4 ms), and a query needs 1 ms itself: of 50 ms, one
    # with 98 rows ahead can still make it, one with 99 cannot
    for k in range(101):
        core.admit(make_query(f"q{k}"), 1.0, k)
    dropped_ids = {item.pending.query_id: reason for item, reason in core.step(1.0).dropped}
    assert list(dropped_ids) == ["q99", "q100"]
    assert "50 ms for the work queued ahead of it" in dropped_ids["q100"], dropped_ids["q100"]


def test_sent_at_must_agree_with_the_clock_and_the_messages_timestamp() -> None:
    core = Harness(skew=2.0)
    ahead = core.admit(make_query("future"), 100.0, sent_at=100.0 + 365 * 86_400)
    assert "`sent_at` is 365 days ahead of the scheduler's clock" in ahead and "at most 2 s" in ahead
    assert "before the time the message was produced" in core.admit(make_query("old"), 100.0, sent_at=50.0,
                                                                        transport_s=99.9)
    assert core.admit(make_query("fine"), 100.0, sent_at=99.0, transport_s=99.5) is None


def test_a_query_id_is_served_once_and_a_redelivered_copy_is_not_a_duplicate() -> None:
    core = Harness()
    assert core.admit(make_query("q1"), 1.0, "a", delivery=(0, 7)) is None
    assert core.admit(make_query("q1"), 1.2, "a", delivery=(0, 7)) is None, "the same message read again"
    again = core.admit(make_query("q1"), 1.5, "b", delivery=(0, 9))
    assert again.startswith("duplicate query id: 'q1' was admitted 500 ms ago"), again
    assert core.core.admit(make_query("q1", sent_at=1.5), delivery=(0, 10)).foreign_id, \
        "the repeat's answer must not go out under the id another client's query holds"
    assert len(core.core.queue) == 1


def test_the_duplicate_window_is_bounded_in_time() -> None:
    core = Harness(window=10.0)
    core.admit(make_query("q1", slo_ms=5000.0), 1.0, delivery=(0, 1))
    core.admit(make_query("q2", slo_ms=5000.0), 12.0, delivery=(0, 2))
    assert "q1" not in core.core._recent and "q2" in core.core._recent


def test_inputs_must_match_the_models_row_shape_and_dtype() -> None:
    core = Harness()
    wrong = core.admit(make_query("q", inputs=encode(np.zeros((1, 3), np.float32))), 1.0)
    assert wrong == "`inputs` are rows of shape [3] of FP32, but the model takes rows of shape [4] of FP32"
    typed = core.admit(make_query("q", inputs=encode(np.zeros((1, 4), np.int64))), 1.0)
    assert "of INT64" in typed


class LoadingEverywhere(FcfsDispatch):
    """First come first served, asking for ``large`` on every worker (as INFaaS asks for an Inactive match)."""

    def decide(self, now_s, queue, workers) -> DispatchDecision:
        decision = super().decide(now_s, queue, workers)
        return DispatchDecision(decision.assignments, decision.dropped,
                                loads=tuple((w.worker_id, "large") for w in workers))


@pytest.mark.parametrize("with_inputs, loaded", [(False, ["emu"]), (True, ["emu", "real"])])
def test_a_variant_queries_without_inputs_use_is_never_loaded_on_a_real_worker(with_inputs, loaded) -> None:
    core = Harness(LoadingEverywhere())
    core.event(heartbeat("emu", emulated=True), 0.0)
    core.event(heartbeat("real", variants=()), 0.0)
    inputs = encode(np.zeros((1, 4), np.float32)) if with_inputs else None
    assert core.admit(make_query("q1", inputs=inputs), 1.0) is None
    step = core.step(1.0)
    assert len(step.dispatches) == 1
    # once the real worker held it, every query of the application without inputs would be rejected
    assert sorted(worker for worker, variant in step.loads) == loaded


@pytest.mark.parametrize("lead, rows, partial, pipelined", [
    (0.0, 8, False, False), (0.015, 8, False, False), (0.025, 8, False, True), (0.025, 4, False, False),
    (0.025, 4, True, True), (0.015, 4, True, False), (0.0, 4, True, False)])
def test_a_worker_about_to_finish_a_full_batch_is_sent_its_next_within_the_pipeline_lead(lead, rows, partial,
                                                                                        pipelined):
    core = Harness(lead=lead, partial=partial)
    core.event(heartbeat("w1", variants=("large",)), 0.0)
    query = make_query("q1", slo_ms=100.0, model="large", batch_size=rows,
                       inputs=encode(np.zeros((rows, 4), np.float32)))
    core.admit(query, 1.0, "t1")
    assert len(core.batches(1.0)) == 1  # large takes 20 ms for up to 8 rows: predicted to finish at 1.020
    core.admit(make_query("q2", slo_ms=100.0, model="large"), 1.001, "t2")
    second = core.batches(1.001)  # 19 ms before the first batch ends
    assert len(second) == int(pipelined), "only a full batch tells there is more work, unless told otherwise"
    if pipelined:
        view = core.core.workers["w1"].view(1.001, core.core.config)
        assert view.inflight == 2 and view.available_at_s == pytest.approx(1.025), "queued after the first"


class OneRowBatching(BatchingPolicy):
    """Batches of one row, whatever waits: a policy that cuts its batches short of a backlog."""

    name = "one-row"

    def batch_rows(self, now_s, queue, worker, variant) -> int:
        return 1


@pytest.mark.parametrize("queued_behind, pipelined", [(True, True), (False, False)])
def test_a_batch_cut_short_of_a_backlog_is_followed_within_the_pipeline_lead(queued_behind, pipelined) -> None:
    """A batch that left queries queued did not take all the work there was: its worker is sent the next
    one before it ends, not a round trip after (on a CPU a deadline-sized batch is a row or two)."""
    core = Harness(FcfsDispatch(batching=OneRowBatching()), lead=0.004)
    core.event(heartbeat("w1", variants=("large",)), 0.0)
    core.admit(make_query("q1", slo_ms=100.0, model="large"), 1.0, "t1")
    if queued_behind:
        core.admit(make_query("q2", slo_ms=100.0, model="large"), 1.0, "t2")
    assert len(core.batches(1.0)) == 1  # one row of large: predicted to end at 1.005, beyond the lead
    if not queued_behind:
        core.admit(make_query("q2", slo_ms=100.0, model="large"), 1.002, "t2")
    assert len(core.batches(1.002)) == int(pipelined)  # 3 ms before the first ends


def test_a_batch_sent_ahead_starts_when_the_one_before_it_really_ended() -> None:
    """The first batch ends 10 ms past its prediction: the one sent on behind it is then predicted 10 ms later
    too, and stays so however many batches follow; an early end moves nothing up."""
    core = Harness(lead=0.025, partial=True)
    core.event(heartbeat("w1", variants=("large",)), 0.0)
    full = {"slo_ms": 500.0, "model": "large", "batch_size": 8, "inputs": encode(np.zeros((8, 4), np.float32))}
    sent = []
    for k, at in enumerate((1.0, 1.001)):
        core.admit(make_query(f"q{k}", **full), at, k)
        sent += [d.batch_id for d in core.step(at).dispatches]
    worker = core.core.workers["w1"]
    assert worker.busy_until_s == pytest.approx(1.040), "20 ms each, the second from the first's predicted end"
    core.event(BatchFinished(worker_id="w1", batch_id=sent[0], variant="large", device="cpu", rows=8,
                             compute_ms=25.0, ok=True, compute_started_at=1.005, at=1.030), 1.032)
    assert worker.busy_until_s == pytest.approx(1.050)
    core.admit(make_query("q2", **full), 1.033, 2)
    sent += [d.batch_id for d in core.step(1.033).dispatches]
    assert worker.busy_until_s == pytest.approx(1.070), "the third is predicted from the second's moved end"
    core.event(BatchFinished(worker_id="w1", batch_id=sent[1], variant="large", device="cpu", rows=8,
                             compute_ms=10.0, ok=True, compute_started_at=1.031, at=1.041), 1.042)
    assert worker.busy_until_s == pytest.approx(1.070), "an early end moves nothing up"


def test_the_work_ahead_is_judged_with_the_overhead_batches_were_seen_to_take_beyond_their_profile() -> None:
    core = Harness(drop=1.0, learn=True, lead=1.0)
    core.event(heartbeat("w1"), 0.0)
    full = {"batch_size": 8, "inputs": encode(np.zeros((8, 4), np.float32)), "slo_ms": 5000.0}
    batches = []
    for k in range(2):
        core.admit(make_query(f"w{k}", **full), 1.0, k)
        batches += [d.batch_id for d in core.step(1.0).dispatches]
    for k in range(1, 25):  # a full batch (4 ms profiled) ends every 11 ms, the next one already waiting
        at = 1.0 + 0.011 * k
        core.event(BatchFinished(worker_id="w1", batch_id=batches[k - 1], variant="small", device="cpu", rows=8,
                                 compute_ms=4.0, ok=True, at=at), at)
        core.admit(make_query(f"w{k + 1}", **full), at, k)
        batches += [d.batch_id for d in core.step(at).dispatches]
    assert core.core.workers["w1"].overhead_s == pytest.approx(0.007, rel=0.02)
    # at best 8 rows in 4 + 7 ms: 730 rows/s. Of a 50 ms SLO, a query needs 1 ms itself: 35 rows ahead
    # (47.9 ms) leave room for it, 36 (49.3 ms) do not
    for k in range(37):
        core.admit(make_query(f"q{k}"), 30.0, k)
    dropped = [item.pending.query_id for item, _ in core.step(30.0).dropped]
    assert [q for q in dropped if q.startswith("q")] == ["q36"]


def test_the_transport_reserve_takes_at_most_a_quarter_of_a_tight_slo() -> None:
    core = Harness(drop=1.0, margin=0.050)
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("tight", slo_ms=50.0), 1.0, "t")  # a 50 ms reserve would leave it no time at all
    assert not core.step(1.0).dropped
    core.admit(make_query("waited", slo_ms=50.0), 2.0, "w", sent_at=2.0 - 0.038)  # 12.5 + 1 ms no longer fit
    [(item, reason)] = core.step(2.0).dropped
    assert item.pending.query_id == "waited" and "12.5 ms for the transport" in reason
    assert item.pending.reserve_s == pytest.approx(0.0125) and item.pending.budget_ms == pytest.approx(37.5)


def test_policies_see_a_compute_deadline_that_leaves_the_measured_transport_its_time() -> None:
    """Every finished batch says when its compute started; the core reserves the hops around it."""
    core = Harness(drop=1.0)
    core.event(heartbeat("w1"), 0.0)
    now = 1.0
    for k in range(64):  # a batch starts 4 ms after its dispatch and its end is heard 6 ms after its compute
        core.admit(make_query(f"q{k}"), now, k)
        [dispatch] = core.step(now).dispatches
        compute_ms = 1.0
        now += 0.004
        started = now
        now += compute_ms / 1000.0 + 0.006
        core.event(BatchFinished(worker_id="w1", batch_id=dispatch.batch_id, variant=dispatch.variant, device="cpu",
                                 rows=1, compute_ms=compute_ms, ok=True, compute_started_at=started, at=now), now)
    assert core.core.transport.quantiles_ms() == pytest.approx({"start": 4.0, "answer": 6.0}, abs=1e-6)
    core.admit(make_query("late"), now, "late")
    pending = core.core.queue.items["late"].pending
    assert pending.reserve_s == pytest.approx(0.010)
    assert pending.deadline_s == pytest.approx(now + pending.slo_ms / 1000.0 - 0.010)


def _binary_query(qid: str, value: float) -> tuple[Query, bytes]:
    inputs = encode_binary(np.full((1, 4), value, np.float32))  # 16 bytes
    return make_query(qid, inputs=inputs.tensors), inputs.binary


def test_a_batch_is_bounded_by_its_payload_bytes_and_what_is_cut_off_goes_next() -> None:
    core = Harness(payload=40)  # two 16-byte queries fit, three do not
    core.event(heartbeat("w1"), 0.0)
    for k in range(5):
        query, binary = _binary_query(f"q{k}", k)
        assert core.admit(query, 1.0, f"t{k}", binary=binary) is None
    sizes = []
    for now in (1.0, 1.01, 1.02):
        [dispatch] = core.step(now).dispatches
        assert sum(i.payload_bytes for i in dispatch.items) <= 40
        sizes.append([i.pending.query_id for i in dispatch.items])
        core.event(BatchFinished(worker_id="w1", batch_id=dispatch.batch_id, variant="small", device="cpu", rows=1,
                                 compute_ms=1.0, ok=True, at=now), now + 0.005)
    assert sizes == [["q0", "q1"], ["q2", "q3"], ["q4"]]


def test_a_query_larger_than_any_batch_may_carry_is_rejected_at_admission() -> None:
    query, binary = _binary_query("q", 1.0)
    assert "its inputs take 16 bytes, more than the 15 a batch's message may carry" in \
        Harness(payload=15).admit(query, 1.0, binary=binary)


def test_a_batch_whose_send_failed_frees_its_worker() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    core.admit(make_query("q1"), 1.0)
    [dispatch] = core.step(1.0).dispatches
    core.admit(make_query("q2"), 1.01)
    assert not core.step(1.01).dispatches  # w1 is busy with q1's batch ...
    core.at(1.02).core.batch_failed("w1", dispatch.batch_id)
    [(batch, _)] = core.batches(1.02)  # ... until its send fails: nothing of it is in flight
    assert [q.query_id for q in batch.queries] == ["q2"]
    assert list(core.core.workers["w1"].inflight) == [batch.batch_id]


def test_the_dispatched_message_carries_each_querys_binary_section_in_order() -> None:
    core = Harness()
    core.event(heartbeat("w1"), 0.0)
    sent = [_binary_query(f"q{k}", k) for k in range(3)]
    for query, binary in sent:
        core.admit(query, 1.0, binary=binary)
    [dispatch] = core.step(1.0).dispatches
    header, section = wire.unpack(dispatch_value(dispatch))
    batch = worker_command_adapter.validate_json(header)
    assert bytes(section) == b"".join(binary for _, binary in sent)
    read = read_batch([q.inputs for q in batch.queries], section)
    assert [float(to_array(r)[0, 0]) for r in read] == [0.0, 1.0, 2.0]


IMAGES = ImagePreprocessing(size=4, crop_padding=0, mean=0.0, std=1.0)


def test_encoded_images_go_only_to_variants_that_say_how_to_prepare_them() -> None:
    profiles = PROFILES.model_copy(update={"variants": [
        PROFILES.variants[0], PROFILES.variants[1].model_copy(update={"image_preprocessing": IMAGES})]})
    core = SchedulerCore(FcfsDispatch(), Catalogue(profiles, {"app": ["fam"]}), CoreConfig(), clock=lambda: 1.0)
    images = encode_images([b"jpeg"])
    query = make_query("q", inputs=images.tensors, slo_ms=500.0, sent_at=1.0)
    assert core.admit(query, payload=Received(query, "meridian.queries/0/1", memoryview(images.binary))) is None
    assert core.queue.items["q"].pending.candidate_variants == ("large",)
    tensor_only = SchedulerCore(FcfsDispatch(), Catalogue(PROFILES, {"app": ["fam"]}), CoreConfig(), clock=lambda: 1.0)
    assert tensor_only.admit(query).reason == ("`inputs` are encoded images, but the model takes rows of shape [4] "
                                               "of FP32")


def test_a_batch_of_images_is_predicted_to_take_its_preparation_too() -> None:
    """Each image row adds the profiled time to prepare it: to the fastest a query can be served (what its
    drop time counts on) and to when its worker is predicted free; a tensor query adds nothing."""
    profiles = PROFILES.model_copy(update={"variants": [PROFILES.variants[0].model_copy(
        update={"image_preprocessing": IMAGES, "image_prepare_ms": 2.0})]})
    core = SchedulerCore(FcfsDispatch(), Catalogue(profiles, {"app": ["fam"]}), CoreConfig(), clock=lambda: 1.0)
    core.on_worker_event(heartbeat("w1"))
    images = encode_images([b"jpeg"] * 3)
    query = make_query("q", inputs=images.tensors, batch_size=3, slo_ms=500.0, sent_at=1.0)
    assert core.admit(query, payload=Received(query, "meridian.queries/0/1", memoryview(images.binary))) is None
    assert core.queue.items["q"].fastest_s == pytest.approx((4.0 + 3 * 2.0) / 1000.0)
    [dispatch] = core.step().dispatches
    assert (dispatch.rows, dispatch.images) == (3, 3)
    assert core.workers["w1"].busy_until_s == pytest.approx(1.0 + (4.0 + 3 * 2.0) / 1000.0)
    tensor = make_query("t", slo_ms=500.0, sent_at=1.0)
    assert core.admit(tensor, payload=Received(tensor, "meridian.queries/0/2", memoryview(b""))) is None
    assert core.queue.items["t"].fastest_s == pytest.approx(1.0 / 1000.0)
