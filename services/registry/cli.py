"""Register a model from the command line: send a RegisterModel request and wait for the registry's reply.

Run::

    meridian register --model-name digits-small --model-file model.onnx --validation-set val.npz \\
        --app-id digits --input-shape 1,8,8 [--slo-ms 50] [--timeout 120] [--json]

(or ``python -m services.registry.cli register ...``). Prints the registry's `RegistrationProgress` lines
to stderr as they arrive, then a summary of the variants (``--json``: the whole `RegistrationReply`).
Exit codes: 0 registered, 1 rejected (also when the request breaks the wire contract, e.g. a file over
the size limit), 2 no broker, or no word from the registry for ``--timeout`` seconds (each progress
message restarts that wait, so a long registration that is still at work is not cut off). A torch
module is registered by exporting it first (`services.registry.torch_export.export_torch_module`);
files are never unpickled.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import TopicPartition
from pydantic import ValidationError

from schemas import RegisteredVariant, RegisterModel, RegistrationProgress, RegistrationReply, registry_reply_adapter
from services.cli.common import CommandError, require_broker, summary
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.settings import Settings

__all__ = ["ReplyWaiter", "build_request", "describe", "main", "request_registration"]

OnProgress = Callable[[RegistrationProgress], None]


class ReplyWaiter:
    """Reads ``meridian.registry-replies`` from its end at creation, so no reply sent later is missed."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=100)
        partitions = [TopicPartition(topics.REGISTRY_REPLIES, p)
                      for p in sorted(self._consumer.partitions_for_topic(topics.REGISTRY_REPLIES) or {0})]
        self._consumer.assign(partitions)
        self._consumer.seek_to_end(*partitions)
        for partition in partitions:
            self._consumer.position(partition)
        self._seen: dict[str, RegistrationReply] = {}

    def wait(self, request_id: str, timeout_s: float,
             on_progress: OnProgress = lambda _: None) -> RegistrationReply | None:
        """The reply to `request_id`, or ``None`` after `timeout_s` without word of it: each of its progress
        messages goes to `on_progress` and restarts the wait. Other requests' replies are kept for later."""
        deadline = time.monotonic() + timeout_s
        while request_id not in self._seen and time.monotonic() < deadline:
            for records in self._consumer.poll(timeout_ms=200).values():
                for record in records:
                    message = registry_reply_adapter.validate_json(record.value)
                    if isinstance(message, RegistrationReply):
                        self._seen[message.request_id] = message
                    elif message.request_id == request_id:
                        on_progress(message)
                        deadline = time.monotonic() + timeout_s
        return self._seen.pop(request_id, None)

    def close(self) -> None:
        self._consumer.close()


def build_request(*, model_name: str, app_id: str, model_file: Path, validation_set: Path,
                  input_shape: list[int], slo_ms: float = 100.0) -> RegisterModel:
    """The request for two local files; raises pydantic's ValidationError when it breaks the contract."""
    return RegisterModel(
        request_id=f"reg-{uuid.uuid4().hex}", model_name=model_name, app_id=app_id, input_shape=input_shape,
        model_onnx_b64=base64.b64encode(model_file.read_bytes()).decode(),
        validation_npz_b64=base64.b64encode(validation_set.read_bytes()).decode(), slo_ms=slo_ms, sent_at=time.time())


def request_registration(settings: Settings, request: RegisterModel, *, timeout_s: float,
                         on_progress: OnProgress = lambda _: None) -> RegistrationReply | None:
    """Send `request` and wait for its reply, ``None`` after `timeout_s` without progress or reply."""
    waiter = ReplyWaiter(settings)
    producer = make_producer(settings)
    try:
        producer.send(topics.REGISTRATIONS, key=request.model_name.encode(), value=request.model_dump_json().encode())
        producer.flush(timeout=30)
        return waiter.wait(request.request_id, timeout_s, on_progress)
    finally:
        producer.close(timeout=5)
        waiter.close()


def _batch1_ms(variant: RegisteredVariant) -> float:
    return variant.batch_latency_ms.get(1, float("inf"))


