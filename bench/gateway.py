"""``make bench-gateway``: Meridian's Open Inference Protocol gateway against Ray Serve, HTTP in and out, on
the same model, batching and load (issue #47).

Each system serves one replica of ``digits-cnn-l`` on onnxruntime with one intra-op thread, batching up
to 32 rows:

- **meridian**: the local stack (Kafka, Redis), one scheduler (``fcfs``: work-conserving, a batch of up to
  the worker's 32 rows as soon as the worker can take one), one real worker (``--threads 1 --max-batch
  32``), one gateway (REST);
- **ray-default** and **ray-fastest**: one Ray Serve deployment, one replica, ``@serve.batch(max_batch_size
  =32, batch_wait_timeout_s=0.002)``, behind Ray Serve's HTTP proxy (`bench.peer_ray`, in its own venv),
  in Ray's default mode and in its fastest (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``,
  ``RAY_SERVE_ENABLE_HA_PROXY=1``: HAProxy in front of the replica's own HTTP server).

Every request is the one tritonclient's HTTP client builds for one 1x1x8x8 FP32 row (binary tensor
extension, ``slo_ms: 100``), sent by an open-loop Poisson client (aiohttp, in this process: each request
leaves at its scheduled time whether or not earlier ones were answered; given up after `TIMEOUT_S`; one
short of CPU sends what it can by the last one's time). Per system: its capacity first (ok answers per
second of `CAPACITY_CALLERS` closed-loop callers), then 200 q/s, 1,000 q/s and 3x that capacity. Per
point: the added latency of each ok answer, (answer received - request sent) - its batch's compute
(``parameters.compute_ms``, which both answers carry), p50 / p99; the answered and ok counts; goodput
(ok answers within the 100 ms SLO per second) and, at the overload, over the capacity; and the
CPU-seconds per 1,000 requests of every server process (the broker, Redis, the scheduler, the worker,
the gateway; every process of the Ray cluster, its process tree), the load generator's apart. Beside
them, what tells the load generator's limits from the server's: how late it sent (p99), Meridian's own
latency (``parameters.latency_ms``, from the gateway's send to Kafka to its answer) and the machine's
TCP listen-queue overflows and SYN retransmissions.

Writes ``bench/results/gateway.json`` and ``bench/results/gateway.png``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np

from bench.common import RESULTS_DIR, cpu_seconds, save_figure, write_result
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.settings import REPO_ROOT, Settings
from shared.sim.arrivals import poisson_arrivals

MODEL = "digits-cnn-l"
MAX_BATCH = 32
#: Ray's ``batch_wait_timeout_s``; Meridian's batching does not wait (`shared.policy.fcfs`)
BATCH_WAIT_S = 0.002
SLO_MS = 100.0
RATES = (200.0, 1000.0)
#: the last point offers this many times the system's measured capacity
OVERLOAD = 3.0
#: a request unanswered this long is given up (its connection closed): twenty SLOs, long past any use
TIMEOUT_S = 2.0
#: closed-loop callers of the capacity run: two full batches in flight, as many as Ray's replica takes at
#: once (`bench.peer_ray`'s ``max_ongoing_requests``)
CAPACITY_CALLERS = 64
#: ... whose first second (connections opening, batches filling) is not counted
CAPACITY_RAMP_S = 1.0
#: after a point, the system is settled once this many answers in a row, one at a time, come within the SLO
SETTLED_ANSWERS = 5
SETTLE_MAX_S = 60.0
#: Ray Serve's modes: the environment each runs in
RAY_MODES = {"ray-default": {},
             "ray-fastest": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1"}}
SYSTEMS = ("meridian", *RAY_MODES)
PEER_PYTHON = REPO_ROOT / "var" / "peer" / "bin" / "python"
INFER_PATH = "/v2/models/digits/infer"
#: this bench's own ports (no other bench or test uses 277xx): a stack already listening on them would be
#: reused by `LocalStack`, so `free_ports` refuses to start instead
KAFKA_PORT, REDIS_PORT, PROMETHEUS_PORT = 27792, 27779, 27790
SCHEDULER_METRICS_PORT, WORKER_METRICS_PORT, GATEWAY_PORT = 27701, 27702, 27710
RAY_HTTP_PORT, HAPROXY_METRICS_PORT, HAPROXY_STATS_PORT, RAY_DASHBOARD_PORT = 27720, 27721, 27722, 27723
PORTS = (KAFKA_PORT, KAFKA_PORT + 1, REDIS_PORT, SCHEDULER_METRICS_PORT, WORKER_METRICS_PORT, GATEWAY_PORT,
         RAY_HTTP_PORT, HAPROXY_METRICS_PORT, HAPROXY_STATS_PORT, RAY_DASHBOARD_PORT)


@dataclass(frozen=True)
class System:
    """A system under test: where to send, and its server processes now (pid -> name), whose CPU counts."""

    name: str
    url: str
    processes: Callable[[], dict[int, str]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: when it was due and when it left (seconds from the point's start), what came back."""

    due_s: float
    sent_s: float
    #: None: no answer within `TIMEOUT_S`, or the connection failed
    status: int | None = None
    latency_ms: float | None = None
    compute_ms: float | None = None
    #: the latency the server itself reports (Meridian's ``parameters.latency_ms``: from the gateway's send to
    #: Kafka to its answer), if it does
    server_ms: float | None = None


