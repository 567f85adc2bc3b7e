"""The scheduler's side of per-application policies: settings, the core it builds, switches it applies or
refuses (with the reason its dead letter carries), the policy gauge, and the operator's command."""
from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from schemas import SwitchPolicy
from services.cli import switch as switch_cli
from services.scheduler.app import build_context, make_core
from services.scheduler.switching import PolicySwitcher
from shared.catalogue import Catalogue
from shared.policy.per_application import PerApplicationDispatch
from shared.policy.registry import Feed
from shared.profiles import DeviceType, ProfileSet, VariantProfile
from shared.settings import Settings

PROFILES = ProfileSet(
    source="test", devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.1)], slo_ms={"fam": 100.0},
    variants=[VariantProfile(variant="small", family="fam", device="cpu", accuracy=0.9,
                             batch_latency_ms={1: 1.0, 8: 4.0}, max_batch=8)])
CATALOGUE = Catalogue(PROFILES, {"alpha": ["fam"], "beta": ["fam"]})


def gauge(application: str, policy: str) -> float | None:
    return REGISTRY.get_sample_value("meridian_scheduler_policy", {"application": application, "policy": policy})


def switcher(**settings: object) -> tuple[PolicySwitcher, PerApplicationDispatch]:
    config = Settings(**settings)
    core = make_core(config, CATALOGUE)
    return PolicySwitcher(core, feeds={Feed.METADATA}, context=build_context(config)), core.policy


def switch(application: str, policy: str) -> SwitchPolicy:
    return SwitchPolicy(application=application, policy=policy, requested_by="test", at=time.time())


def test_the_core_serves_each_configured_application_with_its_own_policy() -> None:
    core = make_core(Settings(scheduler_policy="fcfs", application_policies={"beta": "proteus"}), CATALOGUE)
    assert (core.policy.policy_of("alpha"), core.policy.policy_of("beta")) == ("fcfs", "proteus")
    for unknown in ({"scheduler_policy": "fifo"}, {"application_policies": {"alpha": "fifo"}}):
        with pytest.raises(SystemExit, match="scheduler: unknown dispatch policy 'fifo'; valid: fcfs, infaas, "):
            make_core(Settings(**unknown), CATALOGUE)


def test_a_switch_changes_one_application_and_the_gauge_says_so() -> None:
    applier, dispatch = switcher(application_policies={"beta": "kairos"})
    assert (gauge("alpha", "fcfs"), gauge("beta", "kairos")) == (1.0, 1.0)
    assert asyncio.run(applier.apply(switch("alpha", "proteus"))) is None
    assert (dispatch.policy_of("alpha"), dispatch.policy_of("beta")) == ("proteus", "kairos")
    assert (gauge("alpha", "proteus"), gauge("alpha", "fcfs"), gauge("beta", "kairos")) == (1.0, 0.0, 1.0)
    assert asyncio.run(applier.apply(switch("alpha", "proteus"))) is None, "the same policy again: nothing to do"
    assert dispatch.policy_of("alpha") == "proteus"


@pytest.mark.parametrize("application, policy, reason", [
    ("alpha", "fifo", "unknown dispatch policy 'fifo'; valid: fcfs, infaas, kairos, proteus, ramsis"),
    ("gamma", "fcfs", "unknown application 'gamma'; this scheduler serves: alpha, beta"),
    ("alpha", "ramsis", "dispatch policy 'ramsis' needs the RAMSIS policy generator, which this scheduler did not "
                        "start: name it in MERIDIAN_SCHEDULER_POLICY or MERIDIAN_APPLICATION_POLICIES when starting the "
                        "scheduler"),
])
def test_a_switch_the_scheduler_cannot_make_is_refused_with_the_reason(application: str, policy: str,
                                                                         reason: str) -> None:
    applier, dispatch = switcher()
    assert asyncio.run(applier.apply(switch(application, policy))) == reason
    assert dispatch.policy_of("alpha") == "fcfs"


def test_a_policy_that_cannot_be_built_now_is_refused() -> None:
    config = Settings(redis_url="redis://127.0.0.1:1/0")
    core = make_core(config, CATALOGUE)
    applier = PolicySwitcher(core, feeds={Feed.POLICY_SETS}, context=build_context(config))
    reason = asyncio.run(applier.apply(switch("alpha", "ramsis")))
    assert reason.startswith("cannot start dispatch policy 'ramsis' for application 'alpha': ")
    assert core.policy.policy_of("alpha") == "fcfs"


def test_the_command_explains_bad_input_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as help_exit:
        switch_cli.main(["--help"])
    assert help_exit.value.code == 0 and "--application" in capsys.readouterr().out
    for argv, message in [
        (["--application", "alpha", "--policy", "fifo"], "switch: unknown dispatch policy 'fifo'; valid: fcfs"),
        (["--policy", "fcfs"], "switch: the following arguments are required: --application (see --help)"),
        (["--application", "a b", "--policy", "fcfs"], "switch: malformed message: `application` may hold only"),
    ]:
        with pytest.raises(SystemExit) as bad:
            switch_cli.main(argv)
        assert str(bad.value.code).startswith(message) and "\n" not in str(bad.value.code)
