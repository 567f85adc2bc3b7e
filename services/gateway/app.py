"""Gateway: Meridian's front door for callers outside Kafka, on the Open Inference Protocol (KServe v2).

One process, two doors on one event loop: REST over HTTP (`services.gateway.rest`, aiohttp) and gRPC's
``inference.GRPCInferenceService`` (`services.gateway.grpc_service`, grpc.aio). Each request becomes one
query on ``meridian.queries``, sent through the client library, its answer read back from the
application's results topic (`services.gateway.front`). Gateways do not coordinate: run as many side by
side as the load needs, each with its own query ids.

Run: ``python -m services.gateway [--port PORT] [--grpc-port PORT]`` (default ``MERIDIAN_GATEWAY_PORT``,
8000, and ``MERIDIAN_GATEWAY_GRPC_PORT``, 8001; ``--grpc-port 0``: no gRPC door)
"""
from __future__ import annotations

import argparse
import logging

from aiohttp import web

from services.gateway.front import Front
from services.gateway.grpc_service import make_server
from services.gateway.rest import RestDoor
from shared.catalogue import Catalogue
from shared.settings import Settings

log = logging.getLogger(__name__)


def make_app(settings: Settings, catalogue: Catalogue, *, grpc_port: int | None) -> web.Application:
    """The REST door as an aiohttp application whose start and end also start and stop the gRPC door on
    ``grpc_port`` (None: none) and the Kafka client both doors share."""
    front = Front(settings, catalogue)
    app = web.Application(client_max_size=settings.gateway_max_request_bytes)
    app.add_routes(RestDoor(front).routes())

    async def lifetime(_app: web.Application):
        await front.start()
        server = None
        if grpc_port is not None:
            server = make_server(front, settings.bind_host, grpc_port)
            await server.start()
        yield
        if server is not None:
            await server.stop(grace=2.0)
        await front.stop()

    app.cleanup_ctx.append(lifetime)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=None, help="the REST port (default: MERIDIAN_GATEWAY_PORT)")
    parser.add_argument("--grpc-port", type=int, default=None,
                        help="the gRPC port (default: MERIDIAN_GATEWAY_GRPC_PORT; 0: no gRPC door)")
    args = parser.parse_args()
    settings = Settings()
    port = args.port or settings.gateway_port
    grpc_port = settings.gateway_grpc_port if args.grpc_port is None else args.grpc_port
    log.warning("gateway serving the Open Inference Protocol on http://%s:%d/v2%s", settings.bind_host, port,
                f" and gRPC {settings.bind_host}:{grpc_port}" if grpc_port else "")
    # a listen queue as deep as the requests a gateway holds: aiohttp's 128 overflowed under an open-loop
    # burst (make bench-gateway), and each connection the kernel dropped waited 1 s, then 3 s, to be sent again
    web.run_app(make_app(settings, Catalogue.from_settings(settings), grpc_port=grpc_port or None),
                host=settings.bind_host, port=port, print=None, access_log=None, backlog=settings.gateway_max_inflight)
