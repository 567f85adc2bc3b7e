"""Fixtures that start the real stack: Apache Kafka (KRaft) and Redis on test ports, then services.

Everything binds to 127.0.0.1, waits for health with a timeout, and is stopped by the fixture that
started it.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.profiles import ProfileSet
from shared.settings import REPO_ROOT, Settings

KAFKA_PORT = int(os.environ.get("MERIDIAN_TEST_KAFKA_PORT", "19092"))
REDIS_PORT = int(os.environ.get("MERIDIAN_TEST_REDIS_PORT", "16379"))
#: never Prometheus' default 9090, which a running ``make demo`` or stack holds
PROMETHEUS_PORT = int(os.environ.get("MERIDIAN_TEST_PROMETHEUS_PORT", "19090"))
DIGITS_PROFILE = REPO_ROOT / "profiles" / "digits.json"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    local = LocalStack(var_dir=tmp_path_factory.mktemp("var"), kafka_port=KAFKA_PORT, redis_port=REDIS_PORT,
                       prometheus_port=PROMETHEUS_PORT)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def stack_env(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands read their settings from the environment, as an operator's shell gives them: this stack's."""
    for name, value in stack.env.items():
        if name.startswith("MERIDIAN_"):
            monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def settings(stack: LocalStack) -> Settings:
    return stack.settings()


@pytest.fixture(scope="session")
def digits_variants() -> list[str]:
    """The project's digits family, fastest first (built by ``make models``)."""
    if not DIGITS_PROFILE.exists() or not (REPO_ROOT / "var/models/digits-test.npz").exists():
        pytest.fail("the digits models are not built: run `make models` (make test does)")
    profiles = ProfileSet.load(DIGITS_PROFILE)
    return [p.variant for p in sorted(profiles.variants, key=lambda p: p.latency_ms(1))]


@pytest.fixture(scope="module")
def pipeline(stack: LocalStack, digits_variants: list[str], tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[LocalLauncher]:
    """A scheduler and two real onnxruntime workers, as processes, healthy."""
    launcher = LocalLauncher(stack.env, tmp_path_factory.mktemp("logs"))
    try:
        scheduler = launcher.start_scheduler(metrics_port=19301)
        launcher.start_worker("it-w1", variants=digits_variants[:2], metrics_port=19302)
        launcher.start_worker("it-w2", variants=digits_variants[:2], metrics_port=19303)
        launcher.wait_for_workers(scheduler, 2, timeout_s=90)
        yield launcher
    finally:
        launcher.stop_all()


