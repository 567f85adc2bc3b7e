"""The Helm chart (deploy/helm/meridian) rendered by helm itself, with its default values and with everything
on (ci/full-values.yaml), and every object it renders validated: Kubernetes' own kinds against the Kubernetes
API's schemas (kubernetes-validate), the Prometheus Operator's and KEDA's against their CRDs (vendored under
deploy/helm/validation/crds), Strimzi's against its CRDs as @kubernetes-models compiles them (node). Then
what the objects say is checked against the code: settings, modules, topics, users."""
from __future__ import annotations

import json
import subprocess
from functools import cache

import jsonschema
import kubernetes_validate
import pytest
import yaml

from shared.adapters import topics
from shared.settings import REPO_ROOT, KafkaSecurity, Settings

CHART = REPO_ROOT / "deploy/helm/meridian"
VALIDATION = REPO_ROOT / "deploy/helm/validation"
HELM = REPO_ROOT / "var/tools/helm"
#: the Kubernetes version the objects are validated for
KUBERNETES = "1.33"
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "prometheus-operator-v0.92.1/monitoring.coreos.com_servicemonitors.yaml",
        ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheus-operator-v0.92.1/monitoring.coreos.com_prometheusrules.yaml",
        ("keda.sh/v1alpha1", "ScaledObject"): "keda-v2.18.1/keda.sh_scaledobjects.yaml",
        ("keda.sh/v1alpha1", "TriggerAuthentication"): "keda-v2.18.1/keda.sh_triggerauthentications.yaml"}


@cache
def rendered(values: str | None) -> tuple[dict, ...]:
    if not HELM.is_file():
        pytest.fail(f"{HELM} is missing: `make test` builds it (make var/tools/helm)")
    command = [str(HELM), "template", "rel", str(CHART)] + (["-f", str(CHART / values)] if values else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def of_kind(docs: tuple[dict, ...], kind: str) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind]


def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """The CRD's own schema for ``api_version``. Its patterns are Go's (``^(?i)...``, which Python's ``re``
    refuses), so the schema is not itself checked, and a pattern is compiled only where a field uses it."""
    crd = yaml.safe_load((VALIDATION / "crds" / CRDS[api_version, kind]).read_text())
    version = api_version.split("/")[1]
    schema = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return jsonschema.Draft7Validator(schema)


def strimzi_errors(docs: list[dict]) -> dict[str, str | None]:
    if not (VALIDATION / "node_modules").is_dir():
        pytest.fail("Strimzi's schemas are not installed: `make test` does it (npm ci in deploy/helm/validation)")
    out = subprocess.run(["node", str(VALIDATION / "strimzi.mjs")], input="\n".join(json.dumps(d) for d in docs),
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return {f"{r['kind']}/{r['name']}": r["error"] for r in map(json.loads, out.splitlines())}


@pytest.mark.parametrize("values", [None, "ci/full-values.yaml"])
def test_every_object_is_valid_against_its_schema(values: str | None) -> None:
    docs = rendered(values)
    strimzi = [doc for doc in docs if doc["apiVersion"].startswith("kafka.strimzi.io/")]
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            crd_validator(doc["apiVersion"], doc["kind"]).validate(doc)
        elif doc not in strimzi:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    assert not {name: error for name, error in strimzi_errors(strimzi).items() if error}
    kinds = {doc["kind"] for doc in docs}
    if values:
        assert kinds >= {"StatefulSet", "Deployment", "Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser",
                         "ServiceMonitor", "PrometheusRule", "ScaledObject"}


def test_the_validators_refuse_a_broken_object() -> None:
    """What the test above runs can fail: a mistyped field in each kind of object is refused."""
    docs = rendered("ci/full-values.yaml")
    statefulset = json.loads(json.dumps(of_kind(docs, "StatefulSet")[0]))
    statefulset["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES, strict=True)
    monitor = json.loads(json.dumps(of_kind(docs, "ServiceMonitor")[0]))
    monitor["spec"]["endpoints"][0]["interval"] = 15
    with pytest.raises(jsonschema.ValidationError):
        crd_validator(monitor["apiVersion"], "ServiceMonitor").validate(monitor)
    user = json.loads(json.dumps(of_kind(docs, "KafkaUser")[0]))
    user["spec"]["authentication"]["type"] = "scram-sha-256-typo"
    assert "authentication" in (strimzi_errors([user])[f"KafkaUser/{user['metadata']['name']}"] or "")


def test_settings_are_ones_the_code_reads_and_commands_are_modules_that_exist(monkeypatch: pytest.MonkeyPatch
                                                                              ) -> None:
    docs = rendered("ci/full-values.yaml")
    fields = {f"MERIDIAN_{name.upper()}" for name in Settings.model_fields} | {
        f"MERIDIAN_KAFKA_{name.upper()}" for name in KafkaSecurity.model_fields}
    (settings,) = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-settings")]
    assert set(settings["data"]) <= fields
    for name, value in settings["data"].items():  # and parse, as a pod's environment
        monkeypatch.setenv(name, value)
    assert Settings().applications == {"digits": ["digits"], "vision": ["efficientnet-lite"]}
    for workload in of_kind(docs, "StatefulSet") + of_kind(docs, "Deployment"):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        assert container["command"][:2] == ["python", "-m"]
        module = REPO_ROOT.joinpath(*container["command"][2].split("."))
        assert (module / "__main__.py").is_file() or module.with_suffix(".py").is_file(), container["command"]
        env = {e["name"] for e in container["env"]}
        assert {"MERIDIAN_KAFKA_BOOTSTRAP", "MERIDIAN_KAFKA_SASL_PASSWORD", "MERIDIAN_KAFKA_SSL_CAFILE"} <= env
        assert env <= fields | {"POD_NAME"}


def test_the_autoscaler_makes_its_machines_from_the_pools_of_their_devices_and_may_do_no_more() -> None:
    docs = rendered("ci/full-values.yaml")
    (deployment,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rel-autoscaler"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MERIDIAN_AUTOSCALER_LAUNCHER"] == "kubernetes"
    pools = json.loads(env["MERIDIAN_KUBERNETES_WORKER_POOLS"])
    assert pools == {"cpu-2t": "rel-worker-cpu", "g4dn-emu": "rel-worker-emu"}
    assert set(pools.values()) <= {s["metadata"]["name"] for s in of_kind(docs, "StatefulSet")}
    (role,) = of_kind(docs, "Role")
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]} == {
        (("statefulsets",), ("get",)), (("pods",), ("get", "create", "delete"))}
    (scraped,) = [s for s in of_kind(docs, "Service") if s["metadata"]["name"] == "rel-autoscaled-workers"]
    assert scraped["spec"]["selector"] == {"app.kubernetes.io/instance": "rel", "meridian.io/autoscaled": "true"}