def describe(answer: RegistrationReply, *, slo_ms: float) -> str:
    """A registered model in a few lines: per variant its accuracy and fastest batch-1 latency (and where),
    the devices profiled, the application and SLO; the reply's JSON is ``--json``."""
    fastest: dict[str, RegisteredVariant] = {}
    for variant in answer.variants:
        if variant.variant not in fastest or _batch1_ms(variant) < _batch1_ms(fastest[variant.variant]):
            fastest[variant.variant] = variant
    devices = sorted({v.device for v in answer.variants})
    width = max(map(len, fastest), default=0)
    lines = [f"registered {answer.model_name} for application {answer.app_id} (SLO {slo_ms:g} ms): "
             f"{len(fastest)} variant{'s' * (len(fastest) != 1)} profiled on {', '.join(devices)}",
             f"  {'variant':<{width}}  accuracy  batch-1 latency"]
    lines += [f"  {v.variant:<{width}}  {v.accuracy:>8.1%}  {_batch1_ms(v):.3g} ms on {v.device}"
              for v in fastest.values()]
    if answer.reason:
        lines.append(f"note: {answer.reason}")
    return "\n".join(lines)


def _one_line(text: str | None) -> str:
    return " ".join((text or "no reason given").split())


def _shape(text: str) -> list[int]:
    try:
        return [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"`--input-shape` must be comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None, *, prog: str = "python -m services.registry.cli") -> int:
    """``prog``: how help and errors name the command (``meridian`` passes its own name)."""
    parser = argparse.ArgumentParser(prog=prog, description=summary(__doc__))
    commands = parser.add_subparsers(dest="command", required=True)
    register = commands.add_parser(
        "register", help="register an ONNX model under an application",
        description="Register an ONNX model under an application: the registry validates it, generates and "
                    "profiles its variants, reporting each step here.",
        epilog="exit codes: 0 registered, 1 rejected, 2 bad arguments, no broker, or no word from the registry "
               "for --timeout s")
    register.add_argument("--model-name", required=True)
    register.add_argument("--model-file", required=True, type=Path, help="an .onnx file")
    register.add_argument("--validation-set", required=True, type=Path, help="an .npz with arrays x and y")
    register.add_argument("--app-id", required=True)
    register.add_argument("--input-shape", required=True, type=_shape, help="one row's shape, e.g. 1,8,8")
    register.add_argument("--slo-ms", type=float, default=100.0, help="default SLO of the model's queries")
    register.add_argument("--timeout", type=float, default=120.0,
                          help="seconds to wait without word from the registry (each progress line restarts it)")
    register.add_argument("--json", action="store_true", help="print the whole reply as JSON instead of a summary")
    args = parser.parse_args(argv)
    try:
        request = build_request(model_name=args.model_name, app_id=args.app_id, model_file=args.model_file,
                                validation_set=args.validation_set, input_shape=args.input_shape, slo_ms=args.slo_ms)
    except ValidationError as exc:
        reason = describe_validation_error(exc)
        if args.json:
            print(json.dumps({"status": "rejected", "reason": reason}, indent=1))
        else:
            print(f"{register.prog}: rejected: {_one_line(reason)}", file=sys.stderr)
        return 1
    settings = Settings()
    try:
        require_broker(settings.kafka_bootstrap)
    except CommandError as exc:
        print(f"{register.prog}: {exc}", file=sys.stderr)
        return 2
    answer = request_registration(settings, request, timeout_s=args.timeout,
                                  on_progress=lambda progress: print(progress.message, file=sys.stderr, flush=True))
    if answer is None:
        print(f"{register.prog}: no word from the registry about {request.request_id} for {args.timeout:g} s",
              file=sys.stderr)
        return 2
    if args.json:
        print(answer.model_dump_json(indent=1))
    elif answer.status == "registered":
        print(describe(answer, slo_ms=args.slo_ms))
    else:
        print(f"{register.prog}: rejected: {_one_line(answer.reason)}", file=sys.stderr)
    return 0 if answer.status == "registered" else 1


if __name__ == "__main__":
    sys.exit(main())