# -- the requests and the load --------------------------------------------------------------------------

def oip_requests(count: int) -> list[tuple[bytes, dict[str, str]]]:
    """``count`` requests (body, headers) as tritonclient's HTTP client sends them, one test row each (binary
    tensor extension), asking for the answer as JSON."""
    import tritonclient.http as oip

    rows = np.load(Settings().models_dir / "digits-test.npz")["x"].astype(np.float32)
    requests = []
    for k in range(count):
        tensor = oip.InferInput("input", [1, *rows.shape[1:]], "FP32")
        tensor.set_data_from_numpy(rows[k % len(rows)][None], binary_data=True)
        body, json_size = oip.InferenceServerClient.generate_request_body(
            [tensor], outputs=[oip.InferRequestedOutput("predictions", binary_data=False)],
            parameters={"slo_ms": SLO_MS, "model": MODEL})
        requests.append((body, {"Inference-Header-Content-Length": str(json_size),
                                "Content-Type": "application/octet-stream"}))
    return requests


def http_session() -> aiohttp.ClientSession:
    """Keep-alive connections, as many as the requests in flight need (an open loop never waits for one)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))


async def call(session: aiohttp.ClientSession, url: str, request: tuple[bytes, dict[str, str]], due_s: float,
               began: float) -> Outcome:
    """Send one request and read its answer's status, latency and batch compute."""
    sent = time.perf_counter()
    try:
        async with session.post(url, data=request[0], headers=request[1]) as response:
            body = await response.read()
    except (asyncio.TimeoutError, aiohttp.ClientError):
        return Outcome(due_s, sent - began)
    latency_ms = (time.perf_counter() - sent) * 1000.0
    if response.status != 200:
        return Outcome(due_s, sent - began, response.status, latency_ms)
    parameters = json.loads(body)["parameters"]
    return Outcome(due_s, sent - began, response.status, latency_ms, parameters.get("compute_ms"),
                   parameters.get("latency_ms"))


async def open_loop(url: str, requests: list[tuple[bytes, dict[str, str]]], rate: float, duration_s: float,
                    seed: int) -> tuple[list[Outcome], int]:
    """Poisson arrivals at ``rate`` for ``duration_s``, each sent at its time; the outcomes once all are in,
    and how many were due. A load generator short of CPU sends late, and stops at the last one's due time:
    what it has not sent by then is not sent, so a point lasts its duration whatever the rate."""
    due = poisson_arrivals(rate, max(2, int(rate * duration_s)), np.random.default_rng(seed))
    async with http_session() as session:
        began = time.perf_counter()
        calls = []
        for index, offset in enumerate(due):
            delay = began + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif time.perf_counter() - began > due[-1]:
                break
            calls.append(asyncio.create_task(call(session, url, requests[index % len(requests)], offset, began)))
        return list(await asyncio.gather(*calls)), len(due)


