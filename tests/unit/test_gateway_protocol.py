"""The gateway's Open Inference Protocol messages (`services.gateway.protocol`): a request becomes one
query and its binary section as sent; an answer becomes OIP's response, a refusal an error with a status."""
from __future__ import annotations

import json
from http import HTTPStatus

import numpy as np
import pytest

from schemas import Query, Result, ResultStatus
from services.gateway import protocol
from services.gateway.protocol import BadRequest, admit, parse_rest
from shared.catalogue import Catalogue
from shared.profiles import ProfileSet
from shared.settings import REPO_ROOT

ROWS = np.arange(2 * 64, dtype=np.float32).reshape(2, 8, 8)


def request(header: dict, binary: bytes = b"") -> tuple[bytes, str | None]:
    text = json.dumps(header).encode()
    return text + binary, (str(len(text)) if binary else None)


def read(body: bytes, header_length: str | None, **given) -> protocol.Admitted:
    return admit(*parse_rest(body, header_length), **{"query_id": "gw-1", "application": "digits", "version": None,
                                                       "slo_ms": 50.0, "now_s": 1000.0, **given})


def test_a_binary_input_is_carried_as_sent_and_the_goals_ride_in_the_parameters() -> None:
    raw = ROWS.tobytes()
    body, length = request({"id": "r1", "parameters": {"slo_ms": 80, "accuracy_floor": 0.9},
                            "inputs": [{"name": "input", "shape": [2, 8, 8], "datatype": "FP32",
                                        "parameters": {"binary_data_size": len(raw)}}],
                            "outputs": [{"name": "predictions", "parameters": {"binary_data": True}}]}, raw)
    admitted = read(body, length)
    query = admitted.query
    assert admitted.binary == raw and admitted.request_id == "r1" and admitted.binary_output
    assert (query.batch_size, query.slo_ms, query.accuracy_floor, query.model) == (2, 80, 0.9, None)
    assert query.inputs[0].binary_size == len(raw) and query.inputs[0].data is None


def test_nested_json_data_is_flattened_and_the_application_slo_and_the_urls_variant_apply() -> None:
    body, length = request({"inputs": [{"name": "input", "shape": [2, 8, 8], "datatype": "FP32",
                                        "data": ROWS.tolist()}]})
    admitted = read(body, length, version="digits-cnn-l")
    assert admitted.query.inputs[0].data == ROWS.reshape(-1).tolist()
    assert (admitted.query.slo_ms, admitted.query.model, admitted.binary_output) == (50.0, "digits-cnn-l", False)


def test_tritons_timeout_in_microseconds_is_the_slo_when_none_is_named() -> None:
    body, _ = request({"parameters": {"timeout": 120_000},
                       "inputs": [{"name": "input", "shape": [1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]})
    assert read(body, None).query.slo_ms == 120.0



def test_an_absolute_deadline_is_the_slo_left_and_one_passed_is_a_504() -> None:
    row = {"name": "input", "shape": [1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}
    body, _ = request({"parameters": {"deadline": 1000.25, "timeout": 9_000_000}, "inputs": [row]})
    assert read(body, None).query.slo_ms == pytest.approx(250.0)
    body, _ = request({"parameters": {"deadline": 999.5}, "inputs": [row]})
    with pytest.raises(BadRequest, match="deadline passed 0.500 s") as refused:
        read(body, None)
    assert refused.value.status is HTTPStatus.GATEWAY_TIMEOUT


@pytest.mark.parametrize(("given", "priority"), [(2, 2), (0, None), (None, None)])
def test_the_priority_class_rides_in_the_parameters_as_triton_numbers_it(given, priority) -> None:
    """Triton's clients send ``priority`` only when it is not 0, their "default"."""
    body, _ = request({"parameters": {"priority": given},
                       "inputs": [{"name": "input", "shape": [1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}]})
    assert read(body, None).query.priority == priority

@pytest.mark.parametrize(("header", "binary", "length", "says"), [
    ({"inputs": []}, b"", None, "inputs"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}] * 2}, b"", None, "2 inputs"),
    ({"inputs": [{"name": "a", "shape": [1, 8, 8], "datatype": "FP32", "data": [1.0]}]}, b"", None, "64"),
    ({"inputs": [{"name": "a", "shape": [1, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 256}}]},
     b"x" * 10, "auto", "256 bytes of binary data, but the request carries 10"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}]}, b"", "999", "999"),
    ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}], "outputs": [{"name": "logits"}]},
     b"", None, "logits"),
    ({"parameters": {"priority": 12}, "inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}]},
     b"", None, "priority"),
    ({"parameters": {"slo_ms": -5}, "inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1.0]}]},
     b"", None, "slo_ms"),
])
def test_a_request_it_cannot_make_a_query_of_is_refused_with_the_reason(header, binary, length, says) -> None:
    body, natural = request(header, binary)
    with pytest.raises(BadRequest, match=says) as refused:
        read(body, natural if length == "auto" else length)
    assert refused.value.status is HTTPStatus.BAD_REQUEST


