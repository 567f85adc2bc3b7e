"""The Open Inference Protocol's REST messages (KServe v2) <-> Meridian's queries and results, without I/O.

An inference request (``POST /v2/models/{application}/infer``) is JSON, optionally followed by its input
tensors' bytes (the binary tensor extension: the ``Inference-Header-Content-Length`` header says where the
JSON ends, and each binary input declares ``parameters.binary_data_size``). It becomes one `Query` of the
application and the binary section as sent, never decoded here: the worker reads it, as it reads a
client's. Meridian's goals ride in the request's ``parameters`` (`GOALS`).

A `Result` becomes the response: ``200`` with the ``predictions`` output (top-1 class per row) for an
answer, else an OIP error body ``{"error": reason}`` with a status a caller can act on (`refusal_of`).
The gRPC service (`services.gateway.grpc_service`) reads its messages into the same `InferRequest` and
admits them here (`admit`), so both doors make the same query of the same request.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas import NUMPY_DATATYPES, InferTensor, Query, Result, ResultStatus, TensorParameters
from shared.adapters.dead_letter import describe_validation_error
from shared.catalogue import Catalogue

#: the request parameters Meridian reads, and what each means
GOALS = {
    "slo_ms": "the latency goal in milliseconds (default: the application's SLO)",
    "deadline": "the same goal as an absolute time, Unix seconds (used when `slo_ms` is absent)",
    "timeout": "Triton's name for the goal, in microseconds (used when `slo_ms` and `deadline` are absent)",
    "accuracy_floor": "the least accuracy a serving variant may have, 0 to 1 (default: none)",
    "model": "a model family or variant of the application to serve with (default: any); "
             "the URL's `/versions/{variant}` says the same",
    "priority": "the priority class, as Triton numbers them: 1 is served first, 9 last; 0 or none: the "
                "application's default (MERIDIAN_APPLICATION_PRIORITY, else 5)",
}
#: the one output every answer carries: the top-1 class of each row
PREDICTIONS = "predictions"
HEADER_LENGTH = "Inference-Header-Content-Length"


class BadRequest(ValueError):
    """A request the gateway cannot turn into a query; ``str(exc)`` is the reason the caller sees."""

    def __init__(self, reason: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(reason)
        self.status = status


class RequestTensor(BaseModel):
    """An input tensor as OIP's REST request writes it (``data`` may be nested, row-major)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class RequestedOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    parameters: dict[str, Any] | None = None


class InferRequest(BaseModel):
    """OIP's inference request header."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(default=None, max_length=256)
    parameters: dict[str, Any] | None = None
    inputs: list[RequestTensor] = Field(min_length=1)
    outputs: list[RequestedOutput] | None = None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request as a query: what to send, and how its caller wants the answer written."""

    query: Query
    binary: bytes
    request_id: str | None
    binary_output: bool


def parse_rest(body: bytes, header_length: str | None) -> tuple[InferRequest, bytes]:
    """A REST body (the header's JSON, then any binary inputs) as the request and its binary section."""
    json_end = len(body) if header_length is None else _header_end(header_length, len(body))
    try:
        return InferRequest.model_validate_json(body[:json_end]), body[json_end:]
    except ValidationError as exc:
        raise BadRequest(describe_validation_error(exc)) from None


