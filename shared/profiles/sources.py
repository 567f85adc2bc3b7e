"""Named places profiles come from, so every service and the simulator load them the same way."""
from __future__ import annotations

from pathlib import Path

from shared.profiles.format import ProfileSet
from shared.settings import Settings


def merge(profile_sets: list[ProfileSet], source: str) -> ProfileSet:
    devices = {d.name: d for ps in profile_sets for d in ps.devices}
    return ProfileSet(source=source, devices=list(devices.values()),
                      slo_ms={k: v for ps in profile_sets for k, v in ps.slo_ms.items()},
                      variants=[v for ps in profile_sets for v in ps.variants])


def load_profile_dir(path: Path) -> ProfileSet:
    """``path/*.json`` (committed, measured here) and ``path/registered/*.json`` (written by the registry)."""
    files = sorted(Path(path).glob("*.json")) + sorted((Path(path) / "registered").glob("*.json"))
    return merge([ProfileSet.load(f) for f in files], source=f"{len(files)} profile files in {path}")


def load_profile_source(name: str, settings: Settings) -> ProfileSet:
    """``dir``: every ``profiles/*.json``; ``kairos``: the Kairos authors' measured data."""
    if name == "dir":
        return load_profile_dir(settings.profiles_dir)
    if name == "kairos":
        from shared.profiles.kairos import load_kairos_profiles

        return load_kairos_profiles(settings.kairos_data_dir)
    raise ValueError(f"unknown profile source {name!r}; valid: dir, kairos")
