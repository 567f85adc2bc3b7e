"""The peer of ``make bench-gateway``: one Ray Serve replica of a digits model behind Ray Serve's HTTP proxy.

Run by `bench.gateway` with the Python of its own virtual environment (``var/peer``, ``ray[serve]==2.60.0``:
the ``peer`` extra of pyproject.toml), never imported by Meridian's processes::

    var/peer/bin/python -m bench.peer_ray --model var/models/digits-cnn-l.onnx --port 28000

The deployment takes the request Meridian's gateway takes: an Open Inference Protocol REST request with
its one input in the binary tensor extension (`POST /v2/models/digits/infer`), batches the rows of up to
``--max-batch`` requests within ``--batch-wait-s`` (``@serve.batch``), runs them on onnxruntime with the
session Meridian's workers make (`shared.onnx_runtime.make_session`: one intra-op thread, no spinning),
and answers each with its ``predictions`` and, in ``parameters.compute_ms``, its batch's compute: what
Meridian's answer carries, so that the latency each adds is computed alike.

It prints one JSON line (``{"ready": true, "port": ...}``) once the application answers, then serves
until its standard input closes or it is sent SIGTERM, and shuts Ray down. Ray's mode (default or
throughput-optimized, HAProxy) is its environment's (``RAY_SERVE_*``), as the bench sets it.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from shared.onnx_runtime import make_session, run_batch

APPLICATION = "digits"
HEADER_LENGTH = "inference-header-content-length"


@serve.deployment(num_replicas=1)
class DigitsModel:
    """One onnxruntime session; each HTTP request's rows join a batch, and its answer says that batch's
    compute."""

    def __init__(self, model_path: str, max_batch: int, batch_wait_s: float) -> None:
        self._session = make_session(model_path, intra_op_threads=1)
        # the decorator's arguments are literals; the bench's own values come in here
        self.infer.set_max_batch_size(max_batch)
        self.infer.set_batch_wait_timeout_s(batch_wait_s)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def infer(self, requests: list[np.ndarray]) -> list[tuple[list[int], float]]:
        """The rows of ``requests`` as one batch: each request's top-1 classes, and the batch's ms (joining its
        rows and running them: what a Meridian worker's ``compute_started`` to ``compute_finished`` spans)."""
        began = time.perf_counter()
        logits = run_batch(self._session, np.concatenate(requests))
        compute_ms = (time.perf_counter() - began) * 1000.0
        top1 = logits.argmax(axis=-1).tolist()
        bounds = np.cumsum([0] + [len(r) for r in requests])
        return [(top1[start:end], compute_ms) for start, end in zip(bounds[:-1], bounds[1:])]

    async def __call__(self, request: Request) -> JSONResponse:
        """An OIP REST request, its input in the binary tensor extension, answered as OIP JSON."""
        body = await request.body()
        json_end = int(request.headers.get(HEADER_LENGTH, len(body)))
        header = json.loads(body[:json_end])
        tensor = header["inputs"][0]
        rows = np.frombuffer(body[json_end:], dtype=np.float32).reshape(tensor["shape"])
        predictions, compute_ms = await self.infer(rows)
        return JSONResponse({"model_name": APPLICATION, "id": header.get("id", ""),
                             "outputs": [{"name": "predictions", "datatype": "INT64", "shape": [len(predictions)],
                                          "data": predictions}],
                             "parameters": {"compute_ms": round(compute_ms, 3)}})


def serve_until_told(args: argparse.Namespace) -> None:
    """Start Ray and the application, say so on stdout, and hold until stdin closes or SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    ray.init(_node_ip_address="127.0.0.1", num_cpus=args.cpus, _temp_dir=args.temp_dir,
             dashboard_port=args.dashboard_port, logging_level="warning", log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    deployment = DigitsModel.options(max_ongoing_requests=args.max_ongoing)
    serve.run(deployment.bind(str(args.model), args.max_batch, args.batch_wait_s), name=APPLICATION,
              route_prefix=f"/v2/models/{APPLICATION}/infer")
    print(json.dumps({"ready": True, "port": args.port}), flush=True)
    stop.wait()
    serve.shutdown()
    ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peer_ray", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the ONNX file the replica serves")
    parser.add_argument("--port", type=int, required=True, help="Ray Serve's HTTP port")
    parser.add_argument("--max-batch", type=int, default=32, help="@serve.batch's max_batch_size")
    parser.add_argument("--batch-wait-s", type=float, default=0.002, help="@serve.batch's batch_wait_timeout_s")
    parser.add_argument("--max-ongoing", type=int, default=64,
                        help="the replica's max_ongoing_requests (Ray's default, 5, would cap batches at 5)")
    parser.add_argument("--dashboard-port", type=int, default=8265, help="Ray's dashboard port")
    parser.add_argument("--cpus", type=int, default=2, help="the CPUs Ray's node declares")
    parser.add_argument("--temp-dir", required=True, help="Ray's session folder (short: it holds Unix sockets)")
    serve_until_told(parser.parse_args(argv))


if __name__ == "__main__":
    main()
