"""`gatesweep report --baseline KEY=VALUE`: the baseline row's values, each key spelt as the user
wrote it in the sweep file or as the report shows it (`orchestrator.spec.axes`).

`model.gate.position=none` selects the level of the composed axis `model.gate` whose runs have
that field (`none`); `model.gate=G1-elementwise` the level itself; `model.ffn_dim=395` the level
`395` of that axis (numbers by value). Each key must select exactly one level of an axis the sweep
varies; anything else is a `StoreError` (the report's user mistake) that lists the axes and the
values they take, by either spelling.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.core.values import same_value
from orchestrator.spec.axes import recorded_axis

from .levels import file_values
from .metrics import axis_text
from .records import RunRecord, StoreError, SweepRuns

MAX_VALUES = 12


def _field_values(runs: list[RunRecord], key: str) -> list[str]:
    return list(dict.fromkeys(v for r in runs if (v := r.params.get(key)) is not None))


def _choices(sweep: SweepRuns, axes: list[str], levels: Mapping[str, list[str]]) -> str:
    """`model.gate: none, G1-elementwise (model.gate.position: none, G1); train.lr: 0.001, 0.003`."""
    listed = file_values(sweep.sweep_file)
    parts = []
    for axis in axes:
        text = f"{axis}: {_few([axis_text(v) for v in levels[axis]])}"
        inside = [k for k in listed if k != axis and recorded_axis(k) == axis]
        fields = [f"{k}: {_few(_field_values(sweep.runs, k))}" for k in inside]
        parts.append(text + (f" ({'; '.join(fields)})" if fields else ""))
    return "; ".join(parts) or "none (every run has the same configuration)"


def _few(values: list[str]) -> str:
    return ", ".join(values[:MAX_VALUES]) + (f", ... ({len(values) - MAX_VALUES} more)" if len(values) > MAX_VALUES else "")


def resolve_baseline(sweep: SweepRuns, baseline: Mapping[str, str], axes: list[str], levels: Mapping[str, list[str]]) -> dict[str, str]:
    """Recorded axis -> the level the baseline row has on it: the one level every
    `--baseline KEY=VALUE` on that axis selects."""
    picked: dict[str, list[str]] = {}
    said: dict[str, list[str]] = {}
    for key, value in baseline.items():
        axis = recorded_axis(key)
        if axis not in axes:
            raise StoreError(
                f"--baseline {key}={value}: {key} is not an axis this sweep varies; the axes and their values: {_choices(sweep, axes, levels)}"
            )
        if key == axis:
            hits = [lv for lv in levels[axis] if same_value(lv, value)]
        else:
            hits = [lv for lv in levels[axis] if any(same_value(r.params.get(key), value) for r in sweep.runs if r.axes.get(axis) == lv)]
        picked[axis] = [lv for lv in picked.get(axis, hits) if lv in hits]
        said.setdefault(axis, []).append(f"{key}={value}")
    out: dict[str, str] = {}
    for axis, hits in picked.items():
        given = " ".join(f"--baseline {s}" for s in said[axis])
        if not hits:
            raise StoreError(f"{given}: no configuration has it; the axes and their values: {_choices(sweep, axes, levels)}")
        if len(hits) > 1:
            raise StoreError(
                f"{given}: {len(hits)} configurations of {axis} have it ({', '.join(hits)}); name one, e.g. --baseline {axis}={hits[0]}"
            )
        out[axis] = hits[0]
    return out
