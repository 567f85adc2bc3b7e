"""INFaaS end to end: register two models of one application through Kafka, then send model-less queries
with different accuracy goals to an `infaas` scheduler; each is answered by a variant meeting its goal."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from schemas import ResultStatus
from services.launcher import LocalLauncher, metrics_text, read_metric, wait_until
from services.registry.cli import build_request, request_registration
from shared.adapters.client import MeridianClient
from shared.settings import REPO_ROOT
from tests.integration.helpers import digits_rows, make_query

pytestmark = pytest.mark.integration

APP = f"infapp-{uuid.uuid4().hex[:6]}"
MODELS = {"small": REPO_ROOT / "var/models/digits-mlp-s.onnx", "large": REPO_ROOT / "var/models/digits-cnn-m.onnx"}


@pytest.fixture(scope="module")
def infaas(stack, settings, tmp_path_factory) -> Iterator[dict[str, float]]:
    """Registry, an infaas scheduler and two workers sharing one model repository; returns variant accuracies."""
    root = tmp_path_factory.mktemp("infaas")
    env = {"MERIDIAN_MODELS_DIR": str(root / "models"), "MERIDIAN_PROFILES_DIR": str(root / "profiles"),
           "MERIDIAN_APPLICATIONS": "{}"}
    with LocalLauncher(stack.env, root / "logs") as launcher:
        registry = launcher.start_registry(metrics_port=19321, extra_env=env)
        wait_until(lambda: read_metric(19321, "meridian_registry_ready") == 1.0, 60, "the registry", [registry])
        accuracy: dict[str, float] = {}
        for size, path in MODELS.items():
            request = build_request(model_name=f"inf{size}-{APP}", app_id=APP, model_file=path,
                                    validation_set=REPO_ROOT / "var/models/digits-test.npz", input_shape=[1, 8, 8],
                                    slo_ms=100.0)
            reply = request_registration(settings, request, timeout_s=120)
            assert reply is not None and reply.status == "registered", reply
            accuracy.update({v.variant: v.accuracy for v in reply.variants})
        scheduler = launcher.start_scheduler(metrics_port=19322, policy="infaas", extra_env=env)
        for index in (1, 2):
            launcher.start_worker(f"inf-w{index}", variants=[], metrics_port=19322 + index, extra_env=env)
        launcher.wait_for_workers(scheduler, 2, timeout_s=90)
        wait_until(lambda: f'application="{APP}"' in metrics_text(19322), 30,
                   "the scheduler to learn the registered application from the metadata store", [scheduler])
        yield accuracy


@pytest.mark.parametrize("floor", [None, 0.99])
def test_model_less_queries_are_served_by_variants_meeting_their_goals(infaas, settings, floor) -> None:
    x, y = digits_rows()
    queries = [make_query(x[i:i + 1], application=APP, model=None, accuracy_floor=floor, slo_ms=1000.0)
               for i in range(40)]
    with MeridianClient(settings, applications=[APP]) as client:
        for query in queries:
            client.send(query)
        client.flush()
        assert client.wait_for([q.query_id for q in queries], timeout_s=90)
        results = [client.results[q.query_id][0] for q in queries]
    assert {r.status for r in results} == {ResultStatus.OK}, {r.reason for r in results}
    served = {r.variant for r in results}
    assert served <= set(infaas), f"served by variants the registry never made: {served - set(infaas)}"
    if floor is not None:
        assert all(infaas[r.variant] >= floor for r in results), {r.variant: infaas[r.variant] for r in results}
    assert all(r.note is None for r in results)


def test_an_unreachable_accuracy_goal_gets_the_closest_variant_with_a_note(infaas, settings) -> None:
    x, _ = digits_rows()
    query = make_query(x[:1], application=APP, model=None, accuracy_floor=1.0, slo_ms=1000.0)
    best = max(infaas.values())
    if best >= 1.0:
        pytest.skip("a registered variant is perfect on the validation set; no goal is unreachable")
    with MeridianClient(settings, applications=[APP]) as client:
        client.send(query)
        client.flush()
        assert client.wait_for([query.query_id], timeout_s=60)
        result = client.results[query.query_id][0]
    assert result.status is ResultStatus.OK
    assert infaas[result.variant] == best and "served the closest" in result.note
