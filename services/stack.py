"""Start and stop the local stack (Kafka, Redis, Prometheus) through the same scripts ``make`` uses.

Used by ``make demo``, the integration-test fixtures and the benchmarks, each with its own ports and
state directory so they never touch each other's broker.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from shared.settings import REPO_ROOT, Settings

SCRIPTS = {
    "kafka": REPO_ROOT / "infra/kafka/kafka.sh",
    "redis": REPO_ROOT / "infra/redis/redis.sh",
    "prometheus": REPO_ROOT / "infra/prometheus/prometheus.sh",
}


@dataclass
class LocalStack:
    var_dir: Path
    kafka_port: int = 9092
    #: Kafka nodes (``infra/kafka/kafka.sh``): node i listens on ``kafka_port + 2 (i - 1)``; topics get
    #: min(3, n) replicas
    kafka_brokers: int = 1
    redis_port: int = 6379
    prometheus_port: int = 9090
    components: tuple[str, ...] = ("kafka", "redis", "prometheus")
    #: more ``MERIDIAN_*`` settings for the stack's scripts and processes (SASL, Redis AUTH ...)
    extra_env: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Settings) -> "LocalStack":
        """The stack the settings point at (a user's ``var/`` and ports)."""
        first = settings.kafka_bootstrap.split(",")[0]
        return cls(var_dir=settings.var_dir, kafka_port=int(first.rsplit(":", 1)[1]),
                   kafka_brokers=settings.kafka_brokers, redis_port=urlsplit(settings.redis_url).port or 6379,
                   prometheus_port=settings.prometheus_port)

    @property
    def env(self) -> dict[str, str]:
        """The environment every process of this stack runs with."""
        return {
            **os.environ,
            "MERIDIAN_VAR_DIR": str(self.var_dir),
            "MERIDIAN_KAFKA_PORT": str(self.kafka_port),
            "MERIDIAN_KAFKA_CONTROLLER_PORT": str(self.kafka_port + 1),
            "MERIDIAN_KAFKA_BROKERS": str(self.kafka_brokers),
            "MERIDIAN_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "MERIDIAN_REDIS_PORT": str(self.redis_port),
            "MERIDIAN_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "MERIDIAN_PROMETHEUS_PORT": str(self.prometheus_port),
            **self.extra_env,
        }

    @property
    def kafka_bootstrap(self) -> str:
        """Every node's listener: a client that knows them all bootstraps while any one is up."""
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_node_ports)

    @property
    def kafka_node_ports(self) -> list[int]:
        return [self.kafka_port + 2 * i for i in range(self.kafka_brokers)]

    def kafka_node_pid(self, node_id: int) -> int | None:
        """The process id of Kafka node ``node_id`` (1-based, as its ``node.id``), if it runs."""
        state = self.var_dir / f"kafka-{self.kafka_port}"
        pidfile = (state if self.kafka_brokers == 1 else state / f"node-{node_id}") / "kafka.pid"
        try:
            return int(pidfile.read_text())
        except (OSError, ValueError):
            return None

    def settings(self) -> Settings:
        return Settings(kafka_bootstrap=self.kafka_bootstrap,
                        redis_url=f"redis://127.0.0.1:{self.redis_port}/0", var_dir=self.var_dir)

    def start(self) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        for name in self.components:
            if self.running(name):
                continue  # someone else's running instance: use it, never stop it
            self._script(name, "start")
            self.started.append(name)

    def running(self, name: str) -> bool:
        return self._script(name, "status", check=False).returncode == 0

    def shut_down(self) -> None:
        """Stop every component, whoever started it (``meridian stack down``)."""
        for name in reversed(self.components):
            self._script(name, "stop", check=False)
        self.started.clear()

    def state_dirs(self) -> list[Path]:
        """Where the components keep their data (topics, Redis, Prometheus' series) under ``var_dir``."""
        ports = {"kafka": self.kafka_port, "redis": self.redis_port, "prometheus": self.prometheus_port}
        return [self.var_dir / f"{name}-{ports[name]}" for name in self.components]

    def stop(self) -> None:
        """Stop only what this object started."""
        for name in reversed(self.started):
            self._script(name, "stop", check=False)
        self.started.clear()

    def repair(self, name: str) -> None:
        """Start again whatever of ``name`` died (a killed Kafka node rejoins its cluster), keeping its data."""
        self._script(name, "start")

    def restart(self, name: str, *, down_s: float) -> None:
        """Stop ``name`` and start it again ``down_s`` later, keeping its data (fault drills)."""
        self._script(name, "stop")
        time.sleep(down_s)
        self._script(name, "start")

    def _script(self, name: str, action: str, *, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(["bash", str(SCRIPTS[name]), action], env=self.env, capture_output=True,
                                text=True, timeout=180)
        if check and result.returncode != 0:
            raise RuntimeError(f"{name} {action} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def __enter__(self) -> "LocalStack":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