async def closed_loop(url: str, requests: list[tuple[bytes, dict[str, str]]], callers: int,
                      duration_s: float) -> float:
    """Ok answers per second of ``callers`` callers, each sending its next request once its last is answered,
    over ``duration_s`` after `CAPACITY_RAMP_S`."""
    async with http_session() as session:
        began = time.perf_counter()
        start, end = began + CAPACITY_RAMP_S, began + CAPACITY_RAMP_S + duration_s

        async def caller(index: int) -> int:
            ok = 0
            while time.perf_counter() < end:
                outcome = await call(session, url, requests[index % len(requests)], 0.0, began)
                ok += outcome.status == 200 and start <= time.perf_counter() <= end
            return ok

        answered = await asyncio.gather(*(caller(k) for k in range(callers)))
    return sum(answered) / duration_s


async def settle(url: str, request: tuple[bytes, dict[str, str]]) -> float:
    """Seconds until `SETTLED_ANSWERS` requests in a row, one at a time, are answered within the SLO: what an
    earlier point left queued has been served or given up (at most `SETTLE_MAX_S`)."""
    async with http_session() as session:
        began, in_a_row = time.perf_counter(), 0
        while in_a_row < SETTLED_ANSWERS and time.perf_counter() - began < SETTLE_MAX_S:
            outcome = await call(session, url, request, 0.0, began)
            quick = outcome.status == 200 and outcome.latency_ms <= SLO_MS
            in_a_row = in_a_row + 1 if quick else 0
            await asyncio.sleep(0.0 if quick else 0.2)
        return time.perf_counter() - began


# -- CPU ------------------------------------------------------------------------------------------------

def process_name(pid: int) -> str:
    """What a process is, by its command line: ``raylet``, ``ray::ServeReplica:digits:DigitsModel``, ``haproxy``,
    ``dashboard.py``, ``bench.peer_ray``."""
    argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    if not argv:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    if argv[0].startswith("ray"):  # ray::<actor>[.<method running>] and ray-dashboard-<module> name themselves
        return argv[0].split(" ")[0].split(".")[0]
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return Path(next((a for a in argv[1:] if a.endswith(".py")), argv[0])).name


def process_tree(root: int) -> dict[int, str]:
    """``root`` and every process descending from it, pid -> `process_name`."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, stack = {}, [root]
    while stack:
        pid = stack.pop()
        try:
            tree[pid] = process_name(pid)
        except OSError:
            continue
        stack.extend(children.get(pid, ()))
    return tree


class CpuMeter:
    """CPU-seconds a system's server processes and this process (the load generator) spend from now on; a
    server process that starts meanwhile counts from its start."""

    def __init__(self, processes: Callable[[], dict[int, str]]) -> None:
        self._processes = processes
        self._before = self._read()
        self._own = cpu_seconds(os.getpid())

    def _read(self) -> dict[int, tuple[str, float]]:
        read = {}
        for pid, name in self._processes().items():
            try:
                read[pid] = (name, cpu_seconds(pid))
            except OSError:
                continue  # exited meanwhile
        return read

    def spent(self) -> tuple[dict[str, float], float]:
        """The servers' CPU-seconds so far by process name, and the load generator's."""
        by_name: Counter[str] = Counter()
        for pid, (name, seconds) in self._read().items():
            by_name[name] += seconds - self._before.get(pid, (name, 0.0))[1]
        return dict(by_name), cpu_seconds(os.getpid()) - self._own


def tcp_counters() -> dict[str, int]:
    """The machine's TCP listen-queue overflows and SYN retransmissions so far (``/proc/net/netstat``): an open
    loop's new connections beyond a server's accept backlog are dropped and sent again 1 s later, then 3 s."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    names, values = next((head.split()[1:], row.split()[1:]) for head, row in zip(lines[::2], lines[1::2])
                         if head.startswith("TcpExt:"))
    counters = dict(zip(names, map(int, values)))
    return {"listen_overflows": counters["ListenOverflows"], "syn_retransmits": counters["TCPSynRetrans"]}


# -- the systems ----------------------------------------------------------------------------------------

def free_ports() -> None:
    """Refuse to start where something already listens on one of `PORTS` (another run of this bench)."""
    for port in PORTS:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise SystemExit(f"port {port} is in use: is another bench-gateway running?")


