"""One spelling of an axis (issue 33, item 4): the key a user writes in a sweep file
(`model.gate.position`) selects the trials whose resolved config has that value, whatever the
trial records (the composed `model.gate` label); the rule `report --baseline`, `dashboards.results`
and the ladder's promotion baseline share (`orchestrator.spec.axes`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.spec.axes import matches, matches_all, recorded_axis, same_value, trial_values
from orchestrator.spec.expand import expand
from orchestrator.spec.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[2]


def test_the_files_keys_select_expanded_trials_that_record_the_composed_label():
    e = expand(load_sweep(ROOT / "sweeps" / "quickstart.yaml"))
    assert "model.gate" in e.varying and "model.gate.position" not in e.varying  # what a trial records
    values = {t.name: trial_values(t.axis_config) for t in e.trials}
    ungated = [n for n, v in values.items() if matches(v, "model.gate.position", "none")]
    assert sorted(ungated) == [f"none-s{s}" for s in range(5)]
    assert [n for n, v in values.items() if matches(v, "model.gate", "none")] == ungated  # the composed spelling
    headwise = [n for n, v in values.items() if matches_all(v, {"model.gate.position": "G1", "model.gate.granularity": "headwise"})]
    assert sorted(headwise) == [f"G1-headwise-s{s}" for s in range(5)]
    # a field that does not apply is not a value: an ungated model has no granularity
    assert not any(matches(values[n], "model.gate.granularity", "elementwise") for n in ungated)
    assert all(matches(v, "train.lr", "1.0e-2") and matches(v, "train.seed", 0) == n.endswith("-s0") for n, v in values.items())


def test_recorded_axis_and_values_by_value():
    assert [recorded_axis(k) for k in ("model.gate.position", "model.gate", "model.gate.granularity", "train.lr")] == [
        "model.gate",
        "model.gate",
        "model.gate",
        "train.lr",
    ]
    assert same_value("0.01", 1.0e-2) and same_value(3, "3.0") and same_value("True", True) and same_value(None, "null")
    assert not same_value("G1", "g1") and not same_value("0.01", 0.02) and not same_value("none", 0)
    assert same_value("none", None)  # a flag's `none` is YAML's null (orchestrator.core.values; the ladder's rule before)
