"""The demo's front door: photographs posted over HTTP to the gateway, on the Open Inference Protocol.

Each request is what any OIP client (Triton's, KServe's) writes: the JSON header, then the JPEG as a
``BYTES`` tensor in the binary tensor extension, Meridian's accuracy goal in ``parameters``. The gateway
makes it a query on Kafka like the client library's; each answer is checked as act 3's are.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

import numpy as np

from services.demo.photos import ACCURACY_GOALS, APPLICATION, QUALITY, SLO_MS, InProcess, PhotoAnswer
from services.gateway.protocol import HEADER_LENGTH, PREDICTIONS
from shared.modelzoo import photos
from shared.settings import Settings
from shared.tensors import encode_images

#: photographs sent, one request at a time
COUNT = 12


def post(url: str, shot: photos.Photograph, goal: float | None) -> tuple[int, dict, float]:
    """One photograph's request: the HTTP status, the response's JSON and its latency (ms)."""
    inputs = encode_images([shot.jpeg])
    header = json.dumps({"parameters": {"slo_ms": SLO_MS, **({"accuracy_floor": goal} if goal else {})},
                         "inputs": [inputs.tensors[0].model_dump(exclude_none=True)],
                         "outputs": [{"name": PREDICTIONS}]}).encode()
    request = urllib.request.Request(url, data=header + inputs.binary, method="POST", headers={
        "Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    return status, json.loads(body), (time.perf_counter() - started) * 1000.0


def through_gateway(port: int, settings: Settings, *, count: int = COUNT, seed: int = 11
                    ) -> tuple[list[PhotoAnswer], list[float]]:
    """``count`` photographs posted one after another, each asking one of act 3's goals in turn; their
    answers checked against the same variant run here, and each request's latency."""
    url = f"http://127.0.0.1:{port}/v2/models/{APPLICATION}/infer"
    reference = InProcess(settings.models_dir)
    answers, latencies = [], []
    for k, shot in enumerate(photos.augmented(count, seed=seed, quality=QUALITY)):
        goal = ACCURACY_GOALS[k % len(ACCURACY_GOALS)]
        status, body, latency_ms = post(url, shot, goal)
        latencies.append(latency_ms)
        if status != 200:
            answers.append(PhotoAnswer(shot.subject, goal, f"HTTP {status}: {body.get('error')}", None, None,
                                       False, False, False))
            continue
        variant, predicted = body["model_version"], body["outputs"][0]["data"][0]
        answers.append(PhotoAnswer(shot.subject, goal, "ok", variant, predicted,
                                   within_slo=bool(body["parameters"]["within_slo"]),
                                   equal_in_process=predicted == reference.top1(variant, [shot.jpeg])[0],
                                   names_subject=predicted in shot.classes))
    return answers, latencies


def summary(port: int, answers: Sequence[PhotoAnswer], latencies: Sequence[float]) -> str:
    ok = [a for a in answers if a.status == "ok"]
    refused = sorted({a.status for a in answers} - {"ok"})
    line = (f"through the front door (OIP REST, POST http://127.0.0.1:{port}/v2/models/{APPLICATION}/infer): "
            f"{len(answers)} photographs, {len(ok)} answered 200, {sum(a.within_slo for a in ok)} within the SLO, "
            f"{sum(a.equal_in_process for a in ok)} equal to in-process, {sum(a.names_subject for a in ok)} naming "
            f"the subject; request latency p50 {np.percentile(latencies, 50):.0f} ms")
    return line + (f"; refused: {'; '.join(refused)}" if refused else "")
