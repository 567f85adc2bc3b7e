"""The import graph: the floors hold. Policies stay pure, the contract they implement stands on nothing of
theirs, and neither policies nor the simulator reach up into adapters or services.

Read with `ast`, never imported, so an offending import is found wherever it sits: at module level, under
``TYPE_CHECKING``, or lazily inside a function.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.settings import REPO_ROOT

SHARED = REPO_ROOT / "shared"
#: the modules of ``shared/`` that do I/O, with why; every other module of ``shared/`` is pure (paths
#: relative to ``shared/``, a folder standing for everything in it). The modelzoo, ``onnx_runtime`` and the
#: profile loaders read and write files, but talk to no broker, Redis or network: they are held to the rule
DOES_IO = {
    "adapters": "the I/O layer itself: Kafka, Redis, the client",
    "settings.py": "reads the MERIDIAN_* environment variables",
    "metrics.py": "the Prometheus exporter: serves /metrics over HTTP (prometheus_client.start_http_server)",
}
#: the modules of ``shared/`` that may read the environment (make a ``Settings``), with why
READS_ENVIRONMENT = {
    "adapters": "the I/O layer: connects where the settings say",
    "settings.py": "defines the settings",
}
#: policy packages (under ``shared/``): no adapter, no service, no simulator
POLICY = ("policy", "kairos", "infaas", "proteus", "ramsis", "autoscale", "serving")
#: top-level modules (and their submodules) that do I/O: brokers, Redis, the adapters, network servers/clients
IO_MODULES = ("kafka", "aiokafka", "faust", "confluent_kafka", "redis", "shared.adapters",
              "prometheus_client", "socket", "http.client", "http.server", "urllib.request", "requests", "httpx",
              "aiohttp")
ADAPTERS, SERVICES, SIMULATOR = "shared.adapters", "services", "shared.sim"
#: the policy contract
CONTRACT = SHARED / "policy" / "base.py"


def _all_modules() -> list[Path]:
    return sorted(SHARED.rglob("*.py"))


def _except(exempt: dict[str, str]) -> list[Path]:
    """Every module of ``shared/`` outside ``exempt``."""
    return [f for f in _all_modules()
            if not any(f == SHARED / e or (SHARED / e).is_dir() and (SHARED / e) in f.parents for e in exempt)]


def _modules(packages: tuple[str, ...]) -> list[Path]:
    return sorted(f for p in packages if (SHARED / p).is_dir() for f in (SHARED / p).rglob("*.py"))


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


def _within(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in modules)


def _offending(source: str, module: str, banned: tuple[str, ...], *, is_package: bool = False,
               allowed: tuple[str, ...] = ()) -> list[str]:
    """``module:line imports name`` for every import of ``banned`` modules or their submodules, except of
    ``allowed`` ones (or theirs)."""
    imports = sorted(set(_imports(source, module, is_package=is_package)))
    return [f"{module}:{line} imports {name}" for line, name in imports
            if _within(name, banned) and not _within(name, allowed)]


def _check(path: Path, banned: tuple[str, ...], *, allowed: tuple[str, ...] = ()) -> list[str]:
    return _offending(path.read_text(), _module(path), banned, is_package=path.name == "__init__.py",
                      allowed=allowed)


def _id(path: Path) -> str:
    return path.relative_to(SHARED).as_posix()


# -- I/O: every module of shared/ but the ones that do I/O ----------------------------------------------------

@pytest.mark.parametrize("path", _except(DOES_IO), ids=_id)
def test_pure_modules_import_no_broker_redis_adapter_or_network(path: Path) -> None:
    assert _check(path, IO_MODULES) == []


@pytest.mark.parametrize("exempt", [*DOES_IO, *READS_ENVIRONMENT])
def test_every_exemption_names_a_module_of_shared(exempt: str) -> None:
    assert (SHARED / exempt).exists(), f"shared/{exempt} is gone: drop its exemption"


def test_the_pure_modules_cover_every_top_level_module_and_package_of_shared() -> None:
    pure = {f.relative_to(SHARED).parts[0] for f in _except(DOES_IO)}
    top = {p.name for p in SHARED.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert pure == top - set(DOES_IO)


# -- (a) the contract stands on no policy -----------------------------------------------------------------------

def _contract_banned() -> list[str]:
    """Every policy package, the policy package the contract sits in and its sibling modules, and the fleet
    reconciler (which builds on the contract)."""
    siblings = [_module(f) for f in sorted((SHARED / "policy").glob("*.py")) if f != CONTRACT]
    return [f"shared.{p}" for p in POLICY if p != "policy"] + siblings + ["shared.fleet"]


@pytest.mark.parametrize("banned", _contract_banned())
def test_the_policy_contract_imports_no_policy(banned: str) -> None:
    assert _check(CONTRACT, (banned,), allowed=(_module(CONTRACT),)) == []


# -- (b) policies reach no adapter, service or simulator ---------------------------------------------------------

@pytest.mark.parametrize("path", _modules(POLICY), ids=_id)
def test_policy_packages_import_no_adapter_service_or_simulator(path: Path) -> None:
    assert _check(path, (ADAPTERS, SERVICES, SIMULATOR)) == []


# -- (c) the simulator reaches no adapter or service -------------------------------------------------------------

@pytest.mark.parametrize("path", _modules(("sim",)), ids=_id)
def test_the_simulator_imports_no_adapter_or_service(path: Path) -> None:
    assert _check(path, (ADAPTERS, SERVICES)) == []


# -- shared/ stands below services --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _all_modules(), ids=_id)
def test_shared_imports_no_service(path: Path) -> None:
    assert _check(path, (SERVICES,)) == []


# -- (d) pure code is handed its settings: it never reads the environment ----------------------------------------
# ``Settings`` as a type (``from_settings(settings: Settings)``) is fine; making one reads the environment.

def _environment_readers() -> tuple[str, ...]:
    """The classes of ``shared/settings.py`` that read the environment when made (``BaseSettings``, directly or
    through another)."""
    classes = [n for n in ast.parse((SHARED / "settings.py").read_text()).body if isinstance(n, ast.ClassDef)]
    readers = {"BaseSettings"}
    while True:
        more = {c.name for c in classes if any(_name(b) in readers for b in c.bases)} - readers
        if not more:
            return tuple(sorted(readers - {"BaseSettings"}))
        readers |= more


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _environment_reads(source: str, module: str, readers: tuple[str, ...]) -> list[str]:
    """``module:line makes name()`` for every call of one of ``readers``, by name, as an attribute
    (``settings.Settings()``) or under an alias (``from shared.settings import Settings as S``)."""
    tree = ast.parse(source)
    names = set(readers) | {alias.asname for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                            for alias in node.names if alias.name in readers and alias.asname}
    return sorted(f"{module}:{node.lineno} makes {_name(node.func)}()" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and _name(node.func) in names)


@pytest.mark.parametrize("path", _except(READS_ENVIRONMENT), ids=_id)
def test_shared_modules_never_make_settings(path: Path) -> None:
    assert _environment_reads(path.read_text(), _module(path), _environment_readers()) == []


# -- settings: validated elsewhere, they know no policy ------------------------------------------------------------

def test_settings_import_no_policy_package() -> None:
    """Policy names are checked where policies are built (the registry), so settings sit below the policies."""
    assert _check(SHARED / "settings.py", tuple(f"shared.{p}" for p in POLICY)) == []


# -- the checks can fail -------------------------------------------------------------------------------------------

def test_the_check_sees_type_checking_lazy_and_relative_imports() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    import redis.client\n"
              "def lazy():\n    from shared.adapters import topics\n    from ..sim import engine\n")
    assert _offending(source, "shared.policy.probe", IO_MODULES) == [
        "shared.policy.probe:3 imports redis.client",
        "shared.policy.probe:5 imports shared.adapters",
        "shared.policy.probe:5 imports shared.adapters.topics",
    ]
    assert _offending(source, "shared.policy.probe", (SIMULATOR,)) == [
        "shared.policy.probe:6 imports shared.sim",
        "shared.policy.probe:6 imports shared.sim.engine",
    ]
    assert _offending("from . import fcfs\nimport redisearch\n", "shared.policy", IO_MODULES, is_package=True) == []
    assert _offending("from prometheus_client import Counter\n", "shared.fleet", IO_MODULES) == [
        "shared.fleet:1 imports prometheus_client", "shared.fleet:1 imports prometheus_client.Counter"]


def test_the_contract_check_sees_policies_siblings_and_the_fleet_but_not_itself() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "from shared.policy.base import Placement\n"
              "if TYPE_CHECKING:\n    from shared.fleet import FleetCommands\n"
              "def lazy():\n    from . import fcfs\n    import shared.kairos.planner\n")
    found = [o for banned in _contract_banned()
             for o in _offending(source, "shared.policy.base", (banned,), allowed=("shared.policy.base",))]
    assert sorted(set(found)) == [
        "shared.policy.base:4 imports shared.fleet",
        "shared.policy.base:4 imports shared.fleet.FleetCommands",
        "shared.policy.base:6 imports shared.policy",  # the package: its __init__ runs
        "shared.policy.base:6 imports shared.policy.fcfs",
        "shared.policy.base:7 imports shared.kairos.planner",
    ]


def test_the_layer_checks_see_services_adapters_and_the_simulator() -> None:
    source = "import services.scheduler.app\nfrom shared.adapters.client import MeridianClient\nfrom shared import sim\n"
    assert _offending(source, "shared.kairos.probe", (ADAPTERS, SERVICES, SIMULATOR)) == [
        "shared.kairos.probe:1 imports services.scheduler.app",
        "shared.kairos.probe:2 imports shared.adapters.client",
        "shared.kairos.probe:2 imports shared.adapters.client.MeridianClient",
        "shared.kairos.probe:3 imports shared.sim",
    ]
    assert _offending(source, "shared.sim.probe", (ADAPTERS, SERVICES)) == [
        "shared.sim.probe:1 imports services.scheduler.app",
        "shared.sim.probe:2 imports shared.adapters.client",
        "shared.sim.probe:2 imports shared.adapters.client.MeridianClient",
    ]
    assert _offending("import servicesx\nfrom shared.simulation import x\n", "shared.kairos.probe",
                      (ADAPTERS, SERVICES, SIMULATOR)) == []


def test_the_environment_check_sees_made_settings_but_not_the_type() -> None:
    assert _environment_readers() == ("KafkaSecurity", "Settings")
    source = ("from shared import settings\n"
              "from shared.settings import Settings, Settings as S\n"
              "def from_settings(cls, settings: Settings):\n    return settings.kairos_data_dir\n"
              "def f():\n    return Settings().kairos_data_dir, S(), settings.Settings(redis_url='x')\n")
    assert _environment_reads(source, "shared.profiles.probe", _environment_readers()) == [
        "shared.profiles.probe:6 makes S()",
        "shared.profiles.probe:6 makes Settings()",
        "shared.profiles.probe:6 makes Settings()",
    ]