def test_not_json_is_refused() -> None:
    with pytest.raises(BadRequest, match="JSON"):
        read(b"\x89PNG not json", None)


def sent(binary_output: bool) -> protocol.Admitted:
    query = Query(query_id="gw-1", application="digits", slo_ms=50.0, batch_size=3, sent_at=100.0,
                  inputs=[{"name": "input", "shape": [3, 1], "datatype": "FP32", "data": [1.0, 2.0, 3.0]}])
    return protocol.Admitted(query, b"", "r7", binary_output)


def answer(**fields) -> Result:
    return Result(**{"query_id": "gw-1", "status": ResultStatus.OK, "variant": "digits-cnn-l", "worker_id": "w1",
                     "device": "cpu-1t", "predictions": [4, 0, 9], **fields})


def test_an_answer_is_the_predictions_output_as_json_or_binary_with_meridians_parameters() -> None:
    status, headers, body = protocol.response(answer(), sent(False), received_at=100.030)
    header = json.loads(body)
    assert status is HTTPStatus.OK and protocol.HEADER_LENGTH not in headers
    assert header["outputs"] == [{"name": "predictions", "datatype": "INT64", "shape": [3], "data": [4, 0, 9]}]
    assert header["id"] == "r7" and header["model_name"] == "digits" and header["model_version"] == "digits-cnn-l"
    assert header["parameters"]["within_slo"] and header["parameters"]["latency_ms"] == pytest.approx(30.0)

    status, headers, body = protocol.response(answer(), sent(True), received_at=100.080)
    end = int(headers[protocol.HEADER_LENGTH])
    header = json.loads(body[:end])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 24}
    assert np.frombuffer(body[end:], dtype="<i8").tolist() == [4, 0, 9] and not header["parameters"]["within_slo"]


@pytest.mark.parametrize(("status", "code"), [(ResultStatus.REJECTED, HTTPStatus.BAD_REQUEST),
                                               (ResultStatus.DROPPED, HTTPStatus.GATEWAY_TIMEOUT),
                                               (ResultStatus.ERROR, HTTPStatus.INTERNAL_SERVER_ERROR)])
def test_a_refused_dropped_or_failed_query_is_an_error_with_its_reason(status, code) -> None:
    got, _, body = protocol.response(answer(status=status, reason="because", predictions=None), sent(False), 100.0)
    assert got is code and json.loads(body) == {"error": "because"}


def test_the_metadata_names_the_variants_the_row_shape_and_the_default_goal() -> None:
    catalogue = Catalogue(ProfileSet.load(REPO_ROOT / "profiles" / "digits.json"), {"digits": ["digits"]})
    metadata = protocol.model_metadata(catalogue, {}, "digits")
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert set(metadata["versions"]) == set(catalogue.variants_of("digits"))
    assert metadata["parameters"] == {"accepts_encoded_images": False, "slo_ms": 50.0}
    assert protocol.model_metadata(catalogue, {"digits": 80.0}, "digits")["parameters"]["slo_ms"] == 80.0
