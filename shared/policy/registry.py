"""Every policy by name, with all it needs to run, so that the scheduler, the planner, the replay, the
simulator and the CLI build a policy one way and say the same thing.

An entry declares a policy: its dispatch class, the options it takes from the settings, the feeds that
must run beside the scheduler for it, its planner with the loop that drives it, and its autoscaler.
Adding a policy is its own module plus one `register` call here; nothing in ``services/`` changes.
Modules are imported only when a policy is built (keeps scipy & co. out of processes that do not serve
it). Pure: a policy that reads a store is handed the reader (`BuildContext.policy_sets`), the caller's
adapter.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from importlib import import_module
from typing import TYPE_CHECKING, Any

from shared.policy.base import DispatchPolicy, FleetController, Planner

if TYPE_CHECKING:
    from shared.autoscale.autoscaler import BaseAutoscaler
    from shared.autoscale.catalogue import MachineCatalogue
    from shared.catalogue import Catalogue
    from shared.policy.per_application import PerApplicationDispatch
    from shared.profiles.format import ProfileSet
    from shared.settings import Settings


class Feed(Enum):
    """What runs beside the scheduler for a policy; the value says it to an operator."""

    METADATA = "the metadata-store feed"
    POLICY_SETS = "the RAMSIS policy generator"


@dataclass(frozen=True)
class BuildContext:
    """What the running system hands a policy it builds."""

    settings: Settings
    #: how often the scheduler's core steps (a policy that batches on purpose waits in these steps)
    step_interval_s: float
    #: reads a stored policy set by name (the caller's store adapter); None where there is no store
    policy_sets: Callable[[str], Any] | None = None


@dataclass(frozen=True)
class Planning:
    """A planner's control loop, built from the settings: ``build`` returns the loops by what each plans
    (an application, or ``"fleet"`` for one loop over every application)."""

    build: Callable[[Settings, Catalogue], dict[str, FleetController]]
    #: True: one loop plans all applications from each statistics window's arrivals (Proteus); False: a
    #: loop per application, fed each application's statistics as they come (Kairos)
    fleet_wide: bool


def _no_options(context: BuildContext) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class PolicyEntry:
    name: str
    #: ``factory(profiles, **options)``; None for a name that only plans or scales
    dispatch: Callable[..., DispatchPolicy] | None = None
    options: Callable[[BuildContext], dict[str, Any]] = _no_options
    feeds: tuple[Feed, ...] = ()
    #: ``factory(profiles, **options)``
    planner: Callable[..., Planner] | None = None
    planning: Planning | None = None
    #: ``factory(machine_catalogue, **options)``: the autoscaler the autoscaler service and the simulator run
    autoscaler: Callable[..., BaseAutoscaler] | None = None


_ENTRIES: dict[str, PolicyEntry] = {}


def _lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name(*args, **kwargs)``, importing ``module`` at the first call."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(import_module(module), name)(*args, **kwargs)

    return call


def register(entry: PolicyEntry) -> None:
    if entry.name in _ENTRIES:
        raise ValueError(f"policy {entry.name!r} is already registered")
    _ENTRIES[entry.name] = entry


def unregister(name: str) -> None:
    """For a test that registers a policy of its own."""
    del _ENTRIES[name]


def dispatch_names() -> list[str]:
    return sorted(n for n, e in _ENTRIES.items() if e.dispatch is not None)


def planner_names() -> list[str]:
    return sorted(n for n, e in _ENTRIES.items() if e.planner is not None)


def autoscaler_names() -> list[str]:
    return sorted(n for n, e in _ENTRIES.items() if e.autoscaler is not None)


def dispatch_entry(name: str) -> PolicyEntry:
    entry = _ENTRIES.get(name)
    if entry is None or entry.dispatch is None:
        raise ValueError(f"unknown dispatch policy {name!r}; valid: {', '.join(dispatch_names())}")
    return entry


def planner_entry(name: str) -> PolicyEntry:
    entry = _ENTRIES.get(name)
    if entry is None or entry.planner is None or entry.planning is None:
        raise ValueError(f"unknown planner {name!r}; valid: {', '.join(planner_names())}")
    return entry


def make_dispatch(name: str, profiles: ProfileSet, **options: Any) -> DispatchPolicy:
    """The dispatch policy ``name`` with the options given (none: its defaults)."""
    factory = dispatch_entry(name).dispatch
    assert factory is not None
    return factory(profiles, **options)


def make_planner(name: str, profiles: ProfileSet, **options: Any) -> Planner:
    factory = planner_entry(name).planner
    assert factory is not None
    return factory(profiles, **options)


def make_autoscaler(name: str, catalogue: MachineCatalogue, **options: Any) -> BaseAutoscaler:
    """``make_autoscaler("sm_plus", catalogue, variants={"app": ("m", "gpu")})``; options go to the class."""
    entry = _ENTRIES.get(name)
    if entry is None or entry.autoscaler is None:
        raise ValueError(f"unknown autoscaler {name!r}; valid: {', '.join(autoscaler_names())}")
    return entry.autoscaler(catalogue, **options)


def build_dispatch(name: str, profiles: ProfileSet, context: BuildContext) -> DispatchPolicy:
    """The dispatch policy ``name`` as the running system serves with it; ValueError if it cannot be built
    now (or the store reader's own error)."""
    return make_dispatch(name, profiles, **dispatch_entry(name).options(context))


def build_policy(profiles: ProfileSet, context: BuildContext) -> PerApplicationDispatch:
    """Each application's configured policy (``scheduler_policy`` for those not named), switchable while
    serving: what the live scheduler serves with, and what a replay simulates."""
    from shared.policy.per_application import PerApplicationDispatch

    settings = context.settings
    return PerApplicationDispatch(
        build_dispatch(settings.scheduler_policy, profiles, context),
        {application: build_dispatch(name, profiles, context)
         for application, name in settings.application_policies.items()})


def build_planning(settings: Settings, catalogue: Catalogue) -> tuple[PolicyEntry, dict[str, FleetController]]:
    """The configured planner's entry and its control loops."""
    entry = planner_entry(settings.planner)
    assert entry.planning is not None
    return entry, entry.planning.build(settings, catalogue)


def planning_controller(settings: Settings, catalogue: Catalogue) -> FleetController:
    """The configured planner's loops as the one controller the simulator drives."""
    from shared.policy.per_application import PerApplicationPlanning

    entry, loops = build_planning(settings, catalogue)
    assert entry.planning is not None
    return loops["fleet"] if entry.planning.fleet_wide else PerApplicationPlanning(loops)


def feeds_of(names: set[str]) -> set[Feed]:
    """The feeds the dispatch policies ``names`` need."""
    return {feed for name in names for feed in dispatch_entry(name).feeds}


def configured_policies(settings: Settings) -> set[str]:
    """Every dispatch policy the settings name: the feeds of these start with the scheduler."""
    return {settings.scheduler_policy, *settings.application_policies.values()}


# -- the policies -------------------------------------------------------------------------------------

def _kairos_options(context: BuildContext) -> dict[str, Any]:
    # the safeguard stays the paper's xi live: a margin learned from live completions would also count the
    # transport's jitter as prediction error, and has not been measured live yet (bench-kairos measures it)
    return {"margin_quantile": None, "batch_queries": context.settings.kairos_batch_queries}


def _infaas_options(context: BuildContext) -> dict[str, Any]:
    from shared.infaas.monitor import MonitorConfig

    settings = context.settings
    return {"monitor": MonitorConfig.from_settings(settings), "worker_timeout_s": settings.worker_timeout_s,
            "max_utilization": settings.infaas_max_dispatch_utilization}


def _proteus_options(context: BuildContext) -> dict[str, Any]:
    # Proteus batches on purpose (it waits): it is told how often the scheduler steps
    return {"decision_interval_s": context.step_interval_s, "batching": context.settings.proteus_batching}


def _ramsis_options(context: BuildContext) -> dict[str, Any]:
    name = context.settings.ramsis_policy_set
    policies = context.policy_sets(name) if context.policy_sets is not None else ()
    if not len(policies):
        raise ValueError(f"no RAMSIS policy set {name!r} in the store; generate it with "
                         "`python -m services.ramsis_generate ... --name NAME --redis-url URL`")
    return {"policy_set": policies}


def _proteus_planning(settings: Settings, catalogue: Catalogue) -> dict[str, FleetController]:
    from shared.proteus.control import fleet_planning

    return {"fleet": fleet_planning(settings, catalogue)}


register(PolicyEntry("fcfs", dispatch=_lazy("shared.policy.fcfs", "FcfsDispatch")))
register(PolicyEntry("kairos", dispatch=_lazy("shared.kairos.dispatch", "KairosDispatch"), options=_kairos_options,
                     planner=_lazy("shared.kairos.planner", "KairosPlanner"),
                     planning=Planning(_lazy("shared.kairos.control", "application_planning"), fleet_wide=False)))
register(PolicyEntry("infaas", dispatch=_lazy("shared.infaas.dispatch", "InfaasDispatch"), options=_infaas_options,
                     feeds=(Feed.METADATA,), autoscaler=_lazy("shared.autoscale.autoscaler", "InfaasAutoscaler")))
register(PolicyEntry("proteus", dispatch=_lazy("shared.proteus.dispatch", "ProteusDispatch"),
                     options=_proteus_options, planner=_lazy("shared.proteus.planner", "ProteusPlanner"),
                     planning=Planning(_proteus_planning, fleet_wide=True)))
register(PolicyEntry("ramsis", dispatch=_lazy("shared.ramsis.dispatch", "RamsisDispatch"), options=_ramsis_options,
                     feeds=(Feed.POLICY_SETS,)))
register(PolicyEntry("sm_plus", autoscaler=_lazy("shared.autoscale.baselines", "SmPlusAutoscaler")))
register(PolicyEntry("clipper_plus", autoscaler=_lazy("shared.autoscale.baselines", "StaticAutoscaler")))
