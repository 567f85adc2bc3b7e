"""Meridian on hosts of its own, all on this machine: each host a network namespace with an address of its
own on one bridge (`infra/hosts/rig.sh`), three Kafka nodes on three hosts as one KRaft cluster, Redis on
another, and a launcher per host for the services.

Every process is configured by addresses alone: the brokers' and Redis' addresses in its environment, its
own in ``MERIDIAN_BIND_HOST``. A process that still dials 127.0.0.1 for a peer reaches its own host's
loopback, where nothing listens, so the rig finds it. This process (a client, the test or bench driving
the rig) is the host the bridge itself is: the subnet's ``.1``. Taking a host's link down (`HostsRig.cut`)
is a network partition of that host: its processes live on, and reach nothing, and nothing reaches them.
Needs root (network namespaces).

``secure`` (the default): every link to and between the brokers is TLS, with certificates the rig makes for each broker's
address: clients and replication speak SASL_SSL with SCRAM-SHA-512 (what Strimzi's users speak), the
controllers mutual TLS, and the brokers enforce ACLs. The services run as the one service user (a super
user); this process is a client of application ``digits`` (`CLIENT_APPLICATION`) with only the ACLs the
deployment table of ``docs/guarantees.md`` gives such a client.
"""
from __future__ import annotations

import base64
import dataclasses
import os
import secrets
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from services.launcher import Host, LocalLauncher
from shared.adapters import topics
from shared.settings import REPO_ROOT, KafkaSecurity, Settings

RIG = REPO_ROOT / "infra/hosts/rig.sh"
KAFKA = REPO_ROOT / "infra/kafka/kafka.sh"
REDIS = REPO_ROOT / "infra/redis/redis.sh"

#: host name -> the last part of its address: three brokers, Redis, two schedulers, two workers
HOSTS = {"kafka1": 11, "kafka2": 12, "kafka3": 13, "redis": 20, "sched1": 31, "sched2": 32,
         "worker1": 41, "worker2": 42}
BROKERS = ("kafka1", "kafka2", "kafka3")
#: the application whose client this process is on a secure rig
CLIENT_APPLICATION = "digits"


