"""docker-compose.yml cannot run here (no container engine runs containers on this machine): check it parses
and agrees with the code and the image (infra/docker/Dockerfile, which `make bench-image` builds)."""
from __future__ import annotations

import shlex

import yaml

from shared.profiles.sources import load_profile_dir
from shared.settings import REPO_ROOT, Settings

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
DEFAULTS = Settings(_env_file=None)


def env_of(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[name].get("environment") or {}).items()}


def published(name: str) -> set[int]:
    return {int(p.rsplit(":", 1)[1]) for p in SERVICES[name].get("ports", [])}


def test_the_stack_and_every_service_are_there() -> None:
    assert {"kafka", "redis", "prometheus", "grafana", "scheduler", "worker-1", "worker-2", "loadgen"} <= set(SERVICES)
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:4.")


def test_published_ports_are_loopback_only() -> None:
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_env_names_are_settings_the_code_reads() -> None:
    fields = {f"MERIDIAN_{name.upper()}" for name in Settings.model_fields}
    for name in ("scheduler", "worker-1", "worker-2", "loadgen"):
        unknown = set(env_of(name)) - fields
        assert not unknown, f"{name} sets env the code never reads: {unknown}"


def test_addresses_match_the_brokers_and_ports() -> None:
    assert env_of("scheduler")["MERIDIAN_KAFKA_BOOTSTRAP"] == f"kafka:{DEFAULTS.kafka_bootstrap.rsplit(':', 1)[1]}"
    assert env_of("scheduler")["MERIDIAN_REDIS_URL"].startswith("redis://redis:6379")
    assert 9092 in published("kafka") and 6379 in published("redis")
    assert int(env_of("scheduler")["MERIDIAN_SCHEDULER_METRICS_PORT"]) == DEFAULTS.scheduler_metrics_port
    assert DEFAULTS.scheduler_metrics_port in published("scheduler")


def test_workers_load_variants_that_exist_and_expose_their_metrics_port() -> None:
    known = {p.variant for p in load_profile_dir(REPO_ROOT / "profiles").variants}
    for name in ("worker-1", "worker-2"):
        command = SERVICES[name]["command"]
        args = dict(zip(command[3::2], command[4::2]))
        assert set(args["--variants"].split(",")) <= known, f"{name} loads unknown variants"
        assert int(args["--metrics-port"]) in published(name)


def test_prometheus_scrapes_every_service_metrics_port() -> None:
    config = yaml.safe_load((REPO_ROOT / "infra/prometheus/prometheus.compose.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for name in ("scheduler", "worker-1", "worker-2"):
        for port in published(name):
            assert f"{name}:{port}" in targets, f"prometheus does not scrape {name}:{port}"


def test_commands_are_python_modules_that_exist() -> None:
    for name in ("scheduler", "worker-1", "loadgen"):
        command = SERVICES[name]["command"]
        assert command[:2] == ["python", "-m"], shlex.join(command)
        assert (REPO_ROOT / command[2].replace(".", "/")).is_dir()


def test_services_build_the_images_runtime_target() -> None:
    dockerfile = (REPO_ROOT / "infra/docker/Dockerfile").read_text()
    for name in ("scheduler", "worker-1", "worker-2", "loadgen"):
        build = SERVICES[name]["build"]
        assert build["dockerfile"] == "infra/docker/Dockerfile" and build["target"] == "runtime"
        assert f"AS {build['target']}" in dockerfile