def admit(request: InferRequest, binary: bytes, *, query_id: str, application: str, version: str | None,
          slo_ms: float | None, now_s: float) -> Admitted:
    """``request`` (with the ``binary`` data its inputs declare) as a query ``query_id`` of ``application``
    (``version``: the variant its URL or message names); ``slo_ms``: the application's default goal, if it
    has one; ``now_s``: the time (Unix seconds) an absolute ``deadline`` counts from. Raises `BadRequest`."""
    if len(request.inputs) != 1:
        raise BadRequest(f"the request has {len(request.inputs)} inputs; Meridian's models take one")
    parameters = request.parameters or {}
    wanted = [output.name for output in request.outputs or ()]
    if any(name != PREDICTIONS for name in wanted):
        raise BadRequest(f"unknown output(s) {sorted(set(wanted) - {PREDICTIONS})}; the one output is {PREDICTIONS!r}")
    tensor = _tensor(request.inputs[0])
    if len(binary) != (tensor.binary_size or 0):
        raise BadRequest(f"the inputs declare {tensor.binary_size or 0} bytes of binary data, but the request "
                         f"carries {len(binary)}")
    goal_ms = _slo_ms(parameters, slo_ms, now_s)
    if goal_ms is None:
        raise BadRequest(f"application {application!r} has no default SLO: name one in the parameters' `slo_ms`")
    goals = {"slo_ms": goal_ms, "accuracy_floor": parameters.get("accuracy_floor"),
             "model": version or parameters.get("model"), "priority": parameters.get("priority") or None}
    try:
        query = Query(query_id=query_id, application=application, batch_size=tensor.shape[0], inputs=[tensor],
                      sent_at=0.0, **goals)
    except ValidationError as exc:
        raise BadRequest(describe_validation_error(exc)) from None
    binary_output = bool(parameters.get("binary_data_output")) or any(
        (output.parameters or {}).get("binary_data") for output in request.outputs or ())
    return Admitted(query, binary, request.id, binary_output)


def _header_end(header_length: str, body_length: int) -> int:
    try:
        end = int(header_length)
    except ValueError:
        raise BadRequest(f"{HEADER_LENGTH} is {header_length!r}, not a number of bytes") from None
    if not 0 < end <= body_length:
        raise BadRequest(f"{HEADER_LENGTH} is {end}, but the body holds {body_length} bytes")
    return end


def _slo_ms(parameters: Mapping[str, Any], default_ms: float | None, now_s: float) -> Any:
    if parameters.get("slo_ms") is not None:
        return parameters["slo_ms"]
    deadline = parameters.get("deadline")
    if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
        if deadline <= now_s:
            raise BadRequest(f"the request's deadline passed {now_s - deadline:.3f} s before the gateway read it",
                             HTTPStatus.GATEWAY_TIMEOUT)
        return (deadline - now_s) * 1000.0
    timeout_us = parameters.get("timeout")
    if isinstance(timeout_us, (int, float)) and not isinstance(timeout_us, bool) and timeout_us > 0:
        return timeout_us / 1000.0
    return default_ms


