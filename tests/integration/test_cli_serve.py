"""``meridian serve --config``: one YAML file brings up a scheduler and a worker on the running stack,
serves what ``meridian submit`` sends, and Ctrl-C stops everything it started."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from services.cli.main import main
from shared.settings import REPO_ROOT
from tests.integration.helpers import digits_rows, read_until

pytestmark = pytest.mark.integration

CONFIG = """
applications: {digits: [digits]}
policy: fcfs
workers:
  - id: serve-w1
    variants: [digits-mlp-s, digits-cnn-xs]
settings: {scheduler_metrics_port: 19421, fleet_metrics_port_base: 19422}
"""


def test_serve_brings_up_what_the_config_says_and_ctrl_c_stops_it(stack, stack_env, tmp_path, capsys) -> None:
    (tmp_path / "serve.yaml").write_text(CONFIG)
    process = subprocess.Popen([sys.executable, "-m", "services.cli", "serve", "--config", str(tmp_path / "serve.yaml")],
                               env=stack.env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        read_until(process, "Ctrl-C stops", 150)
        x, _ = digits_rows()
        np.savez(tmp_path / "q.npz", x=x[:5])
        assert main(["submit", str(tmp_path / "q.npz"), "--application", "digits", "--slo-ms", "5000"]) == 0
        answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [a["worker_id"] for a in answers] == ["serve-w1"] * 5
        np.savez(tmp_path / "wrong-shape.npz", x=np.zeros((2, 3, 3), dtype=np.float32))
        assert main(["submit", str(tmp_path / "wrong-shape.npz"), "--application", "digits", "--slo-ms", "5000"]) == 1
        assert "2 answered: 2 rejected; not ok: 2 " in capsys.readouterr().err
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "stopped everything it started" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
