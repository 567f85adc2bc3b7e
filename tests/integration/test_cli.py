"""The ``meridian`` command line against the real stack: submit a file of digits and read the answers
back, then ask what is serving."""
from __future__ import annotations

import json
import re
import subprocess
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from services.cli.main import main
from services.cli.status import query
from services.launcher import wait_until
from services.stack import SCRIPTS
from tests.integration.helpers import digits_rows

pytestmark = pytest.mark.integration


def test_submit_answers_every_row_of_an_npz(pipeline, stack_env, tmp_path, capsys) -> None:
    x, y = digits_rows()
    np.savez(tmp_path / "digits.npz", x=x[:12])
    out = tmp_path / "results.jsonl"
    assert main(["submit", str(tmp_path / "digits.npz"), "--application", "digits", "--slo-ms", "5000",
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == 12 and {r["status"] for r in results} == {"ok"}
    assert sum(r["predictions"] == [int(label)] for r, label in zip(results, y[:12])) >= 9
    assert "12 sent to 127.0.0.1:" in capsys.readouterr().err


def test_submit_to_an_unknown_application_says_so_in_one_line_and_names_the_known_ones(
        pipeline, stack_env, tmp_path, capsys) -> None:
    x, _ = digits_rows()
    np.savez(tmp_path / "q.npz", x=x[:1])
    assert main(["submit", str(tmp_path / "q.npz"), "--application", "nosuch", "--slo-ms", "100"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meridian submit: --application 'nosuch': no such application here"), err
    assert len(err.strip().splitlines()) == 1 and "applications: " in err and "digits" in err


def test_submit_jsonl_rows_print_to_stdout(pipeline, stack_env, tmp_path, capsys) -> None:
    x, _ = digits_rows()
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"inputs": x[k:k + 1].tolist()}) + "\n" for k in range(3)))
    assert main(["submit", str(tmp_path / "q.jsonl"), "--application", "digits", "--slo-ms", "5000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["status"] == "ok" for line in lines)


def test_status_names_the_workers_and_the_consumer_groups(pipeline, stack, stack_env, capsys) -> None:
    """Each real worker with its device key, price and the batch-1 latency it measured on this machine."""
    prometheus = f"http://127.0.0.1:{stack.prometheus_port}"
    wait_until(lambda: query(prometheus, 'meridian_worker_measured_latency_ms{worker="it-w2",batch="1"}') != [], 30,
               "Prometheus to scrape it-w2's measured latencies")
    assert main(["stack", "status"]) == 0
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "kafka       up" in out and "from Kafka" in out and "meridian-scheduler" in out, out
    assert re.search(r"it-w2 \(cpu-1t, \$0\.0425/h, measured at batch 1: digits-\S+ [0-9.e-]+ ms; digits-", out), out


def test_status_shows_each_worker_once_after_a_prometheus_restart(pipeline, stack, stack_env, capsys) -> None:
    """An earlier process of worker it-w1 (another port) is scraped when Prometheus stops, and gone when it
    starts again: Prometheus still answers with that series for 5 minutes. Status lists it-w1 once."""
    registry = CollectorRegistry()
    Gauge("meridian_worker_info", "", ["worker", "device", "emulated"], registry=registry).labels(
        "it-w1", "earlier-device", "false").set(1)
    server, _ = start_http_server(19309, addr="127.0.0.1", registry=registry)
    target = stack.var_dir / "prometheus" / "targets" / "worker-it-w1-earlier.json"
    target.write_text(json.dumps([{"targets": ["127.0.0.1:19309"], "labels": {"service": "worker"}}]))
    prometheus = f"http://127.0.0.1:{stack.prometheus_port}"
    try:
        wait_until(lambda: query(prometheus, 'meridian_worker_info{device="earlier-device"}') != [], 30,
                   "Prometheus to scrape the earlier it-w1")
        subprocess.run(["bash", str(SCRIPTS["prometheus"]), "stop"], env=stack.env, check=True, capture_output=True)
    finally:
        target.unlink()
        server.shutdown()
        server.server_close()
    stack.repair("prometheus")
    capsys.readouterr()
    deadline = time.monotonic() + 30
    while True:  # until Prometheus scraped the live it-w1 again; never twice meanwhile
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        workers = next(line for line in out.splitlines() if line.startswith("  workers:"))
        assert workers.count("it-w1 (") <= 1, out
        if ("it-w1 (" in workers and "earlier-device" not in workers) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert workers.count("it-w1 (") == 1 and workers.count("it-w2 (") == 1 and "earlier-device" not in workers, out
    assert re.search(r"  meridian-scheduler: [1-9][0-9]* member\(s\)", out), out