@contextmanager
def meridian(tmp: Path) -> Iterator[System]:
    """Kafka and Redis, one scheduler (fcfs), one real worker of `MODEL` (1 thread, batches of up to 32) and
    one REST gateway, in ``tmp``."""
    with LocalStack(var_dir=tmp, kafka_port=KAFKA_PORT, redis_port=REDIS_PORT, prometheus_port=PROMETHEUS_PORT,
                    components=("kafka", "redis")) as stack:
        with LocalLauncher(stack.env, tmp / "logs") as launcher:
            scheduler = launcher.start_scheduler(metrics_port=SCHEDULER_METRICS_PORT, policy="fcfs")
            launcher.start_worker("gw-bench", variants=[MODEL], metrics_port=WORKER_METRICS_PORT, threads=1,
                                  max_batch=MAX_BATCH)
            launcher.wait_for_workers(scheduler, 1, timeout_s=120)
            launcher.start_gateway(port=GATEWAY_PORT)
            pids = {process.popen.pid: name.split("-")[0] for name, process in launcher.processes.items()}
            pids[stack.kafka_node_pid(1)] = "kafka"
            pids[int((tmp / f"redis-{REDIS_PORT}" / "redis.pid").read_text())] = "redis"
            yield System("meridian", f"http://127.0.0.1:{GATEWAY_PORT}{INFER_PATH}", lambda: pids)


