"""`orchestrator.core.values.same_value`: the one rule by which a value a user writes is compared
with a value a run recorded, each edge of its docstring, and its three callers (the sweep file's
selections, the ladder's baseline arm, the report's level order) agreeing on it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dashboards.levels import level_order
from orchestrator.core.values import same_value
from orchestrator.ladder.runs import Arm, baseline_of, matching
from orchestrator.spec.axes import matches
from tests.dashboards.test_report_reading import gates_by_size

SAME = [
    # no value: None and its three texts
    (None, None),
    (None, "None"),
    (None, "null"),
    (None, "none"),
    ("none", "null"),
    (" None ", None),
    # booleans in any case
    (True, True),
    (True, "true"),
    ("True", True),
    ("TRUE", "true"),
    (False, "false"),
    (np.bool_(True), "True"),
    # numbers by value
    ("0.01", 1.0e-2),
    ("1e-3", "0.001"),
    (3, "3.0"),
    (197, 197.0),
    (np.int64(5), "5"),
    (np.float32(0.5), "0.5"),
    (0.1 + 0.2, 0.3),  # within the relative 1e-12 of a float's round trip through text
    (float("inf"), "Infinity"),
    ("inf", "1e400"),  # beyond a float's range
    (float("-inf"), "-inf"),
    (float("nan"), "nan"),
    ("NaN", float("nan")),
    # text, surrounding whitespace ignored
    ("G1-elementwise", "G1-elementwise"),
    (" softmax", "softmax "),
    ("", ""),
]
DIFFERENT = [
    (None, 0),
    (None, ""),
    (None, False),
    ("none", "None-ish"),
    (True, 1),
    ("true", 1.0),
    (False, 0),
    (False, "none"),
    ("0.01", 0.02),
    ("0.1", "0.01"),
    (1.0, 1.0 + 1e-9),
    (float("inf"), float("-inf")),
    (float("inf"), 1e308),
    (float("nan"), 0.0),
    (float("nan"), "nan-ish"),
    ("G1", "g1"),
    ("softmax", "soft max"),
    ("yes", True),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_same_values(a, b):
    assert same_value(a, b) and same_value(b, a)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_different_values(a, b):
    assert not same_value(a, b) and not same_value(b, a)


def test_the_rule_is_an_equivalence_on_every_value_above():
    values = [v for pair in SAME + DIFFERENT for v in pair]
    for a, b, c in itertools.product(values[::3], repeat=3):  # a third of them: 6,000 triples
        assert same_value(a, a), a
        if same_value(a, b) and same_value(b, c):
            assert same_value(a, c), (a, b, c)


def test_a_sweep_files_selection_the_ladder_and_the_report_agree():
    """The three callers take the one rule: a YAML `null`, a flag's `none` and a logged `None`."""
    assert matches({"model.ffn_dim": None}, "model.ffn_dim", "null") and matches({"model.ffn_dim": "None"}, "model.ffn_dim", None)
    assert matches({"train.lr": "0.01"}, "train.lr", 1.0e-2) and not matches({}, "train.lr", None)  # no value is not a missing key
    arms = [
        Arm("a", {"model.gate": "G1"}, {"model.ffn_dim": "176", "use_x": "True"}),
        Arm("b", {"model.gate": "none"}, {"model.ffn_dim": "none"}),
    ]
    assert [a.label for a in matching(arms, {"model.ffn_dim": None})] == ["b"]
    assert [a.label for a in matching(arms, {"use_x": True, "model.ffn_dim": 176.0})] == ["a"]
    assert baseline_of(arms, {"model.ffn_dim": "null"}).label == "b"

    file = {"grid": {"train.lr": ["1e-2", 3.0e-3]}}
    levels = level_order(gates_by_size(sweep_file=file, lrs=("0.003", "0.01")), ["train.lr"])
    assert levels["train.lr"] == ["0.01", "0.003"]  # the file's order, its texts read as numbers
