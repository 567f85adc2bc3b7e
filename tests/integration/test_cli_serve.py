"""``meridian serve --config``: one YAML file brings up a scheduler and a worker on the running stack,
serves what ``meridian submit`` sends, and Ctrl-C stops everything it started."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from services.cli.main import main
from shared.settings import REPO_ROOT
from tests.integration.helpers import digits_rows, read_until, stop_serving

pytestmark = pytest.mark.integration

CONFIG = """
applications: {digits: [digits]}
policy: fcfs
workers:
  - id: serve-w1
    variants: [digits-mlp-s, digits-cnn-xs]
gateway: {port: 19425, grpc_port: 19426}
settings: {scheduler_metrics_port: 19421, fleet_metrics_port_base: 19422}
"""


def test_serve_brings_up_what_the_config_says_and_ctrl_c_stops_it(stack, stack_env, tmp_path, capsys) -> None:
    (tmp_path / "serve.yaml").write_text(CONFIG)
    process = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--config", str(tmp_path / "serve.yaml")],
                               env=stack.env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert ("Open Inference Protocol http://127.0.0.1:19425/v2 and gRPC 127.0.0.1:19426"
                in read_until(process, "Ctrl-C stops", 150))
        x, _ = digits_rows()
        np.savez(tmp_path / "q.npz", x=x[:5])
        assert main(["submit", str(tmp_path / "q.npz"), "--application", "digits", "--slo-ms", "5000"]) == 0
        answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [a["worker_id"] for a in answers] == ["serve-w1"] * 5
        header = json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32",
                                         "data": x[0].reshape(-1).tolist()}]}).encode()
        with urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:19425/v2/models/digits/infer",
                                                           data=header, method="POST"), timeout=30) as response:
            answer = json.loads(response.read())  # the same rows over HTTP, through the gateway it started
        assert answer["parameters"]["worker"] == "serve-w1" and len(answer["outputs"][0]["data"]) == 1
        np.savez(tmp_path / "wrong-shape.npz", x=np.zeros((2, 3, 3), dtype=np.float32))
        assert main(["submit", str(tmp_path / "wrong-shape.npz"), "--application", "digits", "--slo-ms", "5000"]) == 1
        assert ("2 answered: 2 rejected; not ok: 2 `inputs` are rows of shape [3, 3] of FP32, but the model takes "
                "rows of shape [1, 8, 8] of FP32") in capsys.readouterr().err  # the shapes, not [n, n]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "stopped everything it started" in process.stdout.read()
    finally:
        stop_serving(process)


REGISTRY_CONFIG = """
applications: {digits: [digits]}
policy: infaas
registry: true
workers:
  - id: serve-r1
    variants: [digits-mlp-s]
settings: {scheduler_metrics_port: 19431, fleet_metrics_port_base: 19436,
           models_dir: %(models)s, profiles_dir: %(profiles)s}
"""


def test_serve_with_the_registry_serves_what_is_registered_while_it_runs(stack, stack_env, tmp_path, capsys) -> None:
    """docs/getting-started.md's path: `serve` a config with ``registry: true``, `register` a model under a new
    application, then query that application by SLO alone: a real worker loads the registered variant."""
    models, profiles = tmp_path / "models", tmp_path / "profiles"
    shutil.copytree(REPO_ROOT / "profiles/digits", models)
    profiles.mkdir()
    shutil.copy(REPO_ROOT / "profiles/digits.json", profiles)
    (tmp_path / "serve.yaml").write_text(REGISTRY_CONFIG % {"models": models, "profiles": profiles})
    process = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--config", str(tmp_path / "serve.yaml")],
                               env=stack.env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        read_until(process, "Ctrl-C stops", 150)
        application = "registered-digits"
        assert main(["register", "--model-name", "reg-cnn-xs", "--model-file", str(models / "digits-cnn-xs.onnx"),
                     "--validation-set", str(models / "digits-test.npz"), "--app-id", application,
                     "--input-shape", "1,8,8", "--slo-ms", "100"]) == 0
        capsys.readouterr()  # the registry wrote the application before it replied: no wait is needed
        x, _ = digits_rows()
        np.savez(tmp_path / "q.npz", x=x[:5])
        sent = ["submit", str(tmp_path / "q.npz"), "--application", application, "--slo-ms", "5000",
                "--timeout", "60"]
        assert main(sent) == 0, capsys.readouterr().err
        answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert {a["worker_id"] for a in answers} == {"serve-r1"}
        assert all(a["variant"].startswith("reg-cnn-xs") for a in answers), [a["variant"] for a in answers]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        stop_serving(process)
