"""Shared by the benchmarks: where results go and how they are printed."""
from __future__ import annotations

import json
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
