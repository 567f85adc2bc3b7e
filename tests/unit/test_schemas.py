from __future__ import annotations

import base64
import binascii
import json

import numpy as np
import pytest
from pydantic import ValidationError

from schemas import MAX_PAYLOAD_BYTES, AllocationPlan, Query, TensorPayload, worker_command_adapter, worker_event_adapter
from schemas.export import JSON_DIR, render_schemas
from shared.tensors import decode, encode


def test_exported_json_schemas_match_the_models() -> None:
    rendered = render_schemas()
    on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.schema.json")}
    assert set(on_disk) == set(rendered), "run `make schemas` to re-export"
    drifted = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not drifted, f"schemas drifted from the models: {drifted}; run `make schemas`"


def test_tensor_round_trip() -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.array_equal(decode(encode(array)), array)


def test_payload_must_match_its_shape() -> None:
    with pytest.raises(ValidationError, match="needs 16"):
        TensorPayload(dtype="float32", shape=[2, 2], data_b64=base64.b64encode(b"\0" * 8).decode())


@pytest.mark.parametrize("text", ["", "AAAA", "AAA=", "AA==", "A===", "AAA", "AA=A", "AA AA", "AA\nA", "AAé=",
                                  "+/+/", "-_-_", "=AAA", base64.b64encode(bytes(range(256))).decode()])
def test_payload_size_is_read_off_the_base64_text_as_decoding_would_find_it(text: str) -> None:
    try:
        decoded: int | None = len(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        decoded = None
    rows = max(1, decoded or 1)
    try:
        TensorPayload(dtype="uint8", shape=[rows], data_b64=text)
        accepted = True
    except ValidationError as exc:
        accepted = False
        assert "not valid base64" in str(exc) or "needs" in str(exc)
    assert accepted == (decoded is not None and decoded >= 1), text


def test_a_checked_payload_put_into_another_message_is_not_checked_again() -> None:
    payload = encode(np.zeros((1, 4), np.float32))
    forged = payload.model_copy(update={"data_b64": "not base64"})  # a copy skips validation: unchecked
    query = Query(query_id="q1", application="a", slo_ms=10, batch_size=1, inputs=payload, sent_at=1.0)
    assert query.inputs is payload
    assert Query(query_id="q1", application="a", slo_ms=10, batch_size=1, inputs=forged, sent_at=1.0).inputs is forged
    with pytest.raises(ValidationError, match="not valid base64"):
        Query.model_validate_json(query.model_dump_json().replace(payload.data_b64, "AAAAAAAAAAA!"))


def test_payload_over_the_limit_is_refused() -> None:
    rows = MAX_PAYLOAD_BYTES // 4 + 1
    with pytest.raises(ValidationError, match="exceeds"):
        TensorPayload(dtype="float32", shape=[rows], data_b64="")


def test_query_rows_must_match_inputs() -> None:
    with pytest.raises(ValidationError, match="batch_size"):
        Query(query_id="q1", application="a", model="m", slo_ms=10, batch_size=3,
              inputs=encode(np.zeros((2, 4), np.float32)), sent_at=1.0)


def test_unknown_schema_version_is_refused() -> None:
    query = Query(query_id="q1", application="a", model="m", slo_ms=10, batch_size=1, sent_at=1.0)
    data = json.loads(query.model_dump_json())
    data["schema_version"] = 2
    with pytest.raises(ValidationError):
        Query.model_validate(data)


def test_unions_dispatch_on_their_tag() -> None:
    event = worker_event_adapter.validate_json(
        '{"event": "variant_loaded", "worker_id": "w", "variant": "v", "load_ms": 1.0, "at": 1.0}')
    assert type(event).__name__ == "VariantLoaded"
    command = worker_command_adapter.validate_json('{"command": "unload_variant", "worker_id": "w", "variant": "v"}')
    assert type(command).__name__ == "UnloadVariant"


def test_plan_routing_shares_must_sum_to_one() -> None:
    with pytest.raises(ValidationError, match="sum to 1"):
        AllocationPlan(plan_id="p", planner="x", status="optimal", message="", placements=[],
                       routing={"app": {"a": 0.5, "b": 0.2}}, at=1.0)
