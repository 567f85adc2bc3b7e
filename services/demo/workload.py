"""The two-application workload the demo serves and the fidelity bench measures.

``vision`` (EfficientNet-Lite0/1/2, 300 ms SLO) runs on three workers that emulate ``cpu-1t``, ``cpu-2t``
and ``g4dn-emu`` from their measured profiles; ``digits`` (100 ms SLO) on a real onnxruntime worker.
Arrivals follow the Azure LLM traces (``conv`` for vision, ``code`` for digits), sped up so that one
second of the run holds ``bin_s`` seconds of trace, and scaled against what the fleet serves with its most
accurate vision variant alone.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from schemas import Query, Result
from services.launcher import ManagedProcess, wait_until
from services.serve_config import ServeConfig
from shared.adapters.client import MeridianClient
from shared.catalogue import Catalogue
from shared.proteus.workload import piecewise_poisson, rate_curve
from shared.settings import Settings
from shared.sim.arrivals import load_trace_timestamps
from shared.tensors import encode_binary

#: what is served: ``infra/serve.yaml`` (its applications, policies, planner settings and workers)
SERVED = ServeConfig.load()
APPLICATIONS = SERVED.applications
SLO_MS = {app: float(slo) for app, slo in SERVED.settings["application_slo_ms"].items()}
TRACE_OF = {"vision": "conv", "digits": "code"}
TOP_VISION_VARIANT = "efficientnet-lite2"
DIGITS_PEAK_QPS = 60.0
#: emulated vision workers (id, device); one real digits worker runs beside them
EMULATED = tuple((w.id, w.emulate) for w in SERVED.workers if w.emulate)
DIGITS_WORKER = next(w.id for w in SERVED.workers if not w.emulate)


def top_capacity_qps(catalogue: Catalogue) -> float:
    """Vision queries per second the emulated workers serve with `TOP_VISION_VARIANT` alone: each at its
    best batch whose compute takes at most half the SLO."""
    total = 0.0
    for _, device in EMULATED:
        profile = catalogue.profile(TOP_VISION_VARIANT, device)
        total += max(b / latency * 1000.0 for b, latency in profile.batch_latency_ms.items()
                     if latency <= SLO_MS["vision"] / 2)
    return total


def vision_rates(settings: Settings, catalogue: Catalogue, *, bin_s: float, peak_over_capacity: float,
                 scaled_on_s: int | None = None) -> np.ndarray:
    """Vision's per-second rates over the whole trace, its peak (within the first ``scaled_on_s``
    seconds, or anywhere) at ``peak_over_capacity`` times `top_capacity_qps`."""
    return _rates(settings, "vision", bin_s, peak_over_capacity * top_capacity_qps(catalogue), scaled_on_s)


def schedule(settings: Settings, catalogue: Catalogue, duration_s: float, *, bin_s: float,
             peak_over_capacity: float, skip_s: float = 0.0, scaled_on_s: int | None = None,
             seed: int = 3) -> list[tuple[float, str]]:
    """(offset s, application) of every query, in send order: ``duration_s`` of the sped-up traces from
    ``skip_s`` (see `vision_rates` for the scale; digits peaks at `DIGITS_PEAK_QPS`)."""
    rng = np.random.default_rng(seed)
    curves = {"vision": vision_rates(settings, catalogue, bin_s=bin_s, peak_over_capacity=peak_over_capacity,
                                     scaled_on_s=scaled_on_s),
              "digits": _rates(settings, "digits", bin_s, DIGITS_PEAK_QPS, scaled_on_s)}
    sends = []
    for app, curve in curves.items():
        stretch = curve[int(skip_s):int(skip_s) + int(duration_s)]
        sends += [(float(t), app) for t in piecewise_poisson(stretch, rng)]
    return sorted(sends)


def _rates(settings: Settings, app: str, bin_s: float, peak_qps: float, scaled_on_s: int | None) -> np.ndarray:
    curve = rate_curve(load_trace_timestamps(settings.azure_trace(TRACE_OF[app])), bin_s=bin_s, peak_qps=1.0)
    return curve * (peak_qps / curve[:scaled_on_s].max())


class Sender:
    """Sends a schedule from one thread; digits queries carry real rows."""

    def __init__(self, client: MeridianClient, rows: np.ndarray, *, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.payloads = [encode_binary(rows[i:i + 1]) for i in range(min(len(rows), 256))]
        self.sent: list[Query] = []

    def query(self, app: str, k: int) -> tuple[Query, bytes]:
        """The ``k``-th query of ``app`` and its binary section."""
        inputs = self.payloads[k % len(self.payloads)] if app == "digits" else None
        query = Query(query_id=f"{self.prefix}-{uuid.uuid4().hex[:12]}", application=app,
                      model=APPLICATIONS[app][0], slo_ms=SLO_MS[app], batch_size=1, inputs=inputs and inputs.tensors,
                      sent_at=time.time())
        return query, inputs.binary if inputs else b""

    def send(self, plan: Sequence[tuple[float, str]]) -> None:
        start = time.time()
        for k, (offset, app) in enumerate(plan):
            delay = start + offset - time.time()
            if delay > 0:
                time.sleep(delay)
            self.sent.append(self.client.send(*self.query(app, k)))
        self.client.flush()

    def warm_up(self, applications: Sequence[str] = ("vision", "digits")) -> None:
        """Until every consumer group has joined, the first answers take seconds: not what is measured."""
        for _ in range(10):
            ids = []
            for k in range(40):
                ids.append(self.client.send(*self.query(applications[k % len(applications)], k)).query_id)
                time.sleep(0.02)
            self.client.flush()
            self.client.wait_for(ids, timeout_s=30)
            if all(self.client.results[q][1] - self.client.results[q][0].timestamps.client_sent < 0.25
                   for q in ids if q in self.client.results):
                return


def send_and_wait(sender: Sender, plan: Sequence[tuple[float, str]], watched: list[ManagedProcess]
                  ) -> tuple[float, float, dict[str, tuple[Result, float]]]:
    """The plan sent from a thread of its own (on time, whatever the main thread does), with a progress bar
    (stopping early, saying which, if a ``watched`` process dies), then its answers waited for: when sending
    began and ended, and the client's answers by query id."""
    thread = threading.Thread(target=sender.send, args=(plan,), daemon=True)
    start = time.time()
    thread.start()
    with tqdm(total=len(plan), desc="sending", unit="query", disable=None) as bar:

        def sent_all() -> bool:
            bar.update(len(sender.sent) - bar.n)
            return not thread.is_alive()

        wait_until(sent_all, plan[-1][0] + 60, "sending the trace", watched)
    end = time.time()
    sender.client.wait_for([q.query_id for q in sender.sent], timeout_s=60)
    return start, end, dict(sender.client.results)