def rig_usable() -> str | None:
    """None where the rig can be made here, else why not (not root, no ``ip``)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


@dataclass
class HostsRig:
    """The rig's hosts with Kafka and Redis on theirs, up while the object is entered."""

    root: Path
    #: namespaces are ``<prefix>-<host>``: a test and a bench each take their own
    prefix: str = "mrd"
    subnet: str = "10.77.0"
    kafka_port: int = 9092
    redis_port: int = 6379
    redis_password: str = field(default_factory=lambda: secrets.token_hex(12))
    secure: bool = True
    service_user: str = "meridian"
    service_password: str = field(default_factory=lambda: secrets.token_hex(12))
    client_user: str = f"client-{CLIENT_APPLICATION}"
    client_password: str = field(default_factory=lambda: secrets.token_hex(12))
    _up: list[str] = field(default_factory=list)

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    def host(self, name: str) -> Host:
        return Host(name, f"{self.subnet}.{HOSTS[name]}", f"{self.prefix}-{name}")

    @property
    def client_address(self) -> str:
        """This process's address on the rig (the bridge's)."""
        return f"{self.subnet}.1"

    @property
    def kafka_bootstrap(self) -> str:
        return ",".join(f"{self.host(b).address}:{self.kafka_port}" for b in BROKERS)

    @property
    def redis_url(self) -> str:
        return f"redis://:{self.redis_password}@{self.host('redis').address}:{self.redis_port}/0"

    def env(self, host: str) -> dict[str, str]:
        """What a process on ``host`` runs with: the peers' addresses (and on a secure rig, the service user
        and the CA), and a state directory of its host's."""
        env = {**os.environ, "MERIDIAN_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
               "MERIDIAN_KAFKA_BROKERS": str(len(BROKERS)), "MERIDIAN_REDIS_URL": self.redis_url,
               "MERIDIAN_VAR_DIR": str(self.root / "hosts" / host)}
        if self.secure:
            env.update(MERIDIAN_KAFKA_SECURITY_PROTOCOL="SASL_SSL", MERIDIAN_KAFKA_SASL_MECHANISM="SCRAM-SHA-512",
                       MERIDIAN_KAFKA_SASL_USERNAME=self.service_user, MERIDIAN_KAFKA_SASL_PASSWORD=self.service_password,
                       MERIDIAN_KAFKA_SSL_CAFILE=str(self.tls_dir / "ca.pem"))
        return env

    def settings(self, *, as_service: bool = False) -> Settings:
        """This process's (the client host's) settings: on a secure rig, as `CLIENT_APPLICATION`'s client
        unless ``as_service``."""
        security = KafkaSecurity()
        if self.secure:
            user, password = ((self.service_user, self.service_password) if as_service
                              else (self.client_user, self.client_password))
            security = KafkaSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username=user,
                                     sasl_password=password, ssl_cafile=str(self.tls_dir / "ca.pem"))
        return Settings(kafka_bootstrap=self.kafka_bootstrap, kafka_brokers=len(BROKERS), redis_url=self.redis_url,
                        var_dir=self.root / "hosts" / "client", kafka_security=security)

    def launcher(self, host: str, *, image_root: Path | None = None) -> LocalLauncher:
        """A launcher of services on ``host`` (inside the container file system ``image_root`` if given);
        its processes log under ``<root>/logs``."""
        return LocalLauncher(self.env(host), self.root / "logs", dataclasses.replace(self.host(host), image_root=image_root))

    def cut(self, host: str) -> None:
        """``host``'s link down: nothing in or out until `heal`."""
        self._rig("cut", host)

    def heal(self, host: str) -> None:
        self._rig("heal", host)

    def __enter__(self) -> "HostsRig":
        reason = rig_usable()
        if reason is not None:
            raise RuntimeError(f"the rig cannot be made here: {reason}")
        self._rig("down")  # what a killed run of this prefix left behind (its namespaces; not its processes)
        try:
            self._rig("up", *(f"{name}={self.host(name).address}" for name in HOSTS))
            if self.secure:
                self._rig("certs", str(self.tls_dir), *(f"{name}={self.host(name).address}" for name in BROKERS))
            self._start_kafka()
            if self.secure:
                self._grant_client()
            self._on("redis", REDIS, "start", MERIDIAN_REDIS_HOST=self.host("redis").address,
                     MERIDIAN_REDIS_PORT=str(self.redis_port), MERIDIAN_REDIS_PASSWORD=self.redis_password)
            self._up.append("redis")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if "redis" in self._up:
                self._on("redis", REDIS, "stop", check=False, MERIDIAN_REDIS_HOST=self.host("redis").address,
                         MERIDIAN_REDIS_PORT=str(self.redis_port), MERIDIAN_REDIS_PASSWORD=self.redis_password)
            for stop in [self._kafka_node(i, "stop") for i, _ in enumerate(BROKERS, 1)]:
                try:
                    stop.communicate(timeout=90)
                except subprocess.TimeoutExpired:
                    stop.kill()
                    stop.communicate()
        finally:
            self._up.clear()
            # whatever of Kafka and Redis outlived its stop (its command line names its state under root)
            subprocess.run(["pkill", "-9", "-f", f"{self.root}/hosts/"], capture_output=True)
            self._rig("down")

    def _start_kafka(self) -> None:
        """The three nodes at once (a node is healthy only once a quorum has formed)."""
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        starts = [self._kafka_node(i, "start", cluster_id) for i, _ in enumerate(BROKERS, 1)]
        failed = []
        for i, start in enumerate(starts, 1):
            try:
                out = start.communicate(timeout=180)[0]
            except subprocess.TimeoutExpired:
                for other in starts:
                    other.kill()
                    other.communicate()
                raise RuntimeError(f"kafka node {i} did not start on the rig within 180 s") from None
            if start.returncode != 0:
                failed.append((i, out))
        if failed:
            raise RuntimeError("kafka did not start on the rig:\n" + "\n".join(f"node {i}: {out}" for i, out in failed))

    def _grant_client(self) -> None:
        """`CLIENT_APPLICATION`'s client: its queries in, its results out, nothing else."""
        from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType

        from shared.adapters.kafka_io import make_admin

        grants = [(topics.QUERIES, ACLOperation.WRITE), (topics.results_topic(CLIENT_APPLICATION), ACLOperation.READ),
                  (topics.RESULTS, ACLOperation.READ)]
        admin = make_admin(self.settings(as_service=True))
        try:
            admin.create_acls([ACL(f"User:{self.client_user}", "*", operation, ACLPermissionType.ALLOW,
                                   ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
                               for topic, granted in grants for operation in (granted, ACLOperation.DESCRIBE)])
        finally:
            admin.close()

    def _kafka_node(self, node: int, action: str, cluster_id: str = "") -> subprocess.Popen:
        name = BROKERS[node - 1]
        env = {**self.env(name), "MERIDIAN_KAFKA_PORT": str(self.kafka_port),
               "MERIDIAN_KAFKA_HOSTS": ",".join(self.host(b).address for b in BROKERS),
               "MERIDIAN_KAFKA_NODE": str(node), "MERIDIAN_KAFKA_CLUSTER_ID": cluster_id}
        if self.secure:
            env.update(MERIDIAN_KAFKA_TLS_KEYSTORE=str(self.tls_dir / f"{name}.pem"),
                       MERIDIAN_KAFKA_TLS_CA=str(self.tls_dir / "ca.pem"), MERIDIAN_KAFKA_AUTHORIZER="1",
                       MERIDIAN_KAFKA_SUPER_USERS=";".join(f"User:CN={b}" for b in BROKERS),
                       MERIDIAN_KAFKA_SCRAM_USERS=f"{self.client_user}:{self.client_password}")
        return subprocess.Popen(self.host(name).command(["bash", str(KAFKA), action]), env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def _on(self, host: str, script: Path, action: str, *, check: bool = True, **env: str) -> None:
        result = subprocess.run(self.host(host).command(["bash", str(script), action]), env={**self.env(host), **env},
                                capture_output=True, text=True, timeout=180)
        if check and result.returncode != 0:
            raise RuntimeError(f"{script.name} {action} on {host} failed:\n{result.stdout}\n{result.stderr}")

    def _rig(self, *args: str) -> None:
        subprocess.run(["bash", str(RIG), *args], check=True, capture_output=True, timeout=60,
                       env={**os.environ, "MERIDIAN_RIG_PREFIX": self.prefix, "MERIDIAN_RIG_SUBNET": self.subnet})
