"""``make demo``'s third act on the real broker: photographs, each a JPEG in its query, classified by a real
onnxruntime worker holding EfficientNet-Lite0/1/2, each answer equal to the variant that served it run in
this process on the same file."""
from __future__ import annotations

import pytest

from services.demo import photos as act

pytestmark = pytest.mark.integration


def test_the_photographs_act_answers_every_photograph_as_the_variant_run_in_process(stack, tmp_path) -> None:
    settings = act.fields(stack.settings())
    with act.running(stack.env, tmp_path / "logs", settings, metrics_port=19425) as client:
        answers = act.classify(client, settings, rate=4.0, duration_s=5.0)
    assert len(answers) >= 10
    assert {a.status for a in answers} == {"ok"}, [a for a in answers if a.status != "ok"]
    assert all(a.equal_in_process for a in answers), [a for a in answers if not a.equal_in_process]
    assert all(a.variant in {"efficientnet-lite1", "efficientnet-lite2"} for a in answers if a.goal == 0.76)
    assert all(a.variant == "efficientnet-lite2" for a in answers if a.goal == 0.77)
    table = act.format_answers(answers)
    assert table.splitlines()[0].split()[:2] == ["goal", "queries"] and "a cat: answered" in table
