"""Bad input yields a `rejected` result with a reason plus a dead-letter copy; serving goes on."""
from __future__ import annotations

import base64
import json
import uuid

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


CASES = {
    "not json": (b"{this is not json", "malformed"),
    "wrong types": (json.dumps({"query_id": "bad-types-1", "application": 5, "slo_ms": "fast"}).encode(), "malformed"),
    "unknown application": (_raw_query(query_id="bad-app-1", application="nope"), "unknown application"),
    "unknown model": (_raw_query(query_id="bad-model-1", model="resnet9000"), "unknown model"),
    "slo below any latency": (_raw_query(query_id="bad-slo-1", slo_ms=0.0001), "below the fastest"),
}


def test_bad_inputs_are_rejected_with_reasons_and_dead_lettered(pipeline, settings) -> None:
    raws = {name: raw for name, (raw, _) in CASES.items()}
    raws["oversized payload"] = _oversized()
    letters = DeadLetterReader(settings)
    x, _ = digits_rows()
    good = make_query(x[:2])
    with MeridianClient(settings) as client:
        for raw in raws.values():
            client.send_raw(raw)
        client.send(good)  # the service keeps running: a valid query after the bad ones is answered
        client.flush()
        rejected_ids = ["bad-types-1", "bad-app-1", "bad-model-1", "bad-slo-1"]
        assert client.wait_for([good.query_id, *rejected_ids], timeout_s=30)
        assert client.results[good.query_id][0].status is ResultStatus.OK
        for name, (_, reason) in CASES.items():
            if name == "not json":
                continue
            qid = json.loads(raws[name])["query_id"]
            result = client.results[qid][0]
            assert result.status is ResultStatus.REJECTED, name
            assert reason in result.reason, f"{name}: {result.reason}"
        big_id = json.loads(raws["oversized payload"])["query_id"]
        assert client.wait_for([big_id], timeout_s=30)
        big = client.results[big_id][0]
        assert big.status is ResultStatus.REJECTED and "exceeds" in big.reason
    dead = letters.read(expected=len(raws))
    letters.close()
    assert len(dead) == len(raws)
    assert all(d.source_topic == "meridian.queries" and d.reason for d in dead)
    assert any(d.truncated for d in dead), "the oversized message is kept only in part"
