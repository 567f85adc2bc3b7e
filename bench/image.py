"""``make bench-image``: Meridian's image built for real without a Docker engine or a registry, and run.

No image registry is reachable here, so the image's base is made from Debian's own packages: a pristine
bookworm root by ``mmdebstrap`` (minbase, with Python 3.11, its venv module and CA certificates), imported
into podman. This machine reaches PyPI through a TLS proxy whose certificate authority is in its trust
store, not in Debian's: the root gets this machine's store and an ``/etc/pip.conf`` that points pip at it
(`TRUST_STORE`), as a base image made for this network would. podman then builds ``infra/docker/Dockerfile``'s ``runtime`` target from it, every step of
the file as written (``--isolation chroot``: podman's OCI runtime cannot set its resource limits in this
machine's container). The image is checked (no torch, the digits models in ``/app/var/models``), and two
containers of it run on the hosts rig (`services.rig`, TLS and SCRAM to the brokers): a scheduler on
``sched1`` and a real worker on ``worker1``, each chrooted into its container's file system (``podman
mount``), as its Python, from its working directory: podman cannot start them itself here, for the same
reason. This process sends them digits queries from the client host.

Installs Debian's ``mmdebstrap`` and ``podman`` where missing. Needs root. Writes ``bench/results/image.json``
and ``bench/results/image.png`` (seconds per step, the image's size).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from collections.abc import Iterator
from pathlib import Path


from bench.common import RESULTS_DIR, save_figure, write_result
from bench.hosts import digits_query, digits_rows
from schemas import ResultStatus
from services.launcher import IMAGE_PYTHON, IMAGE_WORKDIR
from services.rig import HostsRig
from shared.adapters.client import MeridianClient
from shared.settings import REPO_ROOT

BASE_IMAGE = "localhost/meridian-debian:bookworm"
IMAGE = "localhost/meridian:runtime"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: this machine's trust store, given to the Debian root (and pip in it) for the TLS proxy to PyPI
TRUST_STORE = "/etc/ssl/certs/ca-certificates.crt"
QUERIES = 200


def run(*argv: str, timeout_s: float = 1800) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} ... failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result.stdout


def timed(step: str, seconds: dict[str, float], *argv: str) -> str:
    began = time.monotonic()
    out = run(*argv)
    seconds[step] = round(time.monotonic() - began, 1)
    print(f"{step}: {seconds[step]} s", flush=True)
    return out


def install_tools() -> None:
    missing = [tool for tool in ("mmdebstrap", "podman") if shutil.which(tool) is None]
    if missing:
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing)


def build(work: Path, seconds: dict[str, float]) -> None:
    """The Debian root, imported as `BASE_IMAGE`, and the Dockerfile's runtime target built on it."""
    rootfs = work / "rootfs.tar"
    pip_conf = work / "pip.conf"
    pip_conf.write_text(f"[global]\ncert = {TRUST_STORE}\n")
    timed("debian_root", seconds, "mmdebstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
          f"--customize-hook=upload {TRUST_STORE} {TRUST_STORE}", f"--customize-hook=upload {pip_conf} /etc/pip.conf",
          "bookworm", str(rootfs), DEBIAN_MIRROR)
    timed("import", seconds, "podman", "import", str(rootfs), BASE_IMAGE)
    timed("build", seconds, "podman", "build", "--isolation", "chroot", "--network", "host", "--no-cache",
          "--build-arg", f"BASE={BASE_IMAGE}", "--target", "runtime", "-f", str(REPO_ROOT / "infra/docker/Dockerfile"),
          "-t", IMAGE, str(REPO_ROOT))


@contextmanager
def container_root(name: str) -> Iterator[Path]:
    """A container of `IMAGE`, created (not started) and its file system mounted, with ``/proc`` and ``/dev``
    as a container runtime gives them: its root."""
    run("podman", "rm", "--force", "--ignore", name)
    run("podman", "create", "--name", name, IMAGE, "true")
    root = Path(run("podman", "mount", name).strip())
    try:
        run("mount", "-t", "proc", "proc", str(root / "proc"))
        run("mount", "--bind", "/dev", str(root / "dev"))
        yield root
    finally:
        for inner in ("dev", "proc"):
            subprocess.run(["umount", "-l", str(root / inner)], capture_output=True)
        try:
            run("podman", "umount", name)
        finally:
            run("podman", "rm", "--force", name)


