"""INFaaS (USENIX ATC'21): model-less variant selection, pure and I/O-free.

* `state` - the variant-instance state machine of Fig. 4 (`next_state`);
* `records` - static variant profiles and dynamic instance/worker state as frozen records;
* `metadata` - the `MetadataStore` interface and its in-memory implementation (on Redis:
  `shared.adapters.infaas_store`);
* `select` - getVariant (Algorithm 1) on a `VariantIndex`, and the brute-force reference;
* `dispatch` - `InfaasDispatch`, getVariant as the scheduler's `DispatchPolicy`;
* `monitor` - `InfaasMonitor`, window statistics and Fig. 4 states fed by events;
* `daemon` - `InstanceMonitor`, the monitoring daemon: worker events to the monitor, snapshots to the store.
"""
from shared.infaas.dispatch import InfaasDispatch
from shared.infaas.metadata import InMemoryMetadataStore, MetadataStore
from shared.infaas.records import FleetState, InstanceRecord, MetadataSnapshot, VariantRecord, WorkerRecord
from shared.infaas.select import (
    Selection,
    SelectionStatus,
    VariantIndex,
    VariantQuery,
    brute_force_get_variant,
    get_variant,
)
from shared.infaas.state import InstanceState, InstanceWindow, StateThresholds, next_state

__all__ = [
    "FleetState",
    "InMemoryMetadataStore",
    "InfaasDispatch",
    "InstanceRecord",
    "InstanceState",
    "InstanceWindow",
    "MetadataSnapshot",
    "MetadataStore",
    "Selection",
    "SelectionStatus",
    "StateThresholds",
    "VariantIndex",
    "VariantQuery",
    "VariantRecord",
    "WorkerRecord",
    "brute_force_get_variant",
    "get_variant",
    "next_state",
]
