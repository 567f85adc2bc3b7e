"""The Variant-Generator and Variant-Profiler on a small generated classifier."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from shared.modelzoo.variants import (
    LEVEL_KEY,
    MAX_BATCH_KEY,
    PRECISION_KEY,
    Generation,
    ProfilingBudget,
    generate_variants,
    optimization_level_of,
    profile_variants,
    variant_name,
)
from shared.onnx_runtime import make_session, run_batch

ROW_SHAPE = (1, 4, 4)
RNG = np.random.default_rng(0)
WEIGHT = RNG.normal(size=(16, 5)).astype(np.float32)
QUICK = ProfilingBudget(num_warmup=1, num_repeats=3, num_rounds=1, max_seconds=0.05, num_loads=1, measure_memory=False)


def classifier_bytes(batch_dim="batch") -> bytes:
    """``logits = relu(flatten(x) @ W)``: input [N, 1, 4, 4], output [N, 5] (IR 8 for onnxruntime 1.31)."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch_dim, *ROW_SHAPE])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch_dim, 5])
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["input"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["xw"]),
         helper.make_node("Relu", ["xw"], ["logits"])],
        "tiny", [x], [y], initializer=[numpy_helper.from_array(WEIGHT, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def validation_set(n=40):
    x = RNG.normal(size=(n, *ROW_SHAPE)).astype(np.float32)
    y = run_batch(make_session(classifier_bytes()), x).argmax(axis=1)
    return x, y


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(classifier_bytes())
    return path


def test_generates_every_precision_level_and_max_batch(model_path, tmp_path):
    generation = generate_variants(model_path, tmp_path / "out", model_name="tiny", input_shape=ROW_SHAPE)
    names = {v.spec.name for v in generation.variants}
    assert names == {f"tiny-{p}-{o}-b{b}" for p in ("fp32", "fp16", "int8") for o in ("basic", "all") for b in (8, 64)}
    assert generation.skipped == ()
    for variant in generation.variants:
        props = {p.key: p.value for p in onnx.load(str(variant.path)).metadata_props}
        assert props[LEVEL_KEY] == variant.spec.optimization_level == optimization_level_of(variant.path)
        assert (props[PRECISION_KEY], props[MAX_BATCH_KEY]) == (variant.spec.precision, str(variant.spec.max_batch))
        assert variant.path.name == f"{variant.spec.name}.onnx" and variant.providers
    fp16 = next(v for v in generation.variants if v.spec.precision == "fp16")
    session = make_session(fp16.path)
    assert session.get_inputs()[0].type == "tensor(float)"  # keep_io_types: callers still send float32
    x = RNG.normal(size=(3, *ROW_SHAPE)).astype(np.float32)
    assert run_batch(session, x).dtype == np.float32


def test_a_precision_nothing_runs_is_skipped_with_the_reason(model_path, tmp_path):
    generation = generate_variants(model_path, tmp_path / "out", model_name="tiny", input_shape=ROW_SHAPE,
                                   precisions=["fp32"], providers=[])
    assert generation.variants == ()
    assert [s.precision for s in generation.skipped] == ["fp32"]
    assert "cannot run" in generation.skipped[0].reason


def test_profiles_each_variant_at_its_level_and_up_to_its_max_batch(model_path, tmp_path):
    generation = generate_variants(model_path, tmp_path / "out", model_name="tiny", input_shape=ROW_SHAPE,
                                   precisions=["fp32", "int8"], optimization_levels=["basic"])
    profiles = {p.variant: p for p in profile_variants(generation, family="tiny", validation=validation_set(),
                                                       budget=QUICK)}
    assert set(profiles) == {"tiny-fp32-basic-b8", "tiny-fp32-basic-b64", "tiny-int8-basic-b8", "tiny-int8-basic-b64"}
    small, large = profiles["tiny-fp32-basic-b8"], profiles["tiny-fp32-basic-b64"]
    assert list(small.batch_latency_ms) == [1, 2, 4, 8] and small.max_batch == 8
    assert list(large.batch_latency_ms) == [1, 2, 4, 8, 16, 32, 64] and large.max_batch == 64
    assert small.batch_latency_ms[8] == large.batch_latency_ms[8]  # one graph, one measurement
    assert small.accuracy == 1.0 and small.family == "tiny" and small.device == "cpu-1t"
    assert profiles["tiny-int8-basic-b8"].accuracy >= 0.8  # quantization keeps most of the labels


def test_names_must_be_identifiers_of_at_most_128_characters(model_path, tmp_path):
    assert variant_name("resnet50", "int8", "all", 64) == "resnet50-int8-all-b64"
    with pytest.raises(ValueError, match="shorten"):
        variant_name("m" * 120, "fp32", "basic", 64)
    with pytest.raises(ValueError, match="must match"):
        generate_variants(model_path, tmp_path, model_name="bad name", input_shape=ROW_SHAPE)
    assert profile_variants(Generation((), ()), family="x", validation=validation_set()) == []
