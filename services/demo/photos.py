"""The demo's third act: real photographs, classified for real.

One application, ``photos`` (the EfficientNet-Lite family, a 500 ms SLO), on one worker that runs
onnxruntime on this machine's CPU: nothing here is emulated. Each query carries one JPEG in its message's
binary section (`shared.modelzoo.photos`: scikit-image's cat, cup of coffee and rocket, mirrored, cropped
and rescaled, so no two files are the same); the scheduler forwards it without decoding it; the worker
decodes it and prepares it as the variant that serves it was exported (224, 240 or 260 pixels). The queries
name no variant, only the family and an accuracy goal (none, 76% or 77%), which leaves INFaaS Lite0, Lite1
and Lite2 to choose from, or Lite1 and Lite2, or Lite2 alone (published ImageNet top-1 75.1, 76.7 and
77.6%): one image query may be served by any variant, each prepared its own way.

Each answer is checked twice: against the variant that served it, run in this process on the same file with
the same preprocessing, and against what a person would call the photograph. ``make bench-payload`` runs
the same fleet and checks (`running`, `classify`) at its own rate.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from schemas import Query, ResultStatus
from services.launcher import LocalLauncher, ManagedProcess
from services.serve_config import settings_env
from shared import imaging
from shared.adapters.client import MeridianClient
from shared.modelzoo import efficientnet, photos
from shared.onnx_runtime import make_session, run_batch
from shared.settings import Settings
from shared.sim.arrivals import poisson_arrivals
from shared.tensors import encode_images

APPLICATION = "photos"
WORKER = "onnx-photos"
SLO_MS = 500.0
#: what the act's processes are told: one application, served by INFaaS' per-query variant choice
FIELDS = {"applications": {APPLICATION: [efficientnet.FAMILY]}, "application_slo_ms": {APPLICATION: SLO_MS},
          "scheduler_policy": "infaas", "application_policies": {}}
#: the accuracy goals the act's queries ask for: none (any variant), 76% (Lite1 or Lite2), 77% (Lite2 alone)
ACCURACY_GOALS: tuple[float | None, ...] = (None, 0.76, 0.77)
#: JPEG quality of the photographs (~36 KB each)
QUALITY = 90
#: the act's rate and length: Lite2 takes ~20 ms a photograph on one core, so one core holds this easily
RATE_QPS, DURATION_S = 6.0, 20.0


class PhotoAnswer(NamedTuple):
    """One photograph's query and what came back."""

    subject: str
    goal: float | None
    status: str
    variant: str | None
    predicted: int | None
    within_slo: bool
    #: the served variant, run in this process on the same file, gave the same class
    equal_in_process: bool
    #: the class is one a person would name the photograph by
    names_subject: bool


def fields(settings: Settings) -> Settings:
    """``settings`` as the act's processes read them."""
    return settings.model_copy(update=FIELDS)


@contextmanager
def started(stack_env: dict[str, str], log_dir: Path, *, metrics_port: int, policy: str = FIELDS["scheduler_policy"],
            gateway_port: int | None = None, provider: str | None = None) -> Iterator[ManagedProcess]:
    """A scheduler (INFaaS unless ``policy`` says otherwise: one that needs no planner or offline policy
    set) and the real worker holding Lite0, Lite1 and Lite2 (on ``provider``, ``cpu`` or ``cuda``, if one is
    named; else the best that runs here), heard from, and an Open Inference Protocol gateway on
    ``gateway_port`` if one is given: the worker."""
    env = {**stack_env, **settings_env({**FIELDS, "scheduler_policy": policy})}
    with LocalLauncher(env, log_dir) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=metrics_port)
        worker = launcher.start_worker(WORKER, variants=[v.name for v in efficientnet.VARIANTS],
                                       metrics_port=metrics_port + 1, provider=provider)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        if gateway_port is not None:
            launcher.start_gateway(port=gateway_port)
        yield worker


@contextmanager
def running(stack_env: dict[str, str], log_dir: Path, settings: Settings, *, metrics_port: int,
            policy: str = FIELDS["scheduler_policy"], gateway_port: int | None = None,
            provider: str | None = None) -> Iterator[MeridianClient]:
    """`started`, and a client of ``photos``."""
    with started(stack_env, log_dir, metrics_port=metrics_port, policy=policy, gateway_port=gateway_port,
                 provider=provider), \
            MeridianClient(fields(settings), applications=[APPLICATION]) as client:
        yield client


