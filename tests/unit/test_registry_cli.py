"""``meridian register`` without Kafka: its help, the summary it prints, the progress it shows and waits on,
and the registry's side of that progress (the registrar's steps, published before the reply)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import services.registry.cli as cli
from schemas import RegisteredVariant, RegistrationProgress, RegistrationReply, registry_reply_adapter
from services.registry import app
from services.registry.registrar import RegistrarConfig
from shared.adapters import topics
from shared.infaas import InMemoryMetadataStore
from tests.unit.test_infaas_registry import QUICK, request


def variant(name: str, device: str, batch1_ms: float, accuracy: float = 0.97) -> RegisteredVariant:
    return RegisteredVariant(variant=name, device=device, accuracy=accuracy, precision="fp32",
                             optimization_level="all", max_batch=8, batch_latency_ms={1: batch1_ms, 8: 4 * batch1_ms})


def reply(request_id: str = "r1", status: str = "registered", **fields) -> RegistrationReply:
    return RegistrationReply(request_id=request_id, model_name="digits", app_id="app", status=status, at=1.0, **fields)


def progress(message: str, request_id: str = "r1") -> RegistrationProgress:
    return RegistrationProgress(request_id=request_id, stage="profiling", message=message, at=1.0)


def test_run_directly_the_help_names_the_module(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["register", "--help"])
    assert capsys.readouterr().out.startswith("usage: python -m services.registry.cli register ")


def test_the_summary_gives_each_variant_its_fastest_device_and_the_application() -> None:
    answer = reply(reason="int8 skipped: conversion failed", variants=[
        variant("digits-fp32-all-b8", "cpu-1t", 0.5), variant("digits-fp32-all-b8", "gpu-t4", 0.25),
        variant("digits-fp16-all-b8", "cpu-1t", 0.75, accuracy=0.9)])
    assert cli.describe(answer, slo_ms=50).splitlines() == [
        "registered digits for application app (SLO 50 ms): 2 variants profiled on cpu-1t, gpu-t4",
        "  variant             accuracy  batch-1 latency",
        "  digits-fp32-all-b8     97.0%  0.25 ms on gpu-t4",
        "  digits-fp16-all-b8     90.0%  0.75 ms on cpu-1t",
        "note: int8 skipped: conversion failed",
    ]


def test_the_reply_topic_tells_progress_from_replies() -> None:
    for message in (progress("validated"), reply(), reply(status="rejected", reason="no")):
        assert registry_reply_adapter.validate_json(message.model_dump_json()) == message


class FakeReplies:
    """A consumer of the replies topic whose every poll takes `step_s` of a fake clock and yields the next batch."""

    def __init__(self, batches: list[list], step_s: float) -> None:
        self.batches, self.step_s, self.now = batches, step_s, 0.0

    def monotonic(self) -> float:
        return self.now

    def poll(self, timeout_ms: int) -> dict:
        self.now += self.step_s
        batch = self.batches.pop(0) if self.batches else []
        return {"partition": [SimpleNamespace(value=m.model_dump_json().encode()) for m in batch]}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, partitions) -> None:
        pass

    seek_to_end = position = close = assign


@pytest.fixture
def replies(monkeypatch):
    """Install a `FakeReplies` (and its clock) under `cli.ReplyWaiter`; returns the factory."""
    def install(batches: list[list], step_s: float) -> cli.ReplyWaiter:
        fake = FakeReplies(batches, step_s)
        monkeypatch.setattr(cli, "make_consumer", lambda *a, **k: fake)
        monkeypatch.setattr(cli, "time", SimpleNamespace(monotonic=fake.monotonic, time=time.time))
        return cli.ReplyWaiter(SimpleNamespace())
    return install


def test_each_progress_message_restarts_the_wait(replies) -> None:
    waiter = replies([[progress("1/3")], [progress("2/3")], [progress("3/3")], [reply()]], step_s=0.6)
    heard = []
    assert waiter.wait("r1", timeout_s=1.0, on_progress=heard.append) == reply()  # 2.4 s of a 1 s timeout
    assert [p.message for p in heard] == ["1/3", "2/3", "3/3"]


def test_silence_and_other_requests_progress_time_the_wait_out(replies) -> None:
    waiter = replies([[progress("1/3")], [progress("x", "r2")], [progress("y", "r2")], [reply()]], step_s=0.6)
    heard = []
    assert waiter.wait("r1", timeout_s=1.0, on_progress=heard.append) is None
    assert [p.message for p in heard] == ["1/3"]


@pytest.fixture
def register(tmp_path, monkeypatch, capsys):
    """Run ``meridian register`` against a fake registry that reports two steps then `answer`."""
    (tmp_path / "m.onnx").write_bytes(b"onnx")
    (tmp_path / "v.npz").write_bytes(b"npz")

    def run(answer: RegistrationReply | None, *extra: str, model_name: str = "digits") -> tuple[int, str, str]:
        def fake_registration(settings, request, *, timeout_s, on_progress):
            for step in ("validated digits", "profiling digits-fp32-all-b8 on cpu-1t (1/1)"):
                on_progress(progress(step, request.request_id))
            return answer and answer.model_copy(update={"request_id": request.request_id})

        monkeypatch.setattr(cli, "require_broker", lambda bootstrap: None)
        monkeypatch.setattr(cli, "request_registration", fake_registration)
        from services.cli.main import main
        code = main(["register", "--model-name", model_name, "--model-file", str(tmp_path / "m.onnx"),
                     "--validation-set", str(tmp_path / "v.npz"), "--app-id", "app", "--input-shape", "1,8,8",
                     "--slo-ms", "50", *extra])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def test_register_prints_progress_to_stderr_and_a_summary(register) -> None:
    code, out, err = register(reply(variants=[variant("digits-fp32-all-b8", "cpu-1t", 0.5)]))
    assert code == 0
    assert err.splitlines() == ["validated digits", "profiling digits-fp32-all-b8 on cpu-1t (1/1)"]
    assert out.startswith("registered digits for application app (SLO 50 ms): 1 variant profiled on cpu-1t\n")


def test_register_json_prints_the_whole_reply(register) -> None:
    code, out, _ = register(reply(variants=[variant("digits-fp32-all-b8", "cpu-1t", 0.5)]), "--json")
    assert code == 0 and RegistrationReply.model_validate_json(out).variants[0].batch_latency_ms[1] == 0.5


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_rejection_is_one_line_and_exit_1(register, extra) -> None:
    code, out, err = register(reply(status="rejected", reason="not a valid ONNX model:\n  bad bytes"), *extra)
    assert code == 1
    if extra:
        assert RegistrationReply.model_validate_json(out).status == "rejected"
    else:
        assert out == "" and err.splitlines()[-1] == "meridian register: rejected: not a valid ONNX model: bad bytes"


def test_a_request_that_breaks_the_contract_is_rejected_before_sending(register) -> None:
    code, out, err = register(reply(), model_name="no spaces allowed")
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("meridian register: rejected: ") and "`model_name`" in err


def test_no_word_from_the_registry_is_exit_2(register) -> None:
    code, _, err = register(None, "--timeout", "3")
    assert code == 2 and err.splitlines()[-1].endswith("for 3 s")


class SentMessages:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def send(self, topic: str, *, key: bytes, value: bytes) -> None:
        self.sent.append((topic, key, value))


def test_the_registry_publishes_each_step_before_the_reply(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(app, "ensure_results_topic", lambda settings, app_id: None)
    producer = SentMessages()
    ctx = app.RegistryContext(RegistrarConfig(tmp_path / "models", tmp_path / "profiles", QUICK),
                              InMemoryMetadataStore(), producer, settings=None)
    app.handle_register(ctx, request(), record=None)
    assert {(topic, key) for topic, key, _ in producer.sent} == {(topics.REGISTRY_REPLIES, b"r1")}
    messages = [registry_reply_adapter.validate_json(value) for _, _, value in producer.sent]
    assert [m.stage for m in messages[:-1]] == ["validated"] + ["generated"] * 3 + ["profiling"] * 6
    assert messages[3].message == "4 int8 variants generated (precision 3/3)"
    assert messages[-2].message == "profiling tiny-int8-all-b8, tiny-int8-all-b64 on cpu-1t (6/6)"
    assert messages[-1].status == "registered" and len(messages[-1].variants) == 12
