from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from schemas import MAX_PAYLOAD_BYTES, AllocationPlan, InferTensor, Query, worker_command_adapter, worker_event_adapter
from schemas.export import JSON_DIR, render_schemas
from schemas.messages import JSON_ELEMENT_BYTES
from shared.tensors import QueryInputs, encode, encode_binary, encode_images, read_batch, to_array


def test_exported_json_schemas_match_the_models() -> None:
    rendered = render_schemas()
    on_disk = {p.name: p.read_text() for p in JSON_DIR.glob("*.schema.json")}
    assert set(on_disk) == set(rendered), "run `make schemas` to re-export"
    drifted = [name for name, text in rendered.items() if on_disk[name] != text]
    assert not drifted, f"schemas drifted from the models: {drifted}; run `make schemas`"


def _tensor(**fields: object) -> InferTensor:
    return InferTensor.model_validate({"name": "input", "shape": [2, 2], "datatype": "FP32", **fields})


def test_json_tensor_round_trip() -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    [tensor] = encode(array)
    assert tensor.datatype == "FP32" and tensor.shape == [2, 3, 4] and len(tensor.data) == 24
    assert np.array_equal(to_array(QueryInputs(tensor, memoryview(b""))), array)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int32", "uint8"])
def test_binary_tensor_round_trip(dtype: str) -> None:
    array = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    inputs = encode_binary(array)
    assert inputs.tensors[0].binary_size == array.nbytes == len(inputs.binary)
    [read] = read_batch([inputs.tensors], inputs.binary)
    assert np.array_equal(to_array(read), array) and to_array(read).dtype == array.dtype


def test_a_binary_size_must_be_what_the_shape_needs() -> None:
    with pytest.raises(ValidationError, match="needs 16"):
        _tensor(parameters={"binary_data_size": 8})


def test_data_must_match_the_shape_and_the_datatype() -> None:
    with pytest.raises(ValidationError, match="`data` holds 3 elements but shape"):
        _tensor(data=[1.0, 2.0, 3.0])
    with pytest.raises(ValidationError, match="must hold int elements"):
        _tensor(datatype="INT64", data=[1.5, 2.0, 3.0, 4.0])
    with pytest.raises(ValidationError, match="must hold str elements"):
        _tensor(shape=[2], datatype="BYTES", data=[1, 2])
    with pytest.raises(ValidationError, match="not both or neither"):
        _tensor()
    with pytest.raises(ValidationError, match="not both or neither"):
        _tensor(data=[0.0] * 4, parameters={"binary_data_size": 16})


def test_bytes_need_room_for_their_length_prefixes() -> None:
    with pytest.raises(ValidationError, match="at least 12"):
        _tensor(shape=[3], datatype="BYTES", parameters={"binary_data_size": 11})
    assert _tensor(shape=[3], datatype="BYTES", parameters={"binary_data_size": 12}).binary_size == 12


def test_a_checked_tensor_put_into_another_message_is_not_checked_again() -> None:
    [tensor] = encode(np.zeros((1, 4), np.float32))
    forged = tensor.model_copy(update={"data": [1.0]})  # a copy skips validation: unchecked
    query = Query(query_id="q1", application="a", slo_ms=10, batch_size=1, inputs=[tensor], sent_at=1.0)
    assert query.inputs[0] is tensor
    assert Query(query_id="q1", application="a", slo_ms=10, batch_size=1, inputs=[forged], sent_at=1.0).inputs[0] is forged
    with pytest.raises(ValidationError, match="`data` holds 1 elements"):
        Query.model_validate_json(query.model_dump_json().replace("[0.0,0.0,0.0,0.0]", "[0.0]"))


@pytest.mark.parametrize("fields", [dict(shape=[MAX_PAYLOAD_BYTES // 4 + 1], data=None,
                                         parameters={"binary_data_size": MAX_PAYLOAD_BYTES + 4}),
                                    dict(shape=[1], datatype="BYTES", parameters={"binary_data_size": 2 << 30})])
def test_payload_over_the_limit_is_refused(fields: dict) -> None:
    with pytest.raises(ValidationError, match="exceeds the 4 MiB limit"):
        _tensor(**fields)


def test_a_query_takes_one_input_tensor() -> None:
    [tensor] = encode(np.zeros((1, 4), np.float32))
    with pytest.raises(ValidationError, match="at most 1 item"):
        Query(query_id="q1", application="a", slo_ms=10, batch_size=1, inputs=[tensor, tensor], sent_at=1.0)


def test_payload_and_binary_bytes_of_a_query() -> None:
    images = encode_images([b"abc", b"defgh"])
    query = Query(query_id="q1", application="a", slo_ms=10, batch_size=2, inputs=images.tensors, sent_at=1.0)
    assert query.binary_bytes == query.payload_bytes == len(images.binary) == 4 + 3 + 4 + 5
    as_json = Query(query_id="q2", application="a", slo_ms=10, batch_size=1,
                    inputs=encode(np.zeros((1, 4), np.float32)), sent_at=1.0)
    assert as_json.binary_bytes == 0 and as_json.payload_bytes == 4 * JSON_ELEMENT_BYTES


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
