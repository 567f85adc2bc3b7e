"""What both of the gateway's doors (REST, gRPC) do with a request, whatever carried it.

Checked before a request's data is read: its caller (`services.gateway.access`), the application (and
variant) it names, and room for one more request here; each refusal a `Refusal`, and none reaches Kafka.
A request admitted (`protocol.admit`) is one query sent through the client library; the answer is the
result naming the position of this gateway's own message. Nothing of a query is kept once it is answered,
given up on, or its caller went away (a cancelled wait): the client forgets it, so a late answer is ignored.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import NamedTuple

import redis

from schemas import Result
from services.gateway import protocol
from services.gateway.access import Access
from services.gateway.protocol import Admitted, InferRequest, Refusal
from shared import metrics
from shared.adapters.client import MeridianClient, QueryTooLarge
from shared.adapters.token_store import RedisTokenStore
from shared.catalogue import Catalogue
from shared.settings import Settings

log = logging.getLogger(__name__)

#: what a 503 asks an overloaded gateway's caller to wait, seconds
RETRY_AFTER_S = 1


class Answered(NamedTuple):
    """A query's result, the query as it was sent, how its caller wants it written, and when it came."""

    result: Result
    admitted: Admitted
    received_at: float


class Front:
    """The queries in flight (query id -> the future its answer settles) and the checks before them."""

    def __init__(self, settings: Settings, catalogue: Catalogue) -> None:
        self.settings = settings
        self.catalogue = catalogue
        self._prefix = f"gw-{uuid.uuid4().hex[:8]}-"
        self._ids = itertools.count()
        self._waiting: dict[str, asyncio.Future[tuple[Result, float]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: MeridianClient | None = None
        self._access = Access(settings.gateway_tokens, rate_per_s=settings.gateway_rate_per_s,
                              burst=settings.gateway_burst, stored=settings.gateway_redis_tokens)
        self._token_refresh: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Its Kafka client reads the results topics."""
        return self._client is not None

    async def start(self) -> None:
        if self._access.open:
            log.warning("no gateway token is configured (MERIDIAN_GATEWAY_TOKENS): any caller may query every "
                        "application")
        self._loop = asyncio.get_running_loop()
        if self.settings.gateway_redis_tokens:
            store = RedisTokenStore(redis.Redis.from_url(self.settings.redis_url, socket_timeout=2.0))
            await self._read_tokens(store)
            self._token_refresh = asyncio.create_task(self._refresh_tokens(store))
        self._client = await asyncio.to_thread(MeridianClient, self.settings, own_only=True, on_result=self._answered)

    async def stop(self) -> None:
        if self._token_refresh is not None:
            self._token_refresh.cancel()
        if self._client is not None:
            await asyncio.to_thread(self._client.close)

    async def _refresh_tokens(self, store: RedisTokenStore) -> None:
        while True:
            await asyncio.sleep(self.settings.gateway_token_refresh_s)
            await self._read_tokens(store)

    async def _read_tokens(self, store: RedisTokenStore) -> None:
        """The tokens Redis holds now; on a failure, those read last (and the configured ones) stay."""
        try:
            self._access.use_stored(await asyncio.to_thread(store.read))
        except (redis.RedisError, ValueError) as exc:
            log.warning("could not read the gateway's tokens from Redis (the last read stay): %s", exc)

    def _answered(self, result: Result, received_at: float) -> None:
        """From the client's receiving thread: settle the request waiting for ``result``."""
        self._loop.call_soon_threadsafe(self._settle, result, received_at)

    def _settle(self, result: Result, received_at: float) -> None:
        future = self._waiting.get(result.query_id)
        if future is not None and not future.done():
            future.set_result((result, received_at))

    def refusal(self, authorization: str | None, address: str, application: str, version: str | None) -> Refusal | None:
        """Why a request for ``application`` (``version``) goes no further: its caller, then what it names."""
        refused = self._access.check(authorization, application, address)
        return refused if refused is not None else self.unknown(application, version)

    def unknown(self, application: str, version: str | None) -> Refusal | None:
        """The 404 of an application (or a variant of it) this Meridian does not serve, else None."""
        families = self.catalogue.applications.get(application)
        if families is None:
            known = ", ".join(sorted(self.catalogue.applications)) or "none"
            return Refusal(HTTPStatus.NOT_FOUND, f"unknown application {application!r}; known: {known}")
        variants = {v for family in families for v in self.catalogue.variants_of(family)}
        if version is not None and version not in variants | set(families):
            return Refusal(HTTPStatus.NOT_FOUND, f"application {application!r} has no model or variant {version!r}; "
                                                 f"it has {', '.join(sorted(variants))}")
        return None

    def full(self) -> Refusal | None:
        """The 503 of a gateway starting, or holding all the requests it may."""
        if self._client is None:
            return Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "the gateway is starting", {"Retry-After": str(RETRY_AFTER_S)})
        if len(self._waiting) >= self.settings.gateway_max_inflight:
            return Refusal(HTTPStatus.SERVICE_UNAVAILABLE, f"overloaded: {len(self._waiting)} requests wait for "
                                                           f"their answers here", {"Retry-After": str(RETRY_AFTER_S)})
        return None

    async def infer(self, authorization: str | None, address: str, application: str, version: str | None,
                    read: Callable[[], Awaitable[tuple[InferRequest, bytes]]]) -> Answered | Refusal:
        """One inference request, whichever door carried it: its caller and what it names, room here, then
        its data (``read``: the door's parsing, which raises `protocol.BadRequest`), the query sent and its
        result; the refusal of the first step that refuses it."""
        refused = self.refusal(authorization, address, application, version) or self.full()
        if refused is not None:
            return refused
        try:
            request, binary = await read()
            admitted = self.admit(request, binary, application, version)
        except protocol.BadRequest as exc:
            return Refusal(exc.status, str(exc))
        return await self.answer(admitted)

    def admit(self, request: InferRequest, binary: bytes, application: str, version: str | None) -> Admitted:
        """``request`` as a query of ``application`` under a fresh id of this gateway (`protocol.admit`)."""
        return protocol.admit(request, binary, query_id=f"{self._prefix}{next(self._ids)}", application=application,
                              version=version, now_s=time.time(), slo_ms=protocol.default_slo_ms(
                                  self.catalogue, self.settings.application_slo_ms, application))

    async def answer(self, admitted: Admitted) -> Answered | Refusal:
        """Send the query and wait for its result: until its drop time plus the grace, then 504."""
        query_id = admitted.query.query_id
        future = self._waiting[query_id] = self._loop.create_future()
        metrics.GATEWAY_INFLIGHT.set(len(self._waiting))
        try:
            sent = self._client.send(admitted.query, admitted.binary)
            metrics.CLIENT_QUERIES_SENT.labels(sent.application).inc()
            wait_s = sent.slo_ms / 1000.0 * self.settings.drop_after_slo_multiple + self.settings.gateway_answer_grace_s
            result, received_at = await asyncio.wait_for(future, timeout=wait_s)
        except QueryTooLarge as exc:
            return Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc))
        except asyncio.TimeoutError:
            return Refusal(HTTPStatus.GATEWAY_TIMEOUT, f"no answer within {wait_s:.3g} s: the scheduler may be down, "
                                                       f"or the answer lost")
        finally:
            del self._waiting[query_id]
            self._client.forget(query_id)
            metrics.GATEWAY_INFLIGHT.set(len(self._waiting))
        return Answered(result, dataclasses.replace(admitted, query=sent), received_at)

    def count(self, door: str, application: str, status: HTTPStatus, seconds: float) -> None:
        """One request answered through ``door`` (``rest``, ``grpc``), in the gateway's metrics."""
        label = application if application in self.catalogue.applications else "unknown"  # callers name any
        metrics.GATEWAY_REQUESTS.labels(door, label, str(int(status))).inc()
        metrics.GATEWAY_LATENCY.labels(door, label).observe(seconds)
