"""The import graph: policies stay pure, and none imports the simulator that evaluates it.

Read with `ast`, never imported, so an offending import is found wherever it sits: at module level, under
``TYPE_CHECKING``, or lazily inside a function.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.settings import REPO_ROOT

#: packages of pure code: no broker, no Redis, no adapter
PURE = ("policy", "kairos", "infaas", "proteus", "ramsis", "autoscale", "serving", "profiles", "sim")
#: policy packages: they must not import the simulator either
POLICY = ("policy", "kairos", "infaas", "proteus", "ramsis", "autoscale", "serving")
#: top-level modules (and their submodules) that do I/O
IO_MODULES = ("kafka", "aiokafka", "faust", "confluent_kafka", "redis", "shared.adapters")
SIMULATOR = ("shared.sim",)


def _modules(packages: tuple[str, ...]) -> list[Path]:
    return sorted(f for p in packages if (REPO_ROOT / "shared" / p).is_dir()
                  for f in (REPO_ROOT / "shared" / p).rglob("*.py"))


def _module(path: Path) -> str:
    """The dotted name of a module of the repository (a package's ``__init__`` is the package)."""
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, ``from a import b`` also as ``a.b``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _offending(source: str, module: str, banned: tuple[str, ...], *, is_package: bool = False) -> list[str]:
    """``module:line imports name`` for every import of ``banned`` modules or their submodules."""
    imports = sorted(set(_imports(source, module, is_package=is_package)))
    return [f"{module}:{line} imports {name}" for line, name in imports
            if any(name == b or name.startswith(b + ".") for b in banned)]


def _check(path: Path, banned: tuple[str, ...]) -> list[str]:
    return _offending(path.read_text(), _module(path), banned, is_package=path.name == "__init__.py")


def _id(path: Path) -> str:
    return path.relative_to(REPO_ROOT / "shared").as_posix()


@pytest.mark.parametrize("path", _modules(PURE), ids=_id)
def test_pure_packages_import_no_broker_redis_or_adapter(path: Path) -> None:
    assert _check(path, IO_MODULES) == []


@pytest.mark.parametrize("path", _modules(POLICY), ids=_id)
def test_policy_packages_do_not_import_the_simulator(path: Path) -> None:
    assert _check(path, SIMULATOR) == []


def test_the_check_sees_type_checking_lazy_and_relative_imports() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    import redis.client\n"
              "def lazy():\n    from shared.adapters import topics\n    from ..sim import engine\n")
    assert _offending(source, "shared.policy.probe", IO_MODULES) == [
        "shared.policy.probe:3 imports redis.client",
        "shared.policy.probe:5 imports shared.adapters",
        "shared.policy.probe:5 imports shared.adapters.topics",
    ]
    assert _offending(source, "shared.policy.probe", SIMULATOR) == [
        "shared.policy.probe:6 imports shared.sim",
        "shared.policy.probe:6 imports shared.sim.engine",
    ]
    assert _offending("from . import fcfs\nimport redisearch\n", "shared.policy", IO_MODULES, is_package=True) == []
