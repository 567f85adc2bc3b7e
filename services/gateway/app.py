"""Gateway: Meridian's front door for HTTP callers, on the Open Inference Protocol's REST API (KServe v2).

Each ``POST /v2/models/{application}[/versions/{variant}]/infer`` becomes one query on ``meridian.queries``
(`services.gateway.protocol`), sent through the client library, so its answer is the result that names
the position of this gateway's own message, read from the application's results topic; nothing of a
query is kept once it is answered, given up on, or its caller went away (`MeridianClient` with
``own_only``), so a late answer is ignored. Gateways do not coordinate: run as many side by side as the
load needs, each with its own query ids.

Also ``GET /v2`` (server metadata), ``/v2/health/live``, ``/v2/health/ready`` (its Kafka client reads the
results topics), ``/v2/models/{application}`` (metadata), ``.../ready`` and ``/metrics`` (Prometheus).

Run: ``python -m services.gateway [--port PORT]`` (default ``MERIDIAN_GATEWAY_PORT``, 8000)
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from http import HTTPStatus

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas import Result
from services.gateway import protocol
from services.gateway.access import Access
from shared import metrics
from shared.adapters.client import MeridianClient, QueryTooLarge
from shared.catalogue import Catalogue
from shared.settings import Settings

log = logging.getLogger(__name__)

SERVER = {"name": "meridian", "version": "0.1.0", "extensions": ["binary_tensor_data"]}
#: what a 503 asks an overloaded gateway's caller to wait, seconds
RETRY_AFTER_S = 1


class Gateway:
    """The routes, and the queries in flight: query id -> the future its answer settles."""

    def __init__(self, settings: Settings, catalogue: Catalogue) -> None:
        self._settings = settings
        self._catalogue = catalogue
        self._prefix = f"gw-{uuid.uuid4().hex[:8]}-"
        self._ids = itertools.count()
        self._waiting: dict[str, asyncio.Future[tuple[Result, float]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: MeridianClient | None = None
        self._access = Access(settings.gateway_tokens, rate_per_s=settings.gateway_rate_per_s,
                              burst=settings.gateway_burst)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v2", self.server_metadata), web.get("/v2/health/live", self.live),
                web.get("/v2/health/ready", self.ready), web.get("/v2/models/{application}", self.model_metadata),
                web.get("/v2/models/{application}/ready", self.model_ready),
                web.get("/v2/models/{application}/versions/{version}", self.model_metadata),
                web.get("/v2/models/{application}/versions/{version}/ready", self.model_ready),
                web.post("/v2/models/{application}/infer", self.infer),
                web.post("/v2/models/{application}/versions/{version}/infer", self.infer),
                web.get("/metrics", self.metrics)]

    async def start(self, _app: web.Application) -> None:
        if self._access.open:
            log.warning("no gateway token is configured (MERIDIAN_GATEWAY_TOKENS): any caller may query every "
                        "application")
        self._loop = asyncio.get_running_loop()
        self._client = await asyncio.to_thread(
            MeridianClient, self._settings, own_only=True, on_result=self._answered)

    async def stop(self, _app: web.Application) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

    def _answered(self, result: Result, received_at: float) -> None:
        """From the client's receiving thread: settle the request waiting for ``result``."""
        self._loop.call_soon_threadsafe(self._settle, result, received_at)

    def _settle(self, result: Result, received_at: float) -> None:
        future = self._waiting.get(result.query_id)
        if future is not None and not future.done():
            future.set_result((result, received_at))

    async def server_metadata(self, _request: web.Request) -> web.Response:
        return web.json_response(SERVER)

    async def live(self, _request: web.Request) -> web.Response:
        return web.Response()

    async def ready(self, _request: web.Request) -> web.Response:
        return web.Response(status=HTTPStatus.OK if self._client is not None else HTTPStatus.SERVICE_UNAVAILABLE)

    async def model_metadata(self, request: web.Request) -> web.Response:
        application = request.match_info["application"]
        if (refused := self._refusal(request, application)) is not None:
            return _respond(*refused)
        return web.json_response(protocol.model_metadata(self._catalogue, self._settings.application_slo_ms,
                                                         application))

    async def model_ready(self, request: web.Request) -> web.Response:
        refused = self._refusal(request, request.match_info["application"])
        return _respond(*refused) if refused is not None else web.Response()

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _refusal(self, request: web.Request, application: str) -> tuple | None:
        """Why a request for ``application`` goes no further (its caller, then the application), else None."""
        verdict = self._access.check(request.headers.get("Authorization"), application, request.remote or "")
        if verdict.status is not None:
            return protocol.error(verdict.status, verdict.reason, verdict.headers)
        return self._unknown(application, request.match_info.get("version"))

    def _unknown(self, application: str, version: str | None) -> tuple | None:
        """The 404 of an application (or a variant of it) this Meridian does not serve, else None."""
        families = self._catalogue.applications.get(application)
        if families is None:
            known = ", ".join(sorted(self._catalogue.applications)) or "none"
            return protocol.error(HTTPStatus.NOT_FOUND, f"unknown application {application!r}; known: {known}")
        variants = {v for family in families for v in self._catalogue.variants_of(family)}
        if version is not None and version not in variants | set(families):
            return protocol.error(HTTPStatus.NOT_FOUND, f"application {application!r} has no model or variant "
                                                        f"{version!r}; it has {', '.join(sorted(variants))}")
        return None

    async def infer(self, request: web.Request) -> web.Response:
        application = request.match_info["application"]
        arrived = time.monotonic()
        status, headers, body = await self._infer(request, application)
        label = application if application in self._catalogue.applications else "unknown"  # callers name any
        metrics.GATEWAY_REQUESTS.labels(label, str(int(status))).inc()
        metrics.GATEWAY_LATENCY.labels(label).observe(time.monotonic() - arrived)
        return web.Response(status=status, headers=headers, body=body)

    async def _infer(self, request: web.Request, application: str) -> tuple:
        if (refused := self._refusal(request, application)) is not None:
            return refused
        limit = self._settings.gateway_max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            return protocol.error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the request's {request.content_length:,} "
                                  f"bytes exceed the {limit:,} bytes a gateway reads")
        if self._client is None:
            return protocol.error(HTTPStatus.SERVICE_UNAVAILABLE, "the gateway is starting",
                                  {"Retry-After": str(RETRY_AFTER_S)})
        if len(self._waiting) >= self._settings.gateway_max_inflight:
            return protocol.error(HTTPStatus.SERVICE_UNAVAILABLE,
                                  f"overloaded: {len(self._waiting)} requests wait for their answers here",
                                  {"Retry-After": str(RETRY_AFTER_S)})
        slo_ms = protocol.default_slo_ms(self._catalogue, self._settings.application_slo_ms, application)
        try:
            body = await request.read()
            admitted = protocol.read_request(body, request.headers.get(protocol.HEADER_LENGTH),
                                             query_id=f"{self._prefix}{next(self._ids)}", application=application,
                                             version=request.match_info.get("version"), slo_ms=slo_ms)
        except protocol.BadRequest as exc:
            return protocol.error(exc.status, str(exc))
        except web.HTTPRequestEntityTooLarge:  # a body longer than it said, or sent in chunks
            return protocol.error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the request exceeds the {limit:,} bytes "
                                                                       f"a gateway reads")
        return await self._answer(admitted)

    async def _answer(self, admitted: protocol.Admitted) -> tuple:
        query_id = admitted.query.query_id
        future = self._waiting[query_id] = self._loop.create_future()
        metrics.GATEWAY_INFLIGHT.set(len(self._waiting))
        try:
            sent = self._client.send(admitted.query, admitted.binary)
            metrics.CLIENT_QUERIES_SENT.labels(sent.application).inc()
            wait_s = sent.slo_ms / 1000.0 * self._settings.drop_after_slo_multiple + self._settings.gateway_answer_grace_s
            result, received_at = await asyncio.wait_for(future, timeout=wait_s)
        except QueryTooLarge as exc:
            return protocol.error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc))
        except asyncio.TimeoutError:
            return protocol.error(HTTPStatus.GATEWAY_TIMEOUT, f"no answer within {wait_s:.3g} s: the scheduler "
                                                              f"may be down, or the answer lost")
        finally:
            del self._waiting[query_id]
            self._client.forget(query_id)
            metrics.GATEWAY_INFLIGHT.set(len(self._waiting))
        return protocol.response(result, dataclasses.replace(admitted, query=sent), received_at)


def _respond(status: HTTPStatus, headers: dict[str, str], body: bytes) -> web.Response:
    return web.Response(status=status, headers=headers, body=body)


def make_app(settings: Settings, catalogue: Catalogue) -> web.Application:
    gateway = Gateway(settings, catalogue)
    app = web.Application(client_max_size=settings.gateway_max_request_bytes)
    app.add_routes(gateway.routes())
    app.on_startup.append(gateway.start)
    app.on_cleanup.append(gateway.stop)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=None, help="the REST port (default: MERIDIAN_GATEWAY_PORT)")
    args = parser.parse_args()
    settings = Settings()
    port = args.port or settings.gateway_port
    log.warning("gateway serving the Open Inference Protocol on http://%s:%d/v2", settings.bind_host, port)
    web.run_app(make_app(settings, Catalogue.from_settings(settings)), host=settings.bind_host, port=port,
                print=None, access_log=None)
