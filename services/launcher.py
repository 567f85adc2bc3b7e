"""Start, watch and stop Meridian's services as local processes, on this machine's network or on a host
of the rig (`services.rig`: a network namespace with an address of its own).

A "machine" here is a process: the launcher is what an autoscaler or a plan applier calls to add or
remove a worker; a cloud or Kubernetes launcher would implement the same methods.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.settings import REPO_ROOT


#: where Meridian's image (infra/docker/Dockerfile) keeps its Python and its code
IMAGE_PYTHON, IMAGE_WORKDIR = "/opt/meridian/bin/python", "/app"


@dataclass(frozen=True)
class Host:
    """Where a launcher's processes run and are reached: this machine's loopback (`LOCAL`), or a rig host's
    network namespace and address; with ``image_root``, inside a container's file system (Meridian's image,
    mounted there), as its Python from its working directory."""

    name: str
    address: str
    netns: str | None = None
    image_root: Path | None = None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` (a Python command: this interpreter first) as run on this host."""
        if self.image_root is not None:
            argv = ["chroot", str(self.image_root), "/bin/sh", "-c", f'cd {IMAGE_WORKDIR} && exec "$@"', "sh",
                    IMAGE_PYTHON, *argv[1:]]
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else argv


LOCAL = Host("local", "127.0.0.1")


@dataclass
class ManagedProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path
    metrics_port: int
    #: the Prometheus file_sd entry that makes this process a scrape target
    target_file: Path
    #: the address its metrics (and a gateway's ports) listen on
    address: str = LOCAL.address

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        self.target_file.unlink(missing_ok=True)
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL, as a crash would; Prometheus keeps the target so it sees it down."""
        if self.alive():
            self.popen.kill()
            self.popen.wait(timeout=5)

    def status_kb(self, field: str) -> int:
        """A memory line of the process's ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``: the peak), in kB."""
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise ValueError(f"/proc/{self.popen.pid}/status has no {field} line")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def metrics_text(port: int, address: str = LOCAL.address) -> str:
    """The text exposition of a metrics endpoint, local unless ``address`` says ('' if unreachable)."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return ""


def _status(url: str) -> int | None:
    """The HTTP status ``url`` answers (None: nothing answers there)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def read_metric(port: int, name: str, address: str = LOCAL.address) -> float | None:
    """Sum of every sample of ``name`` on a metrics endpoint (None if unreachable or absent)."""
    values = [float(line.rsplit(" ", 1)[1]) for line in metrics_text(port, address).splitlines()
              if line.startswith(name) and (line[len(name)] in " {")]
    return sum(values) if values else None


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str,
               watched: list[ManagedProcess] = ()) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        for process in watched:
            if not process.alive():
                raise RuntimeError(f"{process.name} exited while waiting for {what}:\n{process.log_tail()}")
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")


