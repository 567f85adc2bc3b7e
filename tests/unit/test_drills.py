"""The drills' ledger: what counts as lost, duplicated, disturbed and recovered."""
from __future__ import annotations

from schemas import HopTimestamps, Result, ResultStatus
from services.drills.load import summarize


def result(query_id: str, status: ResultStatus = ResultStatus.OK) -> Result:
    return Result(query_id=query_id, status=status, timestamps=HopTimestamps())


def test_a_query_without_a_result_is_lost_and_recovery_is_unknown() -> None:
    out = summarize({"a": 0.0, "b": 2.0}, {"a": 500.0, "b": 500.0}, {"a": result("a")}, {"a": 0.1}, 0, 1.0)
    assert (out.sent, out.answered, out.lost, out.recovery_s) == (2, 1, 1, None)


def test_recovery_ends_with_the_last_disturbed_result() -> None:
    sent = {"a": 0.0, "b": 2.0, "c": 3.0, "d": 4.0}
    results = {"a": result("a"), "b": result("b"), "c": result("c", ResultStatus.DROPPED), "d": result("d")}
    received = {"a": 0.1, "b": 2.1, "c": 5.5, "d": 4.1}  # b and d are as fast as before; c was dropped at 5.5
    out = summarize(sent, dict.fromkeys(sent, 500.0), results, received, 2, 1.0)
    assert out.recovery_s == 4.5
    assert (out.dropped, out.duplicates_seen_by_client, out.within_slo_fraction) == (1, 2, 0.75)


def test_recovery_after_repair_counts_from_the_repair_and_never_below_zero() -> None:
    sent = {"a": 0.0, "b": 2.0, "c": 3.0}
    results = {"a": result("a"), "b": result("b", ResultStatus.DROPPED), "c": result("c")}
    received = {"a": 0.1, "b": 6.0, "c": 3.1}
    slo = dict.fromkeys(sent, 500.0)
    assert summarize(sent, slo, results, received, 0, 1.0, repaired_s=4.0).recovery_after_repair_s == 2.0
    assert summarize(sent, slo, results, received, 0, 1.0, repaired_s=7.0).recovery_after_repair_s == 0.0
    assert summarize(sent, slo, results, received, 0, 1.0).recovery_after_repair_s is None


def test_nothing_disturbed_means_zero_recovery() -> None:
    sent = {"a": 0.0, "b": 2.0}
    out = summarize(sent, dict.fromkeys(sent, 500.0), {q: result(q) for q in sent}, {"a": 0.1, "b": 2.1}, 0, 1.0)
    assert out.recovery_s == 0.0 and out.lost == 0


def test_every_generated_hostile_message_is_invalid_for_its_topic() -> None:
    """The hostile-input drill expects a dead letter per message, so none may be valid by accident."""
    from pydantic import ValidationError

    from schemas import AllocationPlan, DispatchBatch, LoadStatistics, Query, RegisterModel, WorkerHeartbeat
    from services.drills.hostile import generate, hostile_messages, templates

    models = [Query, WorkerHeartbeat, AllocationPlan, LoadStatistics, RegisterModel, DispatchBatch]
    for model, (template, required) in zip(models, templates("w").values(), strict=True):
        for message in generate(hostile_messages(template, required, semantic=False), 300, seed=3):
            try:
                model.model_validate_json(message)
            except ValidationError:
                continue
            raise AssertionError(f"a valid {model.__name__} was generated: {message[:200]!r}")


def test_a_restart_is_measured_to_its_first_ok_and_by_the_slowest_second_of_the_hop_after() -> None:
    def timed(query_id: str, sent: float, got: float, status: ResultStatus = ResultStatus.OK) -> Result:
        return Result(query_id=query_id, status=status,
                      timestamps=HopTimestamps(client_sent=sent, scheduler_received=got))
    sent = {"a": 0.0, "b": 2.0, "c": 3.0, "d": 6.0, "e": 6.5}
    results = {"a": timed("a", 0.0, 0.001), "b": timed("b", 2.0, 5.0, ResultStatus.DROPPED),
               "c": timed("c", 3.0, 5.0), "d": timed("d", 6.0, 6.2), "e": timed("e", 6.5, 6.501)}
    received = {"a": 0.1, "b": 5.1, "c": 5.2, "d": 6.3, "e": 6.6}
    out = summarize(sent, dict.fromkeys(sent, 5000.0), results, received, 0, 1.0, repaired_s=4.0)
    assert out.first_ok_after_repair_s == 1.2  # c, at 5.2; b was dropped
    assert out.longest_client_hop_p50_ms_after_recovery == 100.5  # after c (received 5.2): d 200 ms, e 1 ms, one second
