"""One spelling of an axis: the key a user writes in a sweep file works wherever an axis is named.

A sweep file grids fields of the trial config by their dotted paths (`model.gate.position`,
`train.lr`). Expansion folds the gate's fields into one composed axis, `model.gate`, whose values
are gate labels (`none`, `G1-elementwise`): that is what a trial records (its axis tag, the
report's rows, the run names). A user who writes the file's key, `model.gate.position: none`,
means every trial whose resolved config has that value, whatever the trial records.

The rule, in one place:

- a **key** is a dotted field path of the trial config (`model.gate.position`, `train.lr`) or a
  composed axis (`model.gate`, the gate's label);
- a trial's **values** are its resolved config flattened to dotted paths (the fields that do not
  apply left out, as its MLflow params are: an ungated model has no `model.gate.granularity`),
  plus the composed labels (`trial_values` for a `TrialConfig`; a run's params and axis tags are
  the same record read back from the store);
- a trial **matches** `key=value` when its value at the key is the value, numbers by value
  (`0.01` is `1.0e-2`), `null` / `none` / None as one, anything else as text
  (`orchestrator.core.values.same_value`, the one rule of the ladder and the report too).

`recorded_axis` says which recorded axis a key belongs to (`model.gate` for every
`model.gate.*` field), so a reader can list the levels a key selects. Callers: `gatesweep report
--baseline`, `dashboards.results` (the file's keys as columns beside the composed label), and the
ladder's promotion baseline (`matches(trial_values(t.axis_config), key, value)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatedmodels.typedconfig import flatten_dict
from orchestrator.core.values import same_value

GATE_AXIS = "model.gate"
"""The composed gate axis: a trial records the gate's fields as one label (`G1-elementwise`)."""
COMPOSED = (GATE_AXIS,)
"""Axes a trial records as one label made of several fields."""


def recorded_axis(key: str) -> str:
    """The axis a trial records for a key a user writes: `model.gate` for `model.gate` and every
    `model.gate.*` field, the key itself for anything else."""
    for axis in COMPOSED:
        if key == axis or key.startswith(axis + "."):
            return axis
    return key


def is_field_of_composed(key: str) -> bool:
    """Whether `key` is a field folded into a composed axis (`model.gate.position`)."""
    return recorded_axis(key) != key


def trial_values(config: Any) -> dict[str, Any]:
    """A trial config's values as every spelling names them: its dotted fields (without the gate
    fields that do not apply, as the trial's MLflow params) and the composed gate label."""
    flat = flatten_dict(config.to_dict())
    gate = config.model.gate
    for name in gate.unused_fields():
        flat.pop(f"{GATE_AXIS}.{name}", None)
    flat[GATE_AXIS] = gate.label
    return flat


def matches(values: Mapping[str, Any], key: str, value: Any) -> bool:
    """Whether a trial with these `values` (`trial_values`, or a run's params and axis tags) has
    `value` at `key`; a key it has no value for (a field that does not apply) does not match."""
    return key in values and same_value(values[key], value)


def matches_all(values: Mapping[str, Any], selection: Mapping[str, Any]) -> bool:
    """Whether a trial matches every `key: value` of a selection (`{model.gate.position: none}`)."""
    return all(matches(values, k, v) for k, v in selection.items())