def classify(client: MeridianClient, settings: Settings, *, rate: float, duration_s: float,
             goals: Sequence[float | None] = ACCURACY_GOALS, model: str = efficientnet.FAMILY, seed: int = 7
             ) -> list[PhotoAnswer]:
    """Augmented photographs sent as Poisson arrivals at ``rate`` for ``duration_s``, each asking for
    one of ``goals`` (drawn); their answers, checked. A first round of one query per goal, answered before the
    measured ones, is not counted (the consumer groups settle)."""
    shots = photos.augmented(48, seed=seed, quality=QUALITY)
    warm = [_send(client, model, shots[k], goals[k % len(goals)]) for k in range(len(goals))]
    client.wait_for([q.query_id for q, _ in warm], timeout_s=60)
    rng = np.random.default_rng(seed)
    times = poisson_arrivals(rate, max(len(goals), int(rate * duration_s)), rng)
    asks = rng.integers(len(goals), size=len(times))  # drawn: cycling would pair each goal with one subject
    sent, start = [], time.time()
    for k, offset in enumerate(times):
        time.sleep(max(0.0, start + offset - time.time()))
        sent.append(_send(client, model, shots[k % len(shots)], goals[asks[k]]))
    client.flush()
    client.wait_for([q.query_id for q, _ in sent], timeout_s=60)
    reference = InProcess(settings.models_dir)
    return [_checked(client, query, shot, reference) for query, shot in sent]


def _send(client: MeridianClient, model: str, shot: photos.Photograph, goal: float | None
          ) -> tuple[Query, photos.Photograph]:
    inputs = encode_images([shot.jpeg])
    query = Query(query_id=f"{APPLICATION}-{uuid.uuid4().hex[:12]}", application=APPLICATION, model=model,
                  slo_ms=SLO_MS, batch_size=1, accuracy_floor=goal, inputs=inputs.tensors, sent_at=time.time())
    client.send(query, inputs.binary)
    return query, shot


def _checked(client: MeridianClient, query: Query, shot: photos.Photograph, reference: "InProcess") -> PhotoAnswer:
    result, received = client.results.get(query.query_id, (None, 0.0))
    if result is None:
        return PhotoAnswer(shot.subject, query.accuracy_floor, "unanswered", None, None, False, False, False)
    ok = result.status is ResultStatus.OK
    predicted = result.predictions[0] if ok and result.predictions else None
    return PhotoAnswer(
        shot.subject, query.accuracy_floor, result.status.value, result.variant, predicted,
        within_slo=ok and (received - query.sent_at) * 1000.0 <= SLO_MS,
        equal_in_process=predicted is not None and predicted == reference.top1(result.variant, [shot.jpeg])[0],
        names_subject=predicted in shot.classes)


class InProcess:
    """The variants run in this process, each photograph prepared by the same code as the worker's: the
    reference a worker's answer must equal."""

    def __init__(self, models_dir: Path) -> None:
        self._models_dir = models_dir
        self._sessions: dict[str, object] = {}

    def top1(self, variant: str, images: Sequence[bytes]) -> list[int]:
        session = self._sessions.get(variant)
        if session is None:
            session = self._sessions[variant] = make_session(self._models_dir / f"{variant}.onnx")
        spec = efficientnet.preprocessing(efficientnet.get_variant(variant).image_size)
        batch = np.stack([imaging.prepare(image, spec) for image in images])
        return run_batch(session, batch).argmax(axis=-1).tolist()


def format_answers(answers: Sequence[PhotoAnswer]) -> str:
    """Per accuracy goal: the variants that served it, within SLO, equal to in-process, naming the subject;
    then per subject, the classes answered."""
    lines = [f"{'goal':>6}  {'queries':>7}  {'served by':<40} {'in SLO':>7} {'= in-process':>13} {'names it':>9}"]
    asked = {a.goal for a in answers}
    for goal in [g for g in ACCURACY_GOALS if g in asked] + sorted(asked - set(ACCURACY_GOALS)):
        mine = [a for a in answers if a.goal == goal]
        served = ", ".join(f"{v} {n}" for v, n in Counter(a.variant or a.status for a in mine).most_common())
        lines.append(f"{'none' if goal is None else f'{goal:.0%}':>6}  {len(mine):>7}  {served:<40} "
                     + " ".join(f"{_share(sum(getattr(a, k) for a in mine), len(mine)):>{w}}"
                                for k, w in (("within_slo", 7), ("equal_in_process", 13), ("names_subject", 9))))
    for subject in dict.fromkeys(a.subject for a in answers):
        classes = Counter(photos.class_name(a.predicted) for a in answers if a.subject == subject and a.predicted is not None)
        lines.append(f"{subject}: answered " + ", ".join(f"{name} ({n})" for name, n in classes.most_common(4)))
    return "\n".join(lines)


def _share(count: int, total: int) -> str:
    return f"{count / total:.1%}" if total else "-"