def _tensor(given: RequestTensor) -> InferTensor:
    """The input as Meridian's tensor: nested ``data`` flattened, only ``binary_data_size`` of its
    parameters kept (OIP lets a client send others: they say nothing a worker reads)."""
    size = (given.parameters or {}).get("binary_data_size")
    data = None if given.data is None else np.asarray(given.data, dtype=object).reshape(-1).tolist()
    try:
        return InferTensor(name=given.name, shape=given.shape, datatype=given.datatype, data=data,
                           parameters=None if size is None else TensorParameters(binary_data_size=size))
    except ValueError as exc:  # pydantic's ValidationError is one
        raise BadRequest(f"input {given.name!r}: {describe_validation_error(exc)}") from None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request answered without an answer: the HTTP status (`services.gateway.grpc_service` maps it to
    gRPC's), the reason the caller reads, and headers (``Retry-After``, ``WWW-Authenticate``)."""

    status: HTTPStatus
    reason: str
    headers: Mapping[str, str] | None = None


#: an answer's status: 400 refused as asked, 504 dropped (it could no longer meet its deadline), 500
#: failed in its worker
_STATUS = {ResultStatus.REJECTED: HTTPStatus.BAD_REQUEST, ResultStatus.DROPPED: HTTPStatus.GATEWAY_TIMEOUT,
           ResultStatus.ERROR: HTTPStatus.INTERNAL_SERVER_ERROR}


def refusal_of(result: Result) -> Refusal | None:
    """The refusal a result that is not an answer is (None: served, late or not)."""
    if result.status is ResultStatus.OK:
        return None
    return Refusal(_STATUS[result.status], result.reason or result.status.value)


def predictions(result: Result) -> np.ndarray:
    """The answer's one output: the top-1 class per row, little-endian INT64."""
    return np.asarray(result.predictions or [], dtype="<i8")


def answer_parameters(result: Result, sent: Query, received_at: float) -> dict[str, Any]:
    """Who served the answer, what it took (from the gateway's send, ``received_at`` Unix seconds), its
    batch's compute and what it cost: the response's ``parameters``."""
    latency_ms = (received_at - sent.sent_at) * 1000.0
    stamps = result.timestamps
    compute_ms = None if stamps.compute_started is None or stamps.compute_finished is None \
        else round((stamps.compute_finished - stamps.compute_started) * 1000.0, 3)
    parameters = {"variant": result.variant, "worker": result.worker_id, "device": result.device,
                  "emulated": result.emulated, "priority": result.priority, "latency_ms": round(latency_ms, 3),
                  "compute_ms": compute_ms,
                  "within_slo": latency_ms <= sent.slo_ms, "cost_dollars": result.cost_dollars, "note": result.note}
    return {k: v for k, v in parameters.items() if v is not None}


#: an HTTP reply: status, headers, body
Reply = tuple[HTTPStatus, dict[str, str], bytes]


def response(result: Result, admitted: Admitted, received_at: float) -> Reply:
    """The REST reply answering ``admitted`` (its query as sent) with ``result``, received at
    ``received_at`` (Unix seconds)."""
    if (refused := refusal_of(result)) is not None:
        return error(refused)
    rows = predictions(result)
    output: dict[str, Any] = {"name": PREDICTIONS, "datatype": "INT64", "shape": [int(rows.size)]}
    binary = b""
    if admitted.binary_output:
        binary = rows.tobytes()
        output["parameters"] = {"binary_data_size": len(binary)}
    else:
        output["data"] = rows.tolist()
    header = {"model_name": admitted.query.application, "model_version": result.variant or "", "outputs": [output],
              "parameters": answer_parameters(result, admitted.query, received_at)}
    if admitted.request_id is not None:
        header["id"] = admitted.request_id
    text = json.dumps(header).encode()
    if not binary:
        return HTTPStatus.OK, {"Content-Type": "application/json"}, text
    return HTTPStatus.OK, {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(text))}, text + binary


def error(refusal: Refusal) -> Reply:
    """OIP's REST error: ``{"error": reason}``."""
    return (refusal.status, {"Content-Type": "application/json", **(refusal.headers or {})},
            json.dumps({"error": refusal.reason}).encode())


def default_slo_ms(catalogue: Catalogue, slo_by_application: Mapping[str, float], application: str) -> float | None:
    """An application's goal when a request names none: its configured SLO, else its first family's
    profiled one (None: neither)."""
    if application in slo_by_application:
        return float(slo_by_application[application])
    slos = catalogue.profiles.slo_ms
    return next((float(slos[family]) for family in catalogue.applications.get(application, ()) if family in slos), None)


def model_metadata(catalogue: Catalogue, slo_by_application: Mapping[str, float], application: str) -> dict[str, Any]:
    """``GET /v2/models/{application}``: its variants as versions, its input and its output, and in
    ``parameters`` its default goal and whether it takes encoded images (a ``BYTES`` input of ``[n]``)."""
    variants = [v for family in catalogue.applications[application] for v in catalogue.variants_of(family)]
    profiles = [p for v in variants for p in catalogue.profiles_of(v) if p.input_shape]
    inputs = []
    if profiles:
        shapes = {(tuple(p.input_shape), p.input_dtype or "float32") for p in profiles}
        (shape, dtype), *others = sorted(shapes)
        datatype = next((oip for oip, numpy in NUMPY_DATATYPES.items() if numpy == dtype), "FP32")
        inputs = [{"name": "input", "datatype": datatype, "shape": [-1, *shape] if not others else [-1]}]
    accepts_images = any(p.image_preprocessing is not None for p in profiles)
    return {"name": application, "versions": variants, "platform": "meridian", "inputs": inputs,
            "outputs": [{"name": PREDICTIONS, "datatype": "INT64", "shape": [-1]}],
            "parameters": {"accepts_encoded_images": accepts_images,
                           **({"slo_ms": slo} if (slo := default_slo_ms(catalogue, slo_by_application, application))
                              else {})}}
