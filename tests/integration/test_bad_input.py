"""Bad input yields a `rejected` result with a reason plus a dead-letter copy; serving goes on."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from schemas import ResultStatus
from services.drills.spoofing import HOSTILE, REFUSED, UNPARSED, spoof
from shared.adapters.client import MeridianClient
from tests.integration.helpers import DeadLetterReader, digits_rows, make_query

pytestmark = pytest.mark.integration


def _ids(kinds: dict, prefix: str) -> dict[str, str]:
    return {kind: f"{prefix}-{kind.replace(' ', '-')}-{uuid.uuid4().hex[:8]}" for kind in kinds}


def test_bad_inputs_are_rejected_with_reasons_and_dead_lettered(pipeline, settings) -> None:
    letters = DeadLetterReader(settings)
    refused, unparsed = _ids(REFUSED, "bad"), _ids(UNPARSED, "bad")
    x, _ = digits_rows()
    good = make_query(x[:2])
    with MeridianClient(settings) as client:
        client.send_raw(b"{this is not json")
        for kind, query_id in [*refused.items(), *unparsed.items()]:
            client.send_raw(HOSTILE[kind][0](make_query(x[:1]), query_id))
        client.send(good)  # the service keeps running: a valid query after the bad ones is answered
        client.flush()
        assert client.wait_for([good.query_id, *refused.values()], 30)
        assert client.results[good.query_id][0].status is ResultStatus.OK
        for kind, query_id in refused.items():
            result, reason = client.results[query_id][0], REFUSED[kind][1]
            assert result.status is ResultStatus.REJECTED and reason in result.reason, f"{kind}: {result.reason}"
            assert result.query_position.startswith("meridian.queries/"), result
        assert client.wait_for_refusals(unparsed.values(), 30)
        for kind, query_id in unparsed.items():
            [refusal] = client.refusals[query_id]
            assert refusal.query_id.startswith("meridian.queries/") and UNPARSED[kind][1] in refusal.reason
            assert "Value error" not in refusal.reason and query_id not in client.results

        # a re-sent id, and a garbled message claiming it, do not touch the answer its query already has: the
        # re-sent message's refusal ("duplicate query id", under its position) is this client's own, a second
        # answer it suppresses; the garbled one's is another message's, kept apart
        client.send(good)
        client.send_raw(json.dumps({"query_id": good.query_id, "application": 5}).encode())
        client.flush()
        assert client.wait_for_refusals([good.query_id], 30)
        deadline = time.monotonic() + 30
        while client.duplicates < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        [refusal] = client.refusals[good.query_id]
        assert "`application` must be a valid string" in refusal.reason, refusal.reason
        assert client.results[good.query_id][0].status is ResultStatus.OK and client.duplicates == 1
    expected = 1 + len(refused) + len(unparsed) + 2
    dead = letters.read(expected=expected)
    letters.close()
    assert len(dead) == expected
    assert all(d.source_topic == "meridian.queries" and d.reason for d in dead)
    assert any(d.truncated for d in dead), "the oversized message is kept only in part"


def test_no_message_claiming_a_clients_query_id_spoils_its_answer(pipeline, settings) -> None:
    """Every kind of rejected message, sent by someone else under the id of a client's query, before that
    query and after it: the client's answer is its own query's, and the other message's is kept apart."""
    x, _ = digits_rows()
    outcome = spoof(settings, make_query(x[:1]), timeout_s=30)
    assert outcome.genuine == 2 * len(HOSTILE) and outcome.spoiled == 0, outcome
    assert outcome.kept_apart == outcome.kept_apart_with_their_reason == 2 * len(HOSTILE), outcome
