"""bench.common.CoreShares: which process used the machine's cores over a stretch of time."""
import subprocess
import sys
import time

from bench.common import CoreShares


def test_a_spinning_process_uses_about_a_core_and_a_sleeping_one_none() -> None:
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)  # both past their start-up
        shares = CoreShares({"spinning": spinning.pid, "sleeping": sleeping.pid})
        time.sleep(1.0)
        cores, wall_s = shares.cores()
    finally:
        spinning.kill()
        sleeping.kill()
    assert 0.9 < wall_s < 2.0
    assert cores["spinning"] > 0.3, "a busy loop on a shared 2-core machine still gets a good part of one"
    assert cores["sleeping"] < 0.05
    assert cores[CoreShares.LOAD_GENERATOR] < 0.3, "this process only slept"
