"""``meridian serve --config infra/serve.yaml``, the configuration ``make demo`` runs, answers every query
within its SLO on an idle system: vision by Proteus on three emulated workers (with its planner), digits
first come first served on a real onnxruntime worker, through the real Kafka broker."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest

from schemas import Query, ResultStatus
from services.demo.workload import SLO_MS
from services.serve_config import SERVE_YAML
from shared.adapters.client import MeridianClient
from shared.settings import REPO_ROOT
from shared.tensors import encode
from tests.integration.helpers import digits_rows, read_until, stop_serving

pytestmark = pytest.mark.integration

#: queries per application, one every `GAP_S`: an idle system
QUERIES, GAP_S = 20, 0.05


def test_the_shipped_serve_config_answers_every_query_within_its_slo_at_idle(stack, settings) -> None:
    env = {**stack.env, "MERIDIAN_SCHEDULER_METRICS_PORT": "19441"}  # workers and planner take the ports above
    process = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--config", str(SERVE_YAML)],
                               env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        read_until(process, "Ctrl-C stops", 180)
        rows, _ = digits_rows()
        with MeridianClient(settings, applications=list(SLO_MS)) as client:
            sent = []
            for k in range(QUERIES):
                for application in ("vision", "digits"):
                    inputs = encode(rows[k:k + 1]) if application == "digits" else None
                    sent.append(client.send(Query(
                        query_id=f"idle-{application}-{uuid.uuid4().hex[:10]}", application=application,
                        slo_ms=SLO_MS[application], batch_size=1, inputs=inputs, sent_at=time.time())))
                time.sleep(GAP_S)
            client.flush()
            assert client.wait_for([q.query_id for q in sent], timeout_s=30)
            answers = {q.query_id: client.results[q.query_id] for q in sent}
        late = {q.query_id: (result.status.value, result.reason, round((held - q.sent_at) * 1000.0, 1))
                for q in sent for result, held in [answers[q.query_id]]
                if result.status is not ResultStatus.OK or (held - q.sent_at) * 1000.0 > q.slo_ms}
        assert not late, f"{len(late)} of {len(sent)} not answered ok within SLO: {late}"
        assert {answers[q.query_id][0].worker_id for q in sent if q.application == "digits"} == {"onnx-digits"}
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        stop_serving(process)
