"""The paper's load-granular baselines, on the same workers and models as RAMSIS (simulator only)."""
from shared.ramsis.baselines.jellyfish import JellyfishDispatch, jellyfish_choice
from shared.ramsis.baselines.load_granular import LoadGranularDispatch
from shared.ramsis.baselines.model_switching import (
    ModelSwitchingDispatch,
    ModelSwitchingTable,
    model_switching_batch,
)

__all__ = [
    "JellyfishDispatch",
    "LoadGranularDispatch",
    "ModelSwitchingDispatch",
    "ModelSwitchingTable",
    "jellyfish_choice",
    "model_switching_batch",
]