def test_keda_reads_the_lag_as_a_user_of_its_own_over_tls() -> None:
    docs = rendered("ci/full-values.yaml")
    (trigger,) = of_kind(docs, "ScaledObject")[0]["spec"]["triggers"]
    assert trigger["metadata"]["sasl"] == "scram_sha512" and trigger["metadata"]["tls"] == "enable"
    (auth,) = of_kind(docs, "TriggerAuthentication")
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {"username", "password", "ca"}
    (keda,) = [u for u in of_kind(docs, "KafkaUser") if u["metadata"]["name"] == "rel-keda"]
    assert {(a["resource"]["type"], a["resource"]["name"], tuple(a["operations"]))
            for a in keda["spec"]["authorization"]["acls"]} == {("topic", "meridian.queries", ("Describe",)),
                                                                ("group", "meridian-scheduler", ("Describe",))}


def test_schedulers_and_workers_are_named_by_their_pods() -> None:
    docs = rendered(None)
    scheduler, worker = sorted(of_kind(docs, "StatefulSet"), key=lambda s: s["metadata"]["name"])
    (container,) = scheduler["spec"]["template"]["spec"]["containers"]
    instance = next(e for e in container["env"] if e["name"] == "MERIDIAN_SCHEDULER_INSTANCE")
    assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert container["command"][container["command"].index("--worker-id") + 1] == "$(POD_NAME)"


def test_strimzi_makes_the_core_topics_and_a_scram_sha_512_user_per_component() -> None:
    docs = rendered("ci/full-values.yaml")
    applications = {"digits": ["digits"], "vision": ["efficientnet-lite"]}
    expected = {(t.name, t.partitions) for t in topics.core_topics(Settings(applications=applications))}
    assert {(t["spec"]["topicName"], t["spec"]["partitions"]) for t in of_kind(docs, "KafkaTopic")} == expected
    users = {u["metadata"]["name"].removeprefix("rel-"): u["spec"] for u in of_kind(docs, "KafkaUser")}
    assert set(users) == {"scheduler", "planner", "autoscaler", "registry", "gateway", "worker-cpu", "worker-gpu",
                          "worker-emu", "client-digits", "client-vision", "keda"}
    assert all(spec["authentication"]["type"] == "scram-sha-512" for spec in users.values())
    client = {(a["resource"]["name"], op) for a in users["client-digits"]["authorization"]["acls"]
              for op in a["operations"]}
    assert ("meridian.results.digits", "Read") in client and ("meridian.results.vision", "Read") not in client
    worker = users["worker-cpu"]["authorization"]["acls"]
    assert any(a["resource"] == {"type": "topic", "name": topics.dispatch_topic(""), "patternType": "prefix"}
               and "Read" in a["operations"] for a in worker)


def test_the_charts_rules_and_dashboards_are_the_generated_ones() -> None:
    sources = [*(REPO_ROOT / "infra/prometheus/rules").glob("*.yml"),
               *(REPO_ROOT / "infra/grafana/provisioning/dashboards").glob("*.json")]
    assert {p.name for p in (CHART / "files").iterdir()} == {p.name for p in sources}, "a stale copy in files/"
    for source in sources:
        assert (CHART / "files" / source.name).read_text() == source.read_text(), (
            f"deploy/helm/meridian/files/{source.name} differs from {source}: `make dashboards` copies it")
    rule = of_kind(rendered("ci/full-values.yaml"), "PrometheusRule")[0]
    names = {r.get("alert") or r.get("record") for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "MeridianSLOBurnRateFast" in names
