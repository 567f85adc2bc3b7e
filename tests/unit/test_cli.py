"""The ``meridian`` command line: help on every level, and a one-line reason with a non-zero exit code
for every input it cannot use (before it touches a broker)."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from services.cli.main import main
from services.serve_config import ServeConfig
from shared.catalogue import Catalogue
from shared.settings import REPO_ROOT, Settings

COMMANDS = ["demo", "stack", "serve", "submit", "register", "status"]


@pytest.mark.parametrize("argv", [["--help"], *([c, "--help"] for c in COMMANDS), ["stack", "reset", "--help"]])
def test_every_level_has_help(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_the_top_level_help_lists_every_command(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(command in out for command in COMMANDS)


def test_the_top_level_help_is_plain_text(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "`" not in capsys.readouterr().out


def test_register_help_names_the_command_it_was_run_as(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["register", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: meridian register ") and "services.registry" not in out


def test_an_unknown_command_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve-everything"])
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err


def submit(tmp_path, name: str, content: bytes | str, capsys) -> tuple[int, str]:
    path = tmp_path / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    code = main(["submit", str(path), "--application", "digits", "--slo-ms", "100"])
    return code, capsys.readouterr().err


def test_submit_refuses_what_it_cannot_read(tmp_path, capsys) -> None:
    assert main(["submit", str(tmp_path / "none.npz"), "--application", "digits", "--slo-ms", "100"]) == 2
    assert "no such file" in capsys.readouterr().err
    code, err = submit(tmp_path, "rows.csv", "1,2,3\n", capsys)
    assert code == 2 and "expected an .npz, .jsonl, .jpg, .jpeg or .png file" in err
    code, err = submit(tmp_path, "rows.jsonl", "[[1.0, 2.0]]\n{not json\n", capsys)
    assert code == 2 and "line 2: not JSON" in err
    code, err = submit(tmp_path, "rows.jsonl", json.dumps({"rows": [[1.0]]}) + "\n", capsys)
    assert code == 2 and "line 1: expected a row, a list of rows or an object with `inputs`" in err
    code, err = submit(tmp_path, "rows.jsonl", json.dumps({"inputs": [[1.0]], "slo_ms": -5}) + "\n", capsys)
    assert code == 2 and "line 1" in err and "slo_ms" in err
    code, err = submit(tmp_path, "empty.jsonl", "\n", capsys)
    assert code == 2 and "holds no query" in err


def test_submit_takes_one_row_or_a_list_of_rows_per_json_line(tmp_path) -> None:
    import argparse

    from services.cli.submit import read_queries

    one_row, two_rows = [[[0.0] * 8] * 8], [[[[0.0] * 8] * 8]] * 2  # a 1x8x8 row; a list of two
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(v) for v in (one_row, two_rows, {"inputs": one_row})))
    args = argparse.Namespace(inputs=tmp_path / "q.jsonl", application="digits", model=None, slo_ms=100.0,
                              accuracy_floor=None, priority=2)
    assert [(q.batch_size, q.priority) for q, _ in read_queries(args)] == [(1, 2), (2, 2), (1, 2)]


def test_submit_sends_an_image_file_as_one_encoded_image(tmp_path) -> None:
    import argparse

    from services.cli.submit import read_queries

    (tmp_path / "cat.JPG").write_bytes(b"\xff\xd8 the bytes of a JPEG")
    args = argparse.Namespace(inputs=tmp_path / "cat.JPG", application="photos", model=None, slo_ms=500.0,
                              accuracy_floor=None, priority=None)
    [(query, binary)] = list(read_queries(args))
    assert query.inputs[0].datatype == "BYTES" and query.inputs[0].shape == [1] and query.batch_size == 1
    assert binary == (22).to_bytes(4, "little") + b"\xff\xd8 the bytes of a JPEG"


def test_submit_says_when_nothing_consumes_the_queries(tmp_path, monkeypatch, capsys) -> None:
    from services.cli import submit as command

    class Unanswered:
        results: dict = {}

        def __init__(self, *_, **__) -> None: ...
        def __enter__(self): return self
        def __exit__(self, *_) -> None: ...
        def send(self, query, binary=b""): return query
        def flush(self) -> None: ...
        def wait_for(self, ids, timeout_s) -> bool: return False

    monkeypatch.setattr(command, "MeridianClient", Unanswered)
    monkeypatch.setattr(command, "require_broker", lambda bootstrap: None)
    monkeypatch.setattr(command, "scheduler_members", lambda settings: 0)
    (tmp_path / "q.jsonl").write_text(json.dumps([[[0.0] * 8] * 8]) + "\n")
    assert main(["submit", str(tmp_path / "q.jsonl"), "--application", "digits", "--slo-ms", "100"]) == 1
    err = capsys.readouterr().err
    assert "nothing consumes meridian.queries (consumer group meridian-scheduler has no member)" in err
    assert "1 queries unanswered after 60 s" in err


def closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again once the block ends: nothing listens there


@pytest.mark.parametrize("command", [["submit", "{rows}", "--application", "digits", "--slo-ms", "100"], ["status"],
                                     ["register", "--model-name", "m", "--model-file", "{model}", "--validation-set",
                                      "{rows}", "--app-id", "a", "--input-shape", "1,8,8"]])
def test_without_a_broker_a_command_says_so_in_one_line(tmp_path, monkeypatch, capsys, command) -> None:
    port = closed_port()
    monkeypatch.setenv("MERIDIAN_KAFKA_BOOTSTRAP", f"127.0.0.1:{port}")
    monkeypatch.setenv("MERIDIAN_PROMETHEUS_PORT", str(port))
    np.savez(tmp_path / "rows.npz", x=np.zeros((2, 1, 8, 8), np.float32), y=np.zeros(2, np.int64))
    (tmp_path / "m.onnx").write_bytes(b"onnx")
    argv = [a.format(rows=tmp_path / "rows.npz", model=tmp_path / "m.onnx") for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"meridian {command[0]}: no Kafka broker at 127.0.0.1:{port}: is the stack up? (`meridian stack up`)\n"


def test_submit_writes_to_a_reader_that_stopped_without_a_traceback(monkeypatch) -> None:
    from schemas import Result, ResultStatus
    from services.cli.submit import write_results

    read_end, write_end = os.pipe()
    os.close(read_end)  # as `meridian submit ... | head -1` once head has its line
    with os.fdopen(write_end, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        write_results([Result(query_id=str(i), status=ResultStatus.OK) for i in range(3)], None)


def test_submit_needs_an_array_it_can_tell_apart(tmp_path, capsys) -> None:
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 3)), b=np.ones((2, 3)))
    assert main(["submit", str(tmp_path / "two.npz"), "--application", "digits", "--slo-ms", "100"]) == 2
    assert "no array `x` and not exactly one array (has a, b)" in capsys.readouterr().err


def test_make_demo_serves_the_readmes_serve_config() -> None:
    """``make demo`` and ``meridian serve --config infra/serve.yaml`` run the same applications, policies,
    planner settings and workers: the demo reads the file."""
    from services.demo.__main__ import DEMO_SETTINGS
    from services.demo.workload import DIGITS_WORKER, EMULATED

    config = ServeConfig.load(REPO_ROOT / "infra/serve.yaml")
    assert DEMO_SETTINGS == config.settings_fields()
    assert [w.id for w in config.workers] == [*(worker_id for worker_id, _ in EMULATED), DIGITS_WORKER]


def test_the_example_serve_config_is_valid_and_names_real_variants() -> None:
    config = ServeConfig.load(REPO_ROOT / "infra/serve.yaml")
    settings = Settings(**config.settings_fields())
    assert settings.scheduler_policy == "infaas" and config.planner is None
    catalogue = Catalogue.from_settings(settings)
    known = {v for families in config.applications.values() for f in families for v in catalogue.variants_of(f)}
    assert {v for w in config.workers for v in w.variants} <= known
    assert {w.emulate for w in config.workers if w.emulate} <= set(catalogue.profiles.device_by_name)


@pytest.mark.parametrize("text, reason", [
    ("applications: [vision\n", "not YAML"),
    ("applications: {a: [m]}\nworkers: [{id: w, variants: [m]}]\npolicies: fcfs\n", "policies"),
    ("applications: {a: [m]}\nworkers: [{id: 'w w', variants: [m]}]\n", "id"),
    ("applications: {a: [m]}\nworkers: []\n", "workers"),
])
def test_serve_refuses_a_bad_config_with_the_field_at_fault(tmp_path, capsys, text, reason) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    assert main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("meridian serve: ") and reason in err and len(err.strip().splitlines()) == 1


SERVE_YAML = (REPO_ROOT / "infra/serve.yaml").read_text()


@pytest.mark.parametrize("typo, fixed, reason", [
    ("policy: infaas", "policy: proteos", "policy: no dispatch policy 'proteos'; did you mean proteus?"),
    ("application_policies: {digits: fcfs}", "application_policies: {digits: fcsf}",
     "application_policies.digits: no dispatch policy 'fcsf'; did you mean fcfs?"),
    ("application_policies: {digits: fcfs}", "application_policies: {digit: fcfs}",
     "application_policies.digit: no application 'digit'; did you mean digits?"),
    ("# planner: proteus", "planner: proteos", "planner: no planner 'proteos'; did you mean proteus?"),
    ("  digits: [digits]", "  digits: [digit]",
     "applications.digits: no model family 'digit' is profiled; did you mean digits?"),
    ("    emulate: g4dn-emu", "    emulate: g4dn",
     "workers[2] (emu-g4dn).emulate: no device 'g4dn' is profiled; did you mean g4dn-emu?"),
    ("efficientnet-lite1, efficientnet-lite2]\n    emulate: cpu-1t", "efficientnet-lite1, efficientnet-lite3]\n    emulate: cpu-1t",
     "workers[0] (emu-cpu1t).variants: 'efficientnet-lite3' is no variant of the families served; did you mean "
     "efficientnet-lite2 or efficientnet-lite1 or efficientnet-lite0?"),
    ("  load_stats_interval_s: 1", "  load_stats_interval_s: 1\n  replan_perod_s: 10",
     "settings.replan_perod_s: no such setting; did you mean replan_period_s?"),
    ("policy: infaas", "policy: fcfs", "registry: registered applications are served by the default policy, "
     "which must then be infaas (INFaaS' model-less path), not 'fcfs'"),
    ("digits-cnn-m, digits-cnn-l]", "digits-cnn-m, digits-cnn-l]\n    emulate: cpu-1t",
     "registry: registered models run on a real worker (one without `emulate`), and every worker here is emulated"),
    ("    emulate: g4dn-emu", "    emulate: g4dn-emu\n    threads: 2",
     "workers[2] (emu-g4dn): an emulated worker replays its device's profile; `threads` is for a real one"),
])
def test_serve_names_a_misspelt_name_and_the_closest_it_knows_before_it_starts_anything(
        tmp_path, capsys, typo, fixed, reason) -> None:
    assert typo in SERVE_YAML
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML.replace(typo, fixed, 1))
    assert main(["serve", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"meridian serve: {path}: {reason}\n"


def test_stack_reset_without_yes_only_says_what_it_would_delete(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MERIDIAN_VAR_DIR", str(tmp_path))
    for name in ("kafka-9092", "logs", "models"):
        (tmp_path / name).mkdir()
    assert main(["stack", "reset"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "kafka-9092") in out and str(tmp_path / "logs") in out and "models" not in out.split("\nrun")[0]
    assert all((tmp_path / name).exists() for name in ("kafka-9092", "logs", "models"))
