"""Shared by the benchmarks: where results go and how they are printed, and where a machine's CPU went."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def save_figure(fig: Any, path: Path) -> None:
    """Write a bench's figure as a PNG beside its JSON, and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    text = json.dumps(payload, indent=2, sort_keys=False)
    path.write_text(text + "\n")
    print(text)
    print(f"wrote {path}")
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far, every thread included (``/proc/<pid>/stat``)."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from a ``/proc`` ``stat`` line, a process's or one of its threads'."""
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CoreShares:
    """The cores each process used from now until `cores` is asked: on a machine whose cores the broker, the
    scheduler, the workers and the bench's own load share, which of them a ceiling runs into.

    ``pids``: name -> process id; the bench's own process is counted as ``load generator``."""

    LOAD_GENERATOR = "load generator"

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = {**pids, self.LOAD_GENERATOR: os.getpid()}
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.began = time.monotonic()

    def cores(self) -> tuple[dict[str, float], float]:
        """Cores per process since the start, and the wall seconds since."""
        wall_s = time.monotonic() - self.began
        return ({name: round((cpu_seconds(pid) - self.before[name]) / wall_s, 3) for name, pid in self.pids.items()},
                wall_s)