def inspect(root: Path) -> dict:
    """What the image holds: torch or not, the models, its Python."""
    probe = ("import importlib.util, json, sys; print(json.dumps({'torch': importlib.util.find_spec('torch') is not None,"
             " 'onnxruntime': importlib.util.find_spec('onnxruntime') is not None, 'python': sys.version.split()[0]}))")
    found = json.loads(run("chroot", str(root), IMAGE_PYTHON, "-c", probe).strip().splitlines()[-1])
    found["models"] = sorted(p.name for p in (root / IMAGE_WORKDIR.lstrip("/") / "var/models").glob("*.onnx"))
    return found


def serve(work: Path, scheduler_root: Path, worker_root: Path) -> dict:
    """A scheduler and a worker from the image on the rig, and `QUERIES` digits queries through them."""
    with HostsRig(work / "rig", prefix="mri", subnet="10.77.3") as rig:
        for root in (scheduler_root, worker_root):  # the CA, mounted into the containers as a secret would be
            inside = root / str(rig.tls_dir / "ca.pem").lstrip("/")
            inside.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(rig.tls_dir / "ca.pem", inside)
        scheduler_host = rig.launcher("sched1", image_root=scheduler_root)
        worker_host = rig.launcher("worker1", image_root=worker_root)
        with scheduler_host, worker_host:
            scheduler = scheduler_host.start_scheduler(metrics_port=9101)
            worker_host.start_worker("image-w1", variants=["digits-mlp-s"], metrics_port=9102)
            began = time.monotonic()
            scheduler_host.wait_for_workers(scheduler, 1, timeout_s=180)
            ready_s = time.monotonic() - began
            rows = digits_rows(rig.settings())
            with MeridianClient(rig.settings(), applications=["digits"]) as client:
                sent = [client.send(digits_query(rows, k)) for k in range(QUERIES)]
                client.flush()
                client.wait_for([q.query_id for q in sent], timeout_s=120)
                answers = [client.results.get(q.query_id) for q in sent]
    return {"queries": QUERIES, "ok": sum(a is not None and a[0].status is ResultStatus.OK for a in answers),
            "statuses": dict(Counter(a[0].status.value if a else "unanswered" for a in answers)),
            "reasons": sorted({a[0].reason for a in answers if a and a[0].reason})[:5],
            "answered_by": sorted({a[0].worker_id for a in answers if a is not None and a[0].worker_id}),
            "scheduler_saw_the_worker_after_s": round(ready_s, 1)}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3))
    steps = result["seconds"]
    axis.barh(list(steps), list(steps.values()), color="#4c72b0")
    axis.set_xlabel("seconds")
    axis.set_title(f"{IMAGE}: {result['image_mb']:.0f} MB, built from a Debian root", fontsize=9)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(prog="python -m bench.image", description=__doc__.split("\n\n")[0]).parse_args(argv)
    install_tools()
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="meridian-bench-image-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        build(work, seconds)
        size = json.loads(run("podman", "image", "inspect", IMAGE))[0]["Size"]
        scheduler_root = stack.enter_context(container_root("meridian-bench-scheduler"))
        worker_root = stack.enter_context(container_root("meridian-bench-worker"))
        held = inspect(worker_root)
        serving = serve(work, scheduler_root, worker_root)
    run("podman", "image", "prune", "--force")  # the previous runs' images, which this build replaced
    result = {"image": IMAGE, "base": f"Debian bookworm (mmdebstrap, {DEBIAN_MIRROR})", "image_mb": round(size / 2**20, 1),
              "seconds": seconds, "holds": held, "serving": serving}
    plot(result, RESULTS_DIR / "image.png")
    write_result("image", result)


if __name__ == "__main__":
    main()
