"""How much of this host's CPU its hypervisor gave to other machines while a test ran (the `steal` column of
/proc/stat).

A live SLO is a claim about the stack on the CPU it was given. This host's neighbours take a quarter to a
third of its two cores at times; then every process of the stack stalls together for tens to hundreds of
milliseconds, and deadlines are missed that no scheduler could keep. A test that judges a live SLO reads the
share stolen over its run and says so beside its verdict.
"""
from __future__ import annotations

from pathlib import Path

PROC_STAT = Path("/proc/stat")
#: the share of the CPU stolen beyond which a test reports a live SLO rather than judge it: with a third
#: taken, two runs of test_autoscaler_live on the same code missed 2% and 37% of its rise
MAX_STOLEN_SHARE = 0.10


def cpu_jiffies() -> tuple[int, int]:
    """(stolen, total) CPU time since boot, in jiffies, over all CPUs; (0, 0) where the kernel says none."""
    try:
        fields = PROC_STAT.read_text().splitlines()[0].split()
    except OSError:
        return 0, 0
    # cpu user nice system idle iowait irq softirq steal guest guest_nice: guest time is inside user's
    values = [int(v) for v in fields[1:9]]
    return (values[7] if len(values) > 7 else 0), sum(values)


def stolen_share(since: tuple[int, int]) -> float:
    """The share of the CPU time since ``since`` (a `cpu_jiffies` reading) that was stolen."""
    stolen, total = cpu_jiffies()
    elapsed = total - since[1]
    return (stolen - since[0]) / elapsed if elapsed > 0 else 0.0