def peer_env(mode: str, home: Path, scratch: Path) -> dict[str, str]:
    """The Ray side's environment: its mode's switches, a home of its own (Ray writes there), and HAProxy's
    files (under ``scratch``: a short path, since HAProxy refuses a socket path over 97 characters) and ports."""
    return {**os.environ, **RAY_MODES[mode], "HOME": str(home), "PYTHONPATH": str(REPO_ROOT),
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(scratch / "haproxy.cfg"),
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(scratch / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(scratch),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(scratch / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(HAPROXY_METRICS_PORT),
            "RAY_SERVE_HAPROXY_STATS_PORT": str(HAPROXY_STATS_PORT)}


def wait_ready(peer: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until the peer prints its ready line; its log's tail if it exits or stays silent."""
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(peer.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not line or not line[0].strip():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"Ray Serve did not start within {timeout_s:g} s (exit {peer.poll()}):\n{tail}")


@contextmanager
def ray_serve(mode: str, tmp: Path) -> Iterator[System]:
    """Ray Serve in ``mode`` serving `MODEL` from `bench.peer_ray`, run by the peer venv's Python (its log
    in ``tmp``); every process it started is ended with it."""
    if not PEER_PYTHON.exists():
        raise SystemExit(f"{PEER_PYTHON} is missing: `make var/peer/.installed` installs Ray Serve there")
    tmp.mkdir(parents=True)
    log = tmp / "peer.log"
    with tempfile.TemporaryDirectory(prefix="mrb-") as short, log.open("ab") as stderr:
        command = [str(PEER_PYTHON), "-m", "bench.peer_ray", "--model", str(Settings().models_dir / f"{MODEL}.onnx"),
                   "--port", str(RAY_HTTP_PORT), "--dashboard-port", str(RAY_DASHBOARD_PORT),
                   "--max-batch", str(MAX_BATCH), "--batch-wait-s", str(BATCH_WAIT_S), "--temp-dir", f"{short}/ray"]
        peer = subprocess.Popen(command, cwd=REPO_ROOT, env=peer_env(mode, tmp, Path(short)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
        started: dict[int, str] = {}

        def processes() -> dict[int, str]:
            started.update(now := process_tree(peer.pid))
            return now

        try:
            wait_ready(peer, log, timeout_s=180)
            yield System(mode, f"http://127.0.0.1:{RAY_HTTP_PORT}{INFER_PATH}", processes)
        finally:
            processes()
            stop_peer(peer, started)


def stop_peer(peer: subprocess.Popen, started: dict[int, str]) -> None:
    """Close the peer's stdin (it shuts Ray down), then end whatever of its processes outlived it."""
    peer.stdin.close()
    try:
        peer.wait(timeout=60)
    except subprocess.TimeoutExpired:
        peer.kill()
        peer.wait(timeout=10)
    for pid, name in started.items():
        try:
            if process_name(pid) == name:  # still that process, not a new one under its id
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


@contextmanager
def running(name: str, tmp: Path) -> Iterator[System]:
    """The system ``name`` (one of `SYSTEMS`), started in ``tmp / name`` and stopped on leaving."""
    with (meridian(tmp / name) if name == "meridian" else ray_serve(name, tmp / name)) as system:
        yield system


# -- measuring ------------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summarize(outcomes: list[Outcome], due: int, rate: float, servers: dict[str, float], generator_s: float) -> dict:
    """One point's figures (see the module's docstring). Rates are per second of sending, from the first
    request to the last: longer than the point's duration where the load generator, short of CPU, fell behind."""
    ok = [o for o in outcomes if o.status == 200]
    added = [o.latency_ms - o.compute_ms for o in ok if o.compute_ms is not None]
    within = sum(o.latency_ms <= SLO_MS for o in ok)
    per_thousand = 1000.0 / len(outcomes)
    sending_s = max(o.sent_s for o in outcomes)
    return {"offered_qps": round(rate, 1), "due": due, "sent": len(outcomes),
            "sent_qps": round(len(outcomes) / sending_s, 1),
            "send_lag_ms_p99": percentile([(o.sent_s - o.due_s) * 1000.0 for o in outcomes], 99),
            "answered": sum(o.status is not None for o in outcomes), "ok": len(ok),
            "statuses": dict(sorted(Counter(str(o.status or "none") for o in outcomes).items())),
            "added_ms_p50": percentile(added, 50), "added_ms_p99": percentile(added, 99),
            "latency_ms_p50": percentile([o.latency_ms for o in ok], 50),
            "latency_ms_p99": percentile([o.latency_ms for o in ok], 99),
            "compute_ms_p50": percentile([o.compute_ms for o in ok if o.compute_ms is not None], 50),
            "server_ms_p50": percentile([o.server_ms for o in ok if o.server_ms is not None], 50),
            "server_ms_p99": percentile([o.server_ms for o in ok if o.server_ms is not None], 99),
            "goodput_qps": round(within / sending_s, 1),
            "cpu_s_per_1000": round(sum(servers.values()) * per_thousand, 3),
            "cpu_s_per_1000_by_process": {name: round(s * per_thousand, 3) for name, s in
                                          sorted(servers.items(), key=lambda item: -item[1])
                                          if s * per_thousand >= 0.01},
            "load_generator_cpu_s_per_1000": round(generator_s * per_thousand, 3)}


def warm_up(system: System, requests: list[tuple[bytes, dict[str, str]]]) -> None:
    """Until the first answers stop taking seconds (consumer groups joining, Ray's first calls): not measured."""
    for attempt in range(10):
        outcomes, _ = asyncio.run(open_loop(system.url, requests, 100.0, 2.0, seed=100 + attempt))
        if all(o.status == 200 for o in outcomes) and max(o.latency_ms for o in outcomes) < SLO_MS:
            return
    print(f"{system.name}: still slow after its warm-up; measuring anyway", flush=True)


def measure(system: System, requests: list[tuple[bytes, dict[str, str]]], duration_s: float,
            capacity_s: float) -> dict:
    """The system's capacity, then each point's figures."""
    warm_up(system, requests)
    capacity = asyncio.run(closed_loop(system.url, requests, CAPACITY_CALLERS, capacity_s))
    print(f"{system.name}: capacity {capacity:.0f} q/s ({CAPACITY_CALLERS} closed-loop callers)", flush=True)
    points = {}
    for index, (label, rate) in enumerate([*((f"{r:g}_qps", r) for r in RATES),
                                           (f"overload_{OVERLOAD:g}x", OVERLOAD * capacity)]):
        settled_s = asyncio.run(settle(system.url, requests[0]))
        meter, tcp = CpuMeter(system.processes), tcp_counters()
        outcomes, due = asyncio.run(open_loop(system.url, requests, rate, duration_s, seed=index))
        points[label] = {**summarize(outcomes, due, rate, *meter.spent()), "settled_before_s": round(settled_s, 1),
                         **{f"tcp_{name}": count - tcp[name] for name, count in tcp_counters().items()}}
        print(f"{system.name} {label}: {json.dumps(points[label])}", flush=True)
    overload = points[f"overload_{OVERLOAD:g}x"]
    overload["goodput_over_capacity"] = round(overload["goodput_qps"] / capacity, 3)
    return {"capacity_qps": round(capacity, 1), "points": points}


def bar(systems: dict[str, dict]) -> dict:
    """Issue #47's bar: Meridian's added latency at 200 q/s at or below Ray Serve's fastest mode's, p50 and
    p99, measured in the same sitting; Meridian's goodput under 3x overload at least 0.9 of its capacity."""
    ours, peer = systems["meridian"]["points"]["200_qps"], systems["ray-fastest"]["points"]["200_qps"]
    ratios = {f"added_{q}_meridian_over_ray_fastest_200qps": round(ours[f"added_ms_{q}"] / peer[f"added_ms_{q}"], 3)
              for q in ("p50", "p99")}
    goodput = systems["meridian"]["points"][f"overload_{OVERLOAD:g}x"]["goodput_over_capacity"]
    latency_met = all(ratio <= 1.0 for ratio in ratios.values())
    return {**ratios, "latency_met": latency_met, "overload_goodput_over_capacity": goodput,
            "goodput_met": goodput >= 0.9, "met": latency_met and goodput >= 0.9}


def plot(systems: dict[str, dict], path: Path) -> None:
    """Added latency p50 (bar) and p99 (tick), goodput, and CPU per 1,000 requests, per point and system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(next(iter(systems.values()))["points"])
    fig, (latency, goodput, cpu) = plt.subplots(1, 3, figsize=(14, 4.2))
    width = 0.8 / len(systems)
    for k, (name, measured) in enumerate(systems.items()):
        x = np.arange(len(labels)) + (k - (len(systems) - 1) / 2) * width
        points = [measured["points"][label] for label in labels]
        p50 = [p["added_ms_p50"] or 0.0 for p in points]
        bars = latency.bar(x, p50, width, label=name)
        latency.scatter(x, [p["added_ms_p99"] or 0.0 for p in points], marker="_", s=300, color="black", zorder=3)
        goodput.bar(x, [p["goodput_qps"] for p in points], width, color=bars.patches[0].get_facecolor(),
                    label=f"{name} (capacity {measured['capacity_qps']:.0f} q/s)")
        goodput.scatter(x, [p["sent_qps"] for p in points], marker="_", s=300, color="black", zorder=3)
        cpu.bar(x, [p["cpu_s_per_1000"] for p in points], width, color=bars.patches[0].get_facecolor(), label=name)
    latency.set_yscale("log")
    latency.set_ylabel("added latency (ms): p50 bar, p99 tick")
    goodput.set_ylabel(f"goodput: ok within {SLO_MS:g} ms per second (tick: sent)")
    cpu.set_ylabel("server CPU-seconds per 1,000 requests")
    for axis in (latency, goodput, cpu):
        axis.set_xticks(np.arange(len(labels)), [label.replace("_", " ") for label in labels])
        axis.legend(fontsize=7)
    fig.suptitle(f"{MODEL}, one replica, batches of up to {MAX_BATCH}: Meridian's gateway vs Ray Serve, HTTP")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of each point's load")
    parser.add_argument("--capacity-duration", type=float, default=6.0, help="seconds of the closed-loop capacity run")
    parser.add_argument("--quick", action="store_true", help="a few seconds per point: a validation run")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"which of {', '.join(SYSTEMS)} to measure")
    args = parser.parse_args(argv)
    duration_s, capacity_s = (3.0, 2.0) if args.quick else (args.duration, args.capacity_duration)
    free_ports()
    requests = oip_requests(64)
    measured = {}
    with tempfile.TemporaryDirectory(prefix="meridian-bench-") as tmp:
        for name in args.systems.split(","):
            with running(name, Path(tmp)) as system:
                measured[name] = measure(system, requests, duration_s, capacity_s)
    payload = {"bar": bar(measured) if {"meridian", "ray-fastest"} <= set(measured) else None,
               "systems": measured,
               "setup": {"model": MODEL, "max_batch": MAX_BATCH, "ray_batch_wait_s": BATCH_WAIT_S, "slo_ms": SLO_MS,
                         "point_s": duration_s, "capacity_s": capacity_s, "capacity_callers": CAPACITY_CALLERS,
                         "timeout_s": TIMEOUT_S, "quick": args.quick, "cores": os.cpu_count(),
                         "meridian": "scheduler fcfs (deadline batching, no wait); worker --threads 1 --max-batch "
                                     "32; gateway REST, settings' defaults",
                         "ray": "@serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002), one replica, "
                                "max_ongoing_requests 64, Ray Serve's HTTP proxy (fastest: HAProxy)",
                         "figure": "bench/results/gateway.png"}}
    plot(measured, RESULTS_DIR / "gateway.png")
    write_result("gateway", payload)


if __name__ == "__main__":
    main()
