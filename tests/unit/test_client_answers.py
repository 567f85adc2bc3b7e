"""An answer belongs to the message that asked: no result for another message claiming a client's query id
becomes that query's answer, whatever the order of arrival (`shared.adapters.answers`)."""
from __future__ import annotations

from schemas import Result, ResultStatus
from shared.adapters.answers import Answers

MINE, THEIRS = "meridian.queries/0/7", "meridian.queries/1/3"


def ok(query_id: str, at: str) -> Result:
    return Result(query_id=query_id, query_position=at, status=ResultStatus.OK)


def rejected(query_id: str, at: str, reason: str = "unknown application 'nope'") -> Result:
    return Result(query_id=query_id, query_position=at, status=ResultStatus.REJECTED, reason=reason)


def refused_under_position(at: str, claimed: str, reason: str) -> Result:
    return Result(query_id=at, query_position=at, claimed_query_id=claimed, status=ResultStatus.REJECTED,
                  reason=reason)


def test_another_messages_rejection_taken_before_the_id_was_sent_is_set_apart_when_it_is() -> None:
    answers = Answers()
    assert answers.keep(rejected("q", THEIRS), 1.0) is not None  # nobody here had sent q: taken as it says
    answers.sending("q")
    assert "q" not in answers.results and answers.refusals["q"][0].query_position == THEIRS
    assert answers.delivered("q", MINE) == []
    assert answers.keep(ok("q", MINE), 2.0).status is ResultStatus.OK
    assert answers.results["q"][0].query_position == MINE


def test_a_result_before_the_delivery_report_waits_for_it_and_is_then_told_apart() -> None:
    answers = Answers()
    answers.sending("q")
    assert answers.keep(rejected("q", THEIRS), 1.0) is None and answers.keep(ok("q", MINE), 1.1) is None
    assert not answers.results and not answers.refusals
    released = answers.delivered("q", MINE)
    taken = [answers.keep(result, at) for result, at in released]
    assert [t is not None for t in taken] == [False, True]
    assert answers.results["q"][0].status is ResultStatus.OK and [r.query_position for r in answers.refusals["q"]] == [THEIRS]


def test_after_the_delivery_report_another_messages_answer_is_kept_apart() -> None:
    answers = Answers()
    answers.sending("q")
    answers.delivered("q", MINE)
    assert answers.keep(ok("q", THEIRS), 1.0) is None  # a hostile query served under the claimed id
    assert answers.keep(refused_under_position(THEIRS, "q", "duplicate query id"), 1.0) is None
    assert not answers.results and len(answers.refusals["q"]) == 2
    assert answers.keep(ok("q", MINE), 1.2) is not None


def test_a_refusal_of_the_clients_own_message_under_its_position_is_its_answer() -> None:
    answers = Answers()
    answers.sending("q")
    answers.delivered("q", MINE)
    answer = answers.keep(refused_under_position(MINE, "q", "duplicate query id: 'q' was admitted 1 s ago"), 1.0)
    assert answer is not None and answer.query_id == "q" and answer.status is ResultStatus.REJECTED
    assert answers.results["q"][0].reason.startswith("duplicate query id")


def test_a_resent_id_keeps_its_first_answer_and_counts_the_second_as_a_duplicate() -> None:
    answers = Answers()
    answers.sending("q")
    answers.delivered("q", MINE)
    answers.keep(ok("q", MINE), 1.0)
    answers.sending("q")
    assert answers.results["q"][0].status is ResultStatus.OK, "the client's own earlier answer stays"
    answers.delivered("q", "meridian.queries/0/8")
    assert answers.keep(refused_under_position("meridian.queries/0/8", "q", "duplicate query id"), 2.0) is None
    assert answers.duplicates == 1 and not answers.refusals


def test_results_for_ids_this_client_never_sent_are_taken_as_they_say() -> None:
    answers = Answers()
    assert answers.keep(ok("other", THEIRS), 1.0) is not None and answers.keep(ok("other", THEIRS), 1.1) is None
    assert answers.duplicates == 1
    assert answers.keep(refused_under_position(THEIRS, "garbled", "`application` must be a valid string"), 1.0) is None
    assert list(answers.refusals) == ["garbled"]


def test_a_query_never_delivered_has_no_answer_whatever_claims_its_id() -> None:
    answers = Answers()
    answers.sending("q")
    assert answers.keep(ok("q", THEIRS), 1.0) is None
    [(held, _)] = answers.delivered("q", None)
    assert answers.keep(held, 1.0) is None and "q" not in answers.results and len(answers.refusals["q"]) == 1


def test_an_own_only_reader_keeps_nothing_of_others_queries_nor_of_a_query_it_forgot() -> None:
    answers = Answers(own_only=True)
    assert answers.keep(ok("someone-elses", THEIRS), 1.0) is None
    assert answers.keep(refused_under_position(THEIRS, "another", "a duplicate id"), 1.0) is None
    answers.sending("q")
    answers.delivered("q", MINE)
    assert answers.keep(ok("q", MINE), 2.0) is not None
    answers.forget("q")
    assert answers.keep(ok("q", MINE), 3.0) is None  # a late repeat of the answer it was done with
    assert answers.ignored == 3
    assert not answers.results and not answers.refusals and not answers._mine and not answers._sent


def test_a_delivery_report_of_a_forgotten_query_leaves_nothing_behind() -> None:
    answers = Answers(own_only=True)
    answers.sending("q")
    answers.forget("q")  # its caller went away before the broker acknowledged its message
    assert answers.delivered("q", MINE) == []
    assert answers.keep(ok("q", MINE), 1.0) is None
    assert not answers._mine and not answers._position_of and not answers._early
