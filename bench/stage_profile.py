"""Where a running scheduler's CPU goes per query, by stage: sampled with py-spy while a load runs.

py-spy samples every thread's Python stack ``RATE_HZ`` times a second, leaving out threads that sleep. It
pauses the process for each sample (reading a running one, ``--nonblocking``, hung py-spy here), so the
bench measures latency in a run of its own. Each sample is charged to one stage: the first rule
below that any frame of its stack matches. So a metric updated inside the core's step is metrics, and a
model serialised for a send is encoding. The process's CPU time over the window (the kernel's count, every
thread) divided by the queries received meanwhile is ``total``, split among the stages by their shares of
the samples: on a busy machine py-spy also samples threads that wait for a core, so its own sample count
overstates the CPU.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench.common import cpu_seconds

RATE_HZ = 100

#: (stage, does this frame belong to it?), in order of precedence
RULES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("metrics", lambda frame: "prometheus_client/" in frame),
    ("decode and validate", lambda frame: frame.startswith(("model_validate_json ", "validate_json "))),
    ("encode", lambda frame: frame.startswith(("model_dump_json ", "dispatch_batch (", "dropped ("))),
    ("commit", lambda frame: "services/scheduler/offsets.py" in frame or frame.startswith((
        "_commit ", "commit_points ", "acknowledge_when_written ", "_acknowledge_if_written "))),
    ("produce", lambda frame: "services/scheduler/publisher.py" in frame),
    # librdkafka's polls: the query reader's thread and the topic followers' (worker events, plans, control)
    ("fetch (librdkafka)", lambda frame: frame.startswith(("consume_ready (", "poll_messages ("))),
    ("admission", lambda frame: frame.startswith("admit (") and "shared/serving/" in frame),
    ("core step", lambda frame: "shared/" in frame),
    # the query reader handing each poll to the event loop
    ("hand-off to the event loop", lambda frame: frame.startswith(("run_coroutine_threadsafe ",
                                                                    "call_soon_threadsafe "))),
    ("scheduler's handlers", lambda frame: "services/scheduler/" in frame and "__main__" not in frame),
    # (not mode/: its worker runs the event loop, at the bottom of every stack of the main thread)
    ("faust", lambda frame: "faust/" in frame),
)
OTHER = "event loop and other"
#: a thread of the default executor waiting for work, as its innermost frame: py-spy takes the wait (in C,
#: inside ``queue.get``) for work. Counted, such threads were 29% of a 1,000 q/s run's samples, all
#: charged to `OTHER`, and every stage's share of the CPU shrank by as much
IDLE_WAIT = "_worker (concurrent/futures/thread.py:"
STAGES = (*(stage for stage, _ in RULES), OTHER)


class StageProfile:
    """py-spy recording a process from now until ``cpu_us_per_query`` ends the recording."""

    def __init__(self, pid: int, out: Path) -> None:
        executable = shutil.which("py-spy")
        if executable is None:
            raise RuntimeError("py-spy is not installed: `make install-dev` installs it")
        self.out, self.pid = out, pid
        self.cpu_s_before = cpu_seconds(pid)
        self.process = subprocess.Popen(
            [executable, "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--format", "raw", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cpu_us_per_query(self, queries: int) -> dict[str, float]:
        """End the recording (py-spy writes what it sampled on SIGINT) and divide by ``queries``."""
        cpu_s = cpu_seconds(self.pid) - self.cpu_s_before
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError("py-spy did not stop within 60 s of SIGINT") from None
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote nothing (exit status {self.process.returncode})")
        samples = stage_samples(self.out.read_text())
        total_us = cpu_s / queries * 1e6
        counted = max(1, sum(samples.values()))
        return {**{stage: round(total_us * samples[stage] / counted, 1) for stage in STAGES},
                "total": round(total_us, 1), "samples": sum(samples.values())}


def stage_samples(collapsed: str) -> Counter[str]:
    """Samples per stage from py-spy's collapsed stacks (``frame;frame;... count``, outermost first), less
    the executor's idle threads (`IDLE_WAIT`)."""
    samples: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if stack and not frames[-1].startswith(IDLE_WAIT):
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
