"""The gateway's gRPC door: the Open Inference Protocol's ``inference.GRPCInferenceService``, on grpc.aio.

The service and its messages are the protocol's own, as Triton's client package ships them generated
(``tritonclient.grpc.service_pb2``), so Triton's and KServe's gRPC clients call it unchanged. It serves
``ServerLive``, ``ServerReady``, ``ServerMetadata``, ``ModelReady``, ``ModelMetadata`` and ``ModelInfer``;
the rest (Triton's repository, shared-memory and trace calls) answer ``UNIMPLEMENTED``.

A ``ModelInferRequest`` is read into the REST door's `protocol.InferRequest` (``raw_input_contents`` as
the binary section, typed ``contents`` as JSON data), so both doors make the same query of the same
request (`services.gateway.front`). A refusal is the RPC's status, mapped from its HTTP status (`CODES`),
with the same reason (and ``retry-after`` in its trailing metadata); the bearer token rides in the
``authorization`` metadata.
"""
from __future__ import annotations

import struct
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from services.gateway import protocol
from services.gateway.front import Front
from services.gateway.protocol import InferRequest, Refusal, RequestedOutput, RequestTensor
from services.gateway.rest import SERVER

#: a refusal's HTTP status -> the gRPC status the gRPC door answers with
CODES = {HTTPStatus.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
         HTTPStatus.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
         HTTPStatus.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
         HTTPStatus.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
         HTTPStatus.REQUEST_ENTITY_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
         HTTPStatus.TOO_MANY_REQUESTS: grpc.StatusCode.RESOURCE_EXHAUSTED,
         HTTPStatus.INTERNAL_SERVER_ERROR: grpc.StatusCode.INTERNAL,
         HTTPStatus.SERVICE_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
         HTTPStatus.GATEWAY_TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED}
#: each datatype's field of ``InferTensorContents``
_CONTENTS = {"FP32": "fp32_contents", "INT64": "int64_contents", "INT32": "int_contents", "UINT8": "uint_contents",
             "BYTES": "bytes_contents"}
_LENGTH = struct.Struct("<I")


class GrpcDoor(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, front: Front) -> None:
        self._front = front

    async def ServerLive(self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._front.ready)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
                             ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**SERVER)

    async def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        refused = await self._refusal(request.name, request.version, context, abort_unknown=False)
        return pb.ModelReadyResponse(ready=refused is None)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
                            ) -> pb.ModelMetadataResponse:
        await self._refusal(request.name, request.version, context)
        front = self._front
        metadata = protocol.model_metadata(front.catalogue, front.settings.application_slo_ms, request.name)
        return pb.ModelMetadataResponse(
            name=metadata["name"], versions=metadata["versions"], platform=metadata["platform"],
            inputs=[pb.ModelMetadataResponse.TensorMetadata(**tensor) for tensor in metadata["inputs"]],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(**tensor) for tensor in metadata["outputs"]])

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        arrived = time.monotonic()
        status = HTTPStatus.OK
        try:
            return await self._infer(request, context)
        except _Refused as refused:
            status = refused.refusal.status
            await abort(context, refused.refusal)
        finally:
            self._front.count("grpc", request.model_name, status, time.monotonic() - arrived)

    async def _infer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        async def read() -> tuple[InferRequest, bytes]:
            return read_infer_request(request)

        answered = await self._front.infer(_authorization(context), _address(context), request.model_name,
                                           request.model_version or None, read)
        if isinstance(answered, Refusal):
            raise _Refused(answered)
        result, sent, received_at = answered.result, answered.admitted.query, answered.received_at
        if (refused := protocol.refusal_of(result)) is not None:
            raise _Refused(refused)
        rows = protocol.predictions(result)
        return pb.ModelInferResponse(
            model_name=sent.application, model_version=result.variant or "", id=request.id,
            parameters={k: _parameter(v) for k, v in protocol.answer_parameters(result, sent, received_at).items()},
            outputs=[pb.ModelInferResponse.InferOutputTensor(name=protocol.PREDICTIONS, datatype="INT64",
                                                              shape=[int(rows.size)])],
            raw_output_contents=[rows.tobytes()])

    async def _refusal(self, application: str, version: str, context: grpc.aio.ServicerContext, *,
                       abort_unknown: bool = True) -> Refusal | None:
        """Abort the RPC of a caller refused for ``application``; return (or abort on) an unknown one."""
        refused = self._front.refusal(_authorization(context), _address(context), application, version or None)
        if refused is not None and (abort_unknown or refused.status is not HTTPStatus.NOT_FOUND):
            await abort(context, refused)
        return refused


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


async def abort(context: grpc.aio.ServicerContext, refusal: Refusal) -> None:
    """End the RPC with ``refusal``'s status and reason, its headers (``retry-after``) as trailing metadata."""
    trailing = tuple((name.lower(), value) for name, value in (refusal.headers or {}).items())
    await context.abort(CODES[refusal.status], refusal.reason, trailing_metadata=trailing)


def read_infer_request(request: pb.ModelInferRequest) -> tuple[InferRequest, bytes]:
    """A ``ModelInferRequest`` as the REST door's request and its binary section."""
    if request.raw_input_contents and len(request.raw_input_contents) != len(request.inputs):
        raise protocol.BadRequest(f"the request has {len(request.inputs)} inputs but "
                                  f"{len(request.raw_input_contents)} raw input contents")
    tensors, binary = [], b""
    for index, given in enumerate(request.inputs):
        fields: dict[str, Any] = {"name": given.name, "shape": list(given.shape), "datatype": given.datatype}
        if request.raw_input_contents:
            raw = request.raw_input_contents[index]
            fields["parameters"] = {"binary_data_size": len(raw)}
            binary += raw
        elif given.datatype == "BYTES":  # typed BYTES contents: carried as the binary section's elements
            raw = b"".join(_LENGTH.pack(len(element)) + element for element in given.contents.bytes_contents)
            fields["parameters"] = {"binary_data_size": len(raw)}
            binary += raw
        elif given.datatype in _CONTENTS:
            fields["data"] = list(getattr(given.contents, _CONTENTS[given.datatype]))
        else:
            raise protocol.BadRequest(f"input {given.name!r}: {given.datatype} data travels as raw_input_contents")
        tensors.append(RequestTensor(**fields))
    outputs = [RequestedOutput(name=output.name) for output in request.outputs] or None
    parameters = {key: _value(value) for key, value in request.parameters.items()}
    return InferRequest(id=request.id or None, parameters=parameters, inputs=tensors, outputs=outputs), binary


def _value(parameter: pb.InferParameter) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


def _parameter(value: Any) -> pb.InferParameter:
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        return pb.InferParameter(int64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    return pb.InferParameter(string_param=str(value))


def _authorization(context: grpc.aio.ServicerContext) -> str | None:
    metadata: Mapping[str, Any] = dict(context.invocation_metadata() or ())
    return metadata.get("authorization")


def _address(context: grpc.aio.ServicerContext) -> str:
    """The caller's host, from gRPC's ``ipv4:host:port`` peer."""
    peer = context.peer() or ""
    return peer.split(":", 1)[-1].rsplit(":", 1)[0]


def make_server(front: Front, host: str, port: int) -> grpc.aio.Server:
    """The gRPC door, bound to ``host:port``, not yet started; messages over the gateway's request limit are
    refused by gRPC itself (``RESOURCE_EXHAUSTED``)."""
    limit = front.settings.gateway_max_request_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", limit)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(GrpcDoor(front), server)
    server.add_insecure_port(f"{host}:{port}")
    return server
