"""The photographs act's table: per accuracy goal in the order asked, the variants that served it and the
shares checked; per subject, the classes answered by name."""
from __future__ import annotations

from services.demo.photos import PhotoAnswer, format_answers
from shared.modelzoo.photos import class_name


def answer(goal, variant, predicted, *, within=True, equal=True, names=True, subject="a cat") -> PhotoAnswer:
    return PhotoAnswer(subject, goal, "ok", variant, predicted, within, equal, names)


def test_goals_come_in_the_acts_order_with_their_variants_and_shares() -> None:
    table = format_answers([
        answer(0.77, "efficientnet-lite2", 285),
        answer(None, "efficientnet-lite0", 281, within=False),
        answer(None, "efficientnet-lite2", 999, names=False, subject="a rocket"),
        PhotoAnswer("a rocket", 0.77, "unanswered", None, None, False, False, False),
    ]).splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["none", "77%"]
    assert "efficientnet-lite0 1, efficientnet-lite2 1" in table[1] and table[1].split()[-3:] == ["50.0%", "100.0%", "50.0%"]
    assert "efficientnet-lite2 1, unanswered 1" in table[2] and table[2].split()[-3:] == ["50.0%", "50.0%", "50.0%"]
    assert table[3] == "a cat: answered Egyptian cat (1), tabby (1)"
    assert table[4] == "a rocket: answered ImageNet class 999 (1)"


def test_a_class_outside_the_subjects_is_named_by_its_number() -> None:
    assert class_name(281) == "tabby" and class_name(7) == "ImageNet class 7"
