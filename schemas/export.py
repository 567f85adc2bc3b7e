"""Write the JSON Schema of every topic model to ``schemas/json/`` (``python -m schemas.export``).

The files are committed; ``tests/unit/test_schemas.py`` fails when they drift from the models.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.messages import EXPORTED_MODELS

JSON_DIR = Path(__file__).parent / "json"


def render_schemas() -> dict[str, str]:
    rendered = {}
    for name, model in EXPORTED_MODELS.items():
        schema = model.model_json_schema() if isinstance(model, type) and issubclass(model, BaseModel) else model.json_schema()
        rendered[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return rendered


def main() -> None:
    JSON_DIR.mkdir(exist_ok=True)
    for filename, text in render_schemas().items():
        (JSON_DIR / filename).write_text(text)
        print(f"wrote {JSON_DIR / filename}")


if __name__ == "__main__":
    main()
