"""Bad input yields a `rejected` result with a reason plus a dead-letter copy; serving goes on."""
from __future__ import annotations

import base64
import json
import time
import uuid

import numpy as np

import pytest

from schemas import ResultStatus
from shared.adapters.client import MeridianClient
from tests.integration.helpers import DeadLetterReader, digits_rows, make_query

pytestmark = pytest.mark.integration


def _raw_query(**fields: object) -> bytes:
    x, _ = digits_rows()
    return make_query(x[:1]).model_copy(update=fields).model_dump_json().encode()


def _oversized() -> bytes:
    rows = 1300  # 1300 x 1 x 32 x 32 float32 = 5.3 MB: over the 4 MiB payload limit, under the broker's 16 MiB
    payload = {"dtype": "float32", "shape": [rows, 1, 32, 32],
               "data_b64": base64.b64encode(bytes(rows * 1024 * 4)).decode()}
    query = json.loads(_raw_query())
    query.update(query_id=f"big-{uuid.uuid4().hex}", batch_size=rows, inputs=payload)
    return json.dumps(query).encode()


def cases() -> dict[str, tuple[bytes, str]]:
    """Messages that parse but cannot be served, made just before they are sent (``sent_at`` is checked)."""
    return {
        "unknown application": (_raw_query(query_id="bad-app-1", application="nope"), "unknown application"),
        "unknown model": (_raw_query(query_id="bad-model-1", model="resnet9000"), "unknown model"),
        "slo below any latency": (_raw_query(query_id="bad-slo-1", slo_ms=0.0001), "below the fastest"),
        "sent a year ahead": (_raw_query(query_id="bad-future-1", sent_at=time.time() + 365 * 86_400),
                              "`sent_at` is 365 days ahead of the scheduler's clock"),
        "wrong row shape": (make_query(np.zeros((1, 3, 3), np.float32), query_id="bad-shape-1").model_dump_json()
                            .encode(), "`inputs` rows have shape [3, 3] of float32, but the model takes rows of "
                                       "shape [1, 8, 8]"),
    }


#: messages that do not parse: refused under their position, never under the id they claim
UNPARSED = {
    "wrong types": (json.dumps({"query_id": "bad-types-1", "application": 5, "slo_ms": "fast"}).encode(),
                    "`application` must be a valid string (got 5)"),
    "oversized payload": (_oversized(), "exceeds the 4 MiB limit"),
}


def test_bad_inputs_are_rejected_with_reasons_and_dead_lettered(pipeline, settings) -> None:
    letters = DeadLetterReader(settings)
    refused = cases()
    x, _ = digits_rows()
    good = make_query(x[:2])
    with MeridianClient(settings) as client:
        client.send_raw(b"{this is not json")
        for raw, _ in [*refused.values(), *UNPARSED.values()]:
            client.send_raw(raw)
        client.send(good)  # the service keeps running: a valid query after the bad ones is answered
        client.flush()
        assert client.wait_for([good.query_id, *(json.loads(raw)["query_id"] for raw, _ in refused.values())], 30)
        assert client.results[good.query_id][0].status is ResultStatus.OK
        for name, (raw, reason) in refused.items():
            result = client.results[json.loads(raw)["query_id"]][0]
            assert result.status is ResultStatus.REJECTED and reason in result.reason, f"{name}: {result.reason}"
        claimed = {json.loads(raw)["query_id"]: reason for raw, reason in UNPARSED.values()}
        assert client.wait_for_refusals(claimed, 30)
        for query_id, reason in claimed.items():
            [refusal] = client.refusals[query_id]
            assert refusal.query_id.startswith("meridian.queries/") and reason in refusal.reason, refusal.reason
            assert "Value error" not in refusal.reason and query_id not in client.results

        # a re-sent id, and a garbled message claiming it, do not touch the answer its query already has
        client.send(good)
        client.send_raw(json.dumps({"query_id": good.query_id, "application": 5}).encode())
        client.flush()
        assert client.wait_for_refusals([good.query_id], 30)
        deadline = time.monotonic() + 30
        while len(client.refusals[good.query_id]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        reasons = sorted(r.reason for r in client.refusals[good.query_id])
        assert len(reasons) == 2 and reasons[0].startswith("duplicate query id"), reasons
        assert client.results[good.query_id][0].status is ResultStatus.OK and client.duplicates == 0
    expected = 1 + len(refused) + len(UNPARSED) + 2
    dead = letters.read(expected=expected)
    letters.close()
    assert len(dead) == expected
    assert all(d.source_topic == "meridian.queries" and d.reason for d in dead)
    assert any(d.truncated for d in dead), "the oversized message is kept only in part"
