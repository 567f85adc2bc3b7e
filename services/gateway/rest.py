"""The gateway's REST door: the Open Inference Protocol's HTTP API (KServe v2), on aiohttp.

``POST /v2/models/{application}[/versions/{variant}]/infer``, ``GET /v2`` (server metadata),
``/v2/health/live``, ``/v2/health/ready``, ``/v2/models/{application}`` (metadata), ``.../ready`` and
``/metrics`` (Prometheus). What a request becomes and what its answer is: `services.gateway.front`.
"""
from __future__ import annotations

import time
from http import HTTPStatus

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.gateway import protocol
from services.gateway.front import Front
from services.gateway.protocol import InferRequest, Refusal, Reply

SERVER = {"name": "meridian", "version": "0.1.0", "extensions": ["binary_tensor_data"]}


class RestDoor:
    def __init__(self, front: Front) -> None:
        self._front = front

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v2", self.server_metadata), web.get("/v2/health/live", self.live),
                web.get("/v2/health/ready", self.ready), web.get("/v2/models/{application}", self.model_metadata),
                web.get("/v2/models/{application}/ready", self.model_ready),
                web.get("/v2/models/{application}/versions/{version}", self.model_metadata),
                web.get("/v2/models/{application}/versions/{version}/ready", self.model_ready),
                web.post("/v2/models/{application}/infer", self.infer),
                web.post("/v2/models/{application}/versions/{version}/infer", self.infer),
                web.get("/metrics", self.metrics)]

    async def server_metadata(self, _request: web.Request) -> web.Response:
        return web.json_response(SERVER)

    async def live(self, _request: web.Request) -> web.Response:
        return web.Response()

    async def ready(self, _request: web.Request) -> web.Response:
        return web.Response(status=HTTPStatus.OK if self._front.ready else HTTPStatus.SERVICE_UNAVAILABLE)

    async def model_metadata(self, request: web.Request) -> web.Response:
        application = request.match_info["application"]
        if (refused := self._refusal(request)) is not None:
            return _respond(protocol.error(refused))
        front = self._front
        return web.json_response(protocol.model_metadata(front.catalogue, front.settings.application_slo_ms,
                                                         application))

    async def model_ready(self, request: web.Request) -> web.Response:
        refused = self._refusal(request)
        return _respond(protocol.error(refused)) if refused is not None else web.Response()

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _refusal(self, request: web.Request) -> Refusal | None:
        return self._front.refusal(request.headers.get("Authorization"), request.remote or "",
                                   request.match_info["application"], request.match_info.get("version"))

    async def infer(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        reply = await self._infer(request)
        self._front.count("rest", request.match_info["application"], reply[0], time.monotonic() - arrived)
        return _respond(reply)

    async def _infer(self, request: web.Request) -> Reply:
        limit = self._front.settings.gateway_max_request_bytes

        async def read() -> tuple[InferRequest, bytes]:
            if request.content_length is not None and request.content_length > limit:
                raise protocol.BadRequest(f"the request's {request.content_length:,} bytes exceed the {limit:,} "
                                          f"bytes a gateway reads", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:  # a body longer than it said, or sent in chunks
                raise protocol.BadRequest(f"the request exceeds the {limit:,} bytes a gateway reads",
                                          HTTPStatus.REQUEST_ENTITY_TOO_LARGE) from None
            return protocol.parse_rest(body, request.headers.get(protocol.HEADER_LENGTH))

        answered = await self._front.infer(request.headers.get("Authorization"), request.remote or "",
                                           request.match_info["application"], request.match_info.get("version"), read)
        return protocol.error(answered) if isinstance(answered, Refusal) else protocol.response(*answered)


def _respond(reply: Reply) -> web.Response:
    status, headers, body = reply
    return web.Response(status=status, headers=headers, body=body)
