"""Where a running scheduler's CPU goes per query, by stage: the kernel's count per thread, and py-spy's
samples of the event loop's thread while a load runs.

The kernel counts each thread's CPU over the window (``/proc/<pid>/task``), in three groups: the event
loop's thread (the main one), the other threads that run Python (the query reader's and the topic
followers' polls and hand-overs, the metrics server), and librdkafka's own threads (named ``rdk:...``:
fetching, sending, its timers), which py-spy cannot see. Each group's CPU divided by the queries received
meanwhile is a stage; the event loop's is split further among the stages below by py-spy's samples of that
thread (``RATE_HZ`` a second): each sample is charged to the first rule any frame of its stack matches. So
a metric updated inside the core's step is metrics, and a model serialised for a send is encoding. Only
the event loop's samples are used: py-spy takes a thread waiting in librdkafka's poll (in C, without the
GIL) for a running one, which made the reading threads look ten times busier than the kernel counts.
py-spy pauses the process for each sample (reading a running one, ``--nonblocking``, hung py-spy here), so
the bench measures latency in a run of its own.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from bench.common import stat_cpu_seconds

RATE_HZ = 100

#: (stage, does this frame belong to it?), in order of precedence, for the event loop's thread
RULES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("metrics", lambda frame: "prometheus_client/" in frame),
    ("decode and validate", lambda frame: frame.startswith(("model_validate_json ", "validate_json "))),
    ("encode", lambda frame: frame.startswith(("model_dump_json ", "dispatch_batch (", "dropped ("))),
    ("commit", lambda frame: "services/scheduler/offsets.py" in frame or frame.startswith((
        "commit_points ", "acknowledge_when_written ", "_acknowledge_if_written "))),
    ("produce", lambda frame: "services/scheduler/publisher.py" in frame),
    ("admission", lambda frame: frame.startswith("admit (") and "shared/serving/" in frame),
    ("core step", lambda frame: "shared/" in frame),
    ("scheduler's handlers", lambda frame: "services/scheduler/" in frame and "__main__" not in frame),
    # faust's own tasks and timers (not its command line, nor mode's worker: they run the event loop, at the
    # bottom of every stack of the main thread)
    ("faust", lambda frame: "faust/" in frame and "faust/cli/" not in frame and not frame.startswith("main (faust/")),
)
OTHER = "event loop and other"
READING = "reading threads (query reader, topic followers)"
LIBRDKAFKA = "librdkafka's threads"
LOOP_STAGES = (*(stage for stage, _ in RULES), OTHER)
STAGES = (*LOOP_STAGES, READING, LIBRDKAFKA)
#: the outermost frame of a thread started by `threading` (every thread but the main one)
THREAD_START = "_bootstrap (threading.py:"


class ThreadsCpu(NamedTuple):
    """User + system CPU seconds of a process's threads, by group (see the module's docstring)."""

    event_loop: float
    reading: float
    librdkafka: float

    def __sub__(self, before: tuple[float, ...]) -> ThreadsCpu:
        return ThreadsCpu(*(after - earlier for after, earlier in zip(self, before)))


class StageProfile:
    """py-spy recording a process from now until ``cpu_us_per_query`` ends the recording."""

    def __init__(self, pid: int, out: Path) -> None:
        executable = shutil.which("py-spy")
        if executable is None:
            raise RuntimeError("py-spy is not installed: `make install-dev` installs it")
        self.out, self.pid = out, pid
        self.cpu_before = threads_cpu_seconds(pid)
        self.process = subprocess.Popen(
            [executable, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--format", "raw", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_us_per_query(self, queries: int) -> dict[str, float]:
        """End the recording (py-spy writes what it sampled on SIGINT) and divide by ``queries``."""
        cpu = threads_cpu_seconds(self.pid) - self.cpu_before
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError("py-spy did not stop within 60 s of SIGINT") from None
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote nothing (exit status {self.process.returncode})")
        samples = stage_samples(self.out.read_text())
        loop_us, counted = cpu.event_loop / queries * 1e6, max(1, sum(samples.values()))
        return {**{stage: round(loop_us * samples[stage] / counted, 1) for stage in LOOP_STAGES},
                READING: round(cpu.reading / queries * 1e6, 1), LIBRDKAFKA: round(cpu.librdkafka / queries * 1e6, 1),
                "total": round(sum(cpu) / queries * 1e6, 1), "samples": sum(samples.values())}


def threads_cpu_seconds(pid: int) -> ThreadsCpu:
    """The CPU of a process's threads so far, by group (``/proc/<pid>/task/<tid>/stat``; a thread that
    ended meanwhile is not counted)."""
    seconds_by_group = [0.0, 0.0, 0.0]
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # ended since the listing (either, by the moment)
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        group = 0 if int(task.name) == pid else 2 if name.startswith("rdk:") else 1
        seconds_by_group[group] += stat_cpu_seconds(stat)
    return ThreadsCpu(*seconds_by_group)


def stage_samples(collapsed: str) -> Counter[str]:
    """Samples per stage of the event loop's thread, from py-spy's collapsed stacks (``frame;frame;...
    count``, outermost first; another thread's stack starts in `THREAD_START`)."""
    samples: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if stack and not frames[0].startswith(THREAD_START):
            samples[stage_of(frames)] += int(count)
    return samples


def stage_of(frames: list[str]) -> str:
    for stage, belongs in RULES:
        if any(belongs(frame) for frame in frames):
            return stage
    return OTHER


def format_table(profiles: dict[str, dict[str, float]]) -> str:
    """One column per load, one row per stage, CPU µs per query."""
    loads = list(profiles)
    lines = ["| stage | " + " | ".join(loads) + " |", "|---|" + "---|" * len(loads)]
    for stage in (*STAGES, "total"):
        lines.append(f"| {stage} | " + " | ".join(f"{profiles[load][stage]:g}" for load in loads) + " |")
    return "\n".join(lines)
