"""The ``meridian`` command line against the real stack: submit a file of digits and read the answers
back, then ask what is serving."""
from __future__ import annotations

import json

import numpy as np
import pytest

from services.cli.main import main
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


def test_submit_jsonl_rows_print_to_stdout(pipeline, stack_env, tmp_path, capsys) -> None:
    x, _ = digits_rows()
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"inputs": x[k:k + 1].tolist()}) + "\n" for k in range(3)))
    assert main(["submit", str(tmp_path / "q.jsonl"), "--application", "digits", "--slo-ms", "5000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["status"] == "ok" for line in lines)


def test_status_names_the_workers_and_the_consumer_groups(pipeline, stack_env, capsys) -> None:
    assert main(["stack", "status"]) == 0
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "kafka       up" in out and "from Kafka" in out and "meridian-scheduler" in out, out
