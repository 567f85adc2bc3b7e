"""The autoscaler service's catalogue and initial fleet, from the settings every process reads."""
from __future__ import annotations

import pytest

from services.autoscaler.app import autoscale_catalogue, initial_fleet
from shared.autoscale import InstanceSpec, StartWorker
from shared.settings import Settings


def settings(**fleet) -> Settings:
    return Settings(applications={"vision": ["efficientnet-lite"]}, application_slo_ms={"vision": 300.0},
                    local_device="none", **fleet)


def test_the_catalogue_is_the_simulators_one_instance_a_machine_with_the_applications_slo() -> None:
    catalogue = autoscale_catalogue(settings())
    assert [(a.name, a.family, a.slo_ms) for a in catalogue.applications] == [("vision", "efficientnet-lite", 300.0)]
    prices = {w.name: w.price_per_hour for w in catalogue.worker_types}
    assert all(o.cost_per_hour == prices[o.device] for o in catalogue.options)


def test_an_application_with_a_policy_and_workers_of_its_own_is_not_autoscaled() -> None:
    mixed = Settings(applications={"vision": ["efficientnet-lite"], "digits": ["digits"]}, scheduler_policy="infaas",
                     application_policies={"digits": "fcfs"}, local_device="none")
    assert [a.name for a in autoscale_catalogue(mixed).applications] == ["vision"]


def test_the_initial_fleet_serves_the_application_its_variants_may_serve() -> None:
    configured = settings(autoscaler_initial_fleet=[{"device": "cpu-1t", "variants": ["efficientnet-lite0"]},
                                                    {"device": "cpu-1t"}])
    assert initial_fleet(configured, autoscale_catalogue(configured)) == (
        StartWorker("init-cpu-1t-0", "cpu-1t", (InstanceSpec("efficientnet-lite0", "vision"),), "initial fleet"),
        StartWorker("init-cpu-1t-1", "cpu-1t", (), "initial fleet"))


@pytest.mark.parametrize(("machine", "says"), [
    ({"device": "g4dn"}, "device 'g4dn' has no profile; known: "),
    ({"device": "cpu-1t", "variants": ["resnet50"]}, "no application may use 'resnet50' on 'cpu-1t'"),
])
def test_an_initial_machine_it_cannot_start_is_named_before_anything_starts(machine, says) -> None:
    configured = settings(autoscaler_initial_fleet=[machine])
    with pytest.raises(SystemExit, match=says):
        initial_fleet(configured, autoscale_catalogue(configured))
