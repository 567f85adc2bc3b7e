"""``meridian submit``: send queries from a file and print (or write) their results as JSON lines.

Exits 0 when every query was answered ok, 1 when any was not (the summary counts each status and its
commonest reasons), 2 for input it cannot use.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from kafka.errors import KafkaError
from pydantic import ValidationError
from tqdm import tqdm

from schemas import Query, Result
from services.cli.common import CommandError, require_broker, summary
from services.observability.lag_exporter import collect
from shared.adapters import topics
from shared.adapters.client import MeridianClient, QueryTooLarge, UnreadableTopic
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import make_admin
from shared.catalogue import Catalogue
from shared.serving.wording import reason_clause, reason_kind
from shared.settings import Settings
from shared.tensors import encode, encode_images

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


#: seconds without any answer after which it looks for a scheduler
QUIET_S = 3.0
FORMATS = """\
inputs:
  .npz    array `x` (or the file's only array): each entry along its first axis is one query's one row
  .jsonl  one query per line: one row (an array of the model's row shape), a list of rows, or an object
          with `inputs` (one row or a list of rows) and any other Query field (slo_ms, accuracy_floor, ...)
  .jpg .jpeg .png  one query of that one encoded image, for image models (the worker decodes and prepares
          it as the variant that serves it was trained)

example, two digits queries (the digits models take rows of shape 1x8x8):
  $ python -c "import json; [print(json.dumps([[[0.0] * 8] * 8])) for _ in range(2)]" > two.jsonl
  $ meridian submit two.jsonl --application digits --slo-ms 100
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("submit", help="send queries from an .npz, JSON-lines or image file, print the results",
                                 description=summary(__doc__), epilog=FORMATS,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", type=Path, help=".npz, .jsonl, or a JPEG or PNG image")
    parser.add_argument("--application", required=True)
    parser.add_argument("--model", default=None, help="a family or a variant (default: any the application has)")
    parser.add_argument("--slo-ms", type=float, required=True, help="each query's latency goal")
    parser.add_argument("--accuracy-floor", type=float, default=None, help="each query's accuracy goal (0..1)")
    parser.add_argument("--priority", type=int, choices=range(1, 10), default=None, metavar="1-9",
                        help="each query's priority class: 1 is served first, 9 last (default: the application's)")
    parser.add_argument("--out", type=Path, default=None, help="write the results here (default: stdout)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the last result")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    queries = list(read_queries(args))
    if not queries:
        raise CommandError(f"{args.inputs} holds no query")
    settings = Settings()
    require_broker(settings.kafka_bootstrap)
    try:
        client = MeridianClient(settings, applications=[args.application])
    except UnreadableTopic:
        raise CommandError(unknown_application(settings, args.application)) from None
    with client:
        for query, binary in tqdm(queries, desc="sending", unit="query", disable=None, file=sys.stderr):
            try:
                client.send(query, binary)
            except QueryTooLarge as exc:
                raise CommandError(str(exc)) from None
        client.flush()
        ids = [q.query_id for q, _ in queries]
        complete = client.wait_for(ids, timeout_s=min(QUIET_S, args.timeout))
        if not complete and not client.results and scheduler_members(settings) == 0:
            print(f"nothing consumes {topics.QUERIES} (consumer group {topics.SCHEDULER_GROUP} has no member): is "
                  "a scheduler running? (`meridian serve --config infra/serve.yaml`)", file=sys.stderr, flush=True)
        if not complete:
            complete = client.wait_for(ids, timeout_s=max(0.0, args.timeout - QUIET_S))
        results = [client.results[i][0] for i in ids if i in client.results]
    write_results(results, args.out)
    print(f"{len(queries)} sent to {settings.kafka_bootstrap}, {answered(results)}"
          + (f", results in {args.out}" if args.out else ""), file=sys.stderr)
    if not complete:
        raise CommandError(f"{len(queries) - len(results)} queries unanswered after {args.timeout:g} s", code=1)
    return 0 if all(r.status.value == "ok" for r in results) else 1


def unknown_application(settings: Settings, application: str) -> str:
    """Why ``application``'s answers cannot be read, in one line, with the applications whose can."""
    try:
        admin = make_admin(settings)
        try:
            names = admin.list_topics()
        finally:
            admin.close()
    except KafkaError:
        names = []
    known = sorted(name.removeprefix(topics.RESULTS_PREFIX) for name in names
                   if name.startswith(topics.RESULTS_PREFIX))
    return (f"--application {application!r}: no such application here ({topics.results_topic(application)!r} "
            f"does not exist, or this user may not read it); applications: {', '.join(known) or 'none yet'} "
            "(`meridian register` adds one)")


def scheduler_members(settings: Settings) -> int | None:
    """How many scheduler processes read the queries topic now (None: the broker did not say)."""
    try:
        admin = make_admin(settings)
        try:
            return collect(admin, group_prefix=topics.SCHEDULER_GROUP).members.get(topics.SCHEDULER_GROUP, 0)
        finally:
            admin.close()
    except KafkaError:
        return None


def write_results(results: list[Result], path: Path | None) -> None:
    """One JSON line per result, to ``path`` or stdout. A reader that stops early (``| head``) ends the output,
    not the command: the summary and the exit code still follow."""
    if path is not None:
        with path.open("w") as out:
            out.writelines(r.model_dump_json(exclude_none=True) + "\n" for r in results)
        return
    try:
        sys.stdout.writelines(r.model_dump_json(exclude_none=True) + "\n" for r in results)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit


def answered(results: list[Result]) -> str:
    """How many were answered, of each status, and the commonest kinds of reason of those not ok: a kind
    whose reasons all read the same is said as it reads (its shapes and sizes), another as its kind with
    its first reason for an example.

    Examples
    --------
    >>> from schemas import ResultStatus
    >>> late = [Result(query_id=f"q{k}", status=ResultStatus.DROPPED,
    ...                reason=f"would miss its deadline by {k} ms: sent 98 ms ago") for k in (3, 5)]
    >>> shape = "`inputs` are rows of shape [2, 8] of FP32, but the model takes rows of shape [1, 8, 8] of FP32"
    >>> print(answered([Result(query_id="a", status=ResultStatus.OK), *late,
    ...                 Result(query_id="b", status=ResultStatus.REJECTED, reason=shape)]))
    4 answered: 2 dropped, 1 ok, 1 rejected; not ok: 2 would miss its deadline by n ms (e.g. would miss its \
deadline by 3 ms); 1 `inputs` are rows of shape [2, 8] of FP32, but the model takes rows of shape [1, 8, 8] of FP32
    """
    statuses = Counter(r.status.value for r in results)
    kinds: dict[str, list[str]] = {}
    for result in results:
        if result.status.value != "ok" and result.reason:
            kinds.setdefault(reason_kind(result.reason), []).append(reason_clause(result.reason))
    counts = ", ".join(f"{n} {status}" for status, n in statuses.most_common())
    line = f"{len(results)} answered" + (f": {counts}" if counts else "")
    if kinds:
        commonest = sorted(kinds.items(), key=lambda kind: -len(kind[1]))[:3]
        line += "; not ok: " + "; ".join(
            f"{len(clauses)} {clauses[0] if len(set(clauses)) == 1 else f'{kind} (e.g. {clauses[0]})'}"
            for kind, clauses in commonest)
    return line


def read_queries(args: argparse.Namespace) -> Iterator[tuple[Query, bytes]]:
    """Each query the file holds, and its binary section."""
    if not args.inputs.exists():
        raise CommandError(f"no such file: {args.inputs}")
    goals = {"application": args.application, "model": args.model, "slo_ms": args.slo_ms,
             "accuracy_floor": args.accuracy_floor, "priority": args.priority}
    if args.inputs.suffix.lower() in IMAGE_SUFFIXES:
        image = encode_images([args.inputs.read_bytes()])
        yield _query({**goals, "batch_size": 1, "inputs": image.tensors}, where=str(args.inputs)), image.binary
        return
    shape = row_shape(Settings(), args.application, args.model)
    if args.inputs.suffix == ".npz":
        rows = npz_rows(args.inputs)
        for k in range(len(rows)):
            yield make_query({**goals, "inputs": rows[k:k + 1]}, where=f"row {k}")
    elif args.inputs.suffix in (".jsonl", ".json"):
        for number, line in enumerate(args.inputs.read_text().splitlines(), start=1):
            if line.strip():
                yield make_query({**goals, **json_fields(line, number, shape)}, where=f"line {number}")
    else:
        raise CommandError(f"{args.inputs}: expected an .npz, .jsonl, .jpg, .jpeg or .png file")


def npz_rows(path: Path) -> np.ndarray:
    with np.load(path) as arrays:
        if "x" not in arrays and len(arrays.files) != 1:
            raise CommandError(f"{path}: no array `x` and not exactly one array (has {', '.join(arrays.files)})")
        return arrays["x" if "x" in arrays else arrays.files[0]]


def row_shape(settings: Settings, application: str, model: str | None) -> tuple[int, ...] | None:
    """The one row shape the application's models (or ``model``) take, as profiled here; None when they take
    several or none is profiled (an application registered elsewhere)."""
    catalogue = Catalogue.from_settings(settings)
    families = [model] if model else settings.applications.get(application, [])
    variants = [v for name in families for v in (catalogue.variants_of(name) or [name])]
    shapes = {tuple(p.input_shape) for v in variants for p in catalogue.profiles_of(v) if p.input_shape}
    return shapes.pop() if len(shapes) == 1 else None


def json_fields(line: str, number: int, shape: tuple[int, ...] | None) -> dict[str, object]:
    """A line's query fields; ``inputs`` of exactly the row ``shape`` are one row."""
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CommandError(f"line {number}: not JSON ({exc.msg})") from None
    fields = {"inputs": fields} if isinstance(fields, list) else fields
    if not isinstance(fields, dict) or "inputs" not in fields:
        raise CommandError(f"line {number}: expected a row, a list of rows or an object with `inputs`")
    inputs = np.asarray(fields["inputs"], dtype=np.float32)
    fields["inputs"] = inputs[np.newaxis] if shape is not None and inputs.shape == shape else inputs
    return fields


def make_query(fields: dict, *, where: str) -> tuple[Query, bytes]:
    """A query of ``fields["inputs"]``' rows, sent as a JSON tensor (OIP ``data``)."""
    rows = fields["inputs"]
    return _query({"batch_size": len(rows), **fields, "inputs": encode(rows)}, where=where), b""


def _query(fields: dict, *, where: str) -> Query:
    try:
        return Query(**{"query_id": f"cli-{uuid.uuid4().hex[:16]}", "sent_at": 0.0, **fields})
    except ValidationError as exc:
        raise CommandError(f"{where}: {describe_validation_error(exc)}") from None