class LocalLauncher:
    """Processes on ``host``: this machine's loopback by default; on a rig host each listens on the host's
    address (``MERIDIAN_BIND_HOST``) and finds the others by the addresses ``env`` gives it."""

    def __init__(self, env: dict[str, str], log_dir: Path, host: Host = LOCAL) -> None:
        self.host = host
        self.env = env if host.netns is None else {**env, "MERIDIAN_BIND_HOST": host.address}
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, ManagedProcess] = {}

    def start_scheduler(self, *, metrics_port: int = 9101, policy: str | None = None,
                        extra_env: dict[str, str] | None = None, name: str = "scheduler") -> ManagedProcess:
        """A scheduler process; several (each its own ``name`` and port) split the applications between them.
        ``name`` is its lasting name in the consumer group too: started again under it, it takes its
        partitions back at once."""
        env = {"MERIDIAN_SCHEDULER_METRICS_PORT": str(metrics_port), "MERIDIAN_SCHEDULER_INSTANCE": name,
               **(extra_env or {})}
        if policy:
            env["MERIDIAN_SCHEDULER_POLICY"] = policy
        return self.start_service(name, "services.scheduler", metrics_port=metrics_port, extra_env=env)

    def start_worker(self, worker_id: str, *, variants: list[str], metrics_port: int,
                     emulate: str | None = None, profile_source: str = "dir",
                     max_batch: int | None = None, ready_at: float | None = None, threads: int | None = None,
                     provider: str | None = None, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        args = ["--worker-id", worker_id, "--variants", ",".join(variants), "--metrics-port", str(metrics_port),
                "--profile-source", profile_source]
        if emulate:
            args += ["--emulate", emulate]
        if threads is not None:
            args += ["--threads", str(threads)]
        if provider is not None:
            args += ["--provider", provider]
        if ready_at is not None:
            args += ["--ready-at", f"{ready_at:.3f}"]
        if max_batch:
            args += ["--max-batch", str(max_batch)]
        return self.start_service(f"worker-{worker_id}", "services.worker", *args, metrics_port=metrics_port,
                                  extra_env=extra_env)

    def start_registry(self, *, metrics_port: int, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        return self.start_service("registry", "services.registry", "--metrics-port", str(metrics_port),
                                  metrics_port=metrics_port, extra_env=extra_env)

    def start_planner(self, *, metrics_port: int, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        env = {"MERIDIAN_PLANNER_METRICS_PORT": str(metrics_port), **(extra_env or {})}
        return self.start_service("planner", "services.planner", metrics_port=metrics_port, extra_env=env)

    def start_fleet(self, *, metrics_port: int, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        env = {"MERIDIAN_FLEET_METRICS_PORT": str(metrics_port), **(extra_env or {})}
        return self.start_service("fleet", "services.fleet", metrics_port=metrics_port, extra_env=env)

    def start_gateway(self, *, port: int, grpc_port: int | None = None, name: str = "gateway",
                      extra_env: dict[str, str] | None = None, timeout_s: float = 60.0) -> ManagedProcess:
        """An Open Inference Protocol gateway, REST on ``port`` (its ``/metrics`` too) and gRPC on
        ``grpc_port`` (None: no gRPC door), once it is ready."""
        gateway = self.start_service(name, "services.gateway", "--port", str(port), "--grpc-port", str(grpc_port or 0),
                                     metrics_port=port, extra_env=extra_env)
        wait_until(lambda: _status(f"http://{self.host.address}:{port}/v2/health/ready") == 200, timeout_s,
                   f"{name} to be ready", [gateway])
        return gateway

    def start_service(self, name: str, module: str, *args: str, metrics_port: int,
                      extra_env: dict[str, str] | None = None) -> ManagedProcess:
        """``python -m module args`` as process ``name``, logging to ``<log_dir>/<name>.log``."""
        return self._start(name, [sys.executable, "-m", module, *args], {**self.env, **(extra_env or {})},
                           metrics_port)

    def stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def wait_for_workers(self, scheduler: ManagedProcess, count: int, timeout_s: float = 60.0) -> None:
        """Healthy = the scheduler is up and sees ``count`` live workers."""
        wait_until(lambda: (read_metric(scheduler.metrics_port, "meridian_scheduler_workers", scheduler.address)
                            or 0) >= count,
                   timeout_s, f"the scheduler to see {count} workers", list(self.processes.values()))

    def _start(self, name: str, command: list[str], env: dict[str, str], metrics_port: int) -> ManagedProcess:
        if name in self.processes and self.processes[name].alive():
            raise RuntimeError(f"{name} is already running")
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        popen = subprocess.Popen(self.host.command(command), cwd=REPO_ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        target_file = Path(env.get("MERIDIAN_VAR_DIR", REPO_ROOT / "var")) / "prometheus" / "targets" / f"{name}.json"
        target_file.parent.mkdir(parents=True, exist_ok=True)
        target_file.write_text(json.dumps([{"targets": [f"{self.host.address}:{metrics_port}"],
                                            "labels": {"service": name.split("-")[0], "process": name}}]))
        process = ManagedProcess(name, popen, log_path, metrics_port, target_file, self.host.address)
        self.processes[name] = process
        return process

    def __enter__(self) -> "LocalLauncher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
