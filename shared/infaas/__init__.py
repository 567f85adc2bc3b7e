"""INFaaS (USENIX ATC'21): model-less variant selection, pure and I/O-free except the Redis store.

* `state` - the variant-instance state machine of Fig. 4 (`next_state`);
* `records` - static variant profiles and dynamic instance/worker state as frozen records;
* `metadata` - the `MetadataStore` interface, in memory and on Redis (hashes and sorted sets);
* `select` - getVariant (Algorithm 1) on a `VariantIndex`, and the brute-force reference;
* `dispatch` - `InfaasDispatch`, getVariant as the scheduler's `DispatchPolicy`.
"""
from shared.infaas.dispatch import InfaasDispatch
from shared.infaas.metadata import InMemoryMetadataStore, MetadataStore, RedisMetadataStore
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
    "RedisMetadataStore",
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
