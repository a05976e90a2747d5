"""A sweep's groups of runs in the MLflow UI and their colours: a trial's group (its values on
the varied axes but the seeds), the tag name under which every group gets its own colour (the
UI's own checksum into its palette), an Optuna sample's group, and the view's grouping."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import names

GATE_AXIS = "model.gate"
PALETTE = (
    "#a6630c", "#c83243", "#b45091", "#8a63bf", "#434a93", "#137dae", "#04867d", "#308613", "#facb66", "#1f272d",
    "#445461", "#5f7281", "#8396a5", "#93320b", "#be501e", "#de7921", "#f2be88", "#115026", "#277c43", "#3ba65e",
    "#8ddda8", "#9e102c", "#c82d4c", "#e65b77", "#f792a6", "#0e538b", "#2272b4", "#4299e0", "#8acaff",
)  # fmt: skip
"""The run colours of MLflow 3.17's UI, in its order (`mlflow/server/js/build`)."""
MAX_SALT = 20000
"""Salts `group_key` tries (enough for ~20 groups of distinct colours; beyond, the most it found)."""
GROUP_AGGREGATE = "average"


def _checksum(text: str, t: int = 0, n: int = 0) -> tuple[int, int]:
    """The UI's running (t, n) over the UTF-16 code units of `text`, from (t, n)."""
    units = text.encode("utf-16-le")
    for i in range(0, len(units), 2):
        t = (t + int.from_bytes(units[i : i + 2], "little")) % 255
        n = (n + t) % 255
    return t, n


def ui_colour(uuid: str) -> str:
    """The colour MLflow's UI gives a run or group id it has no colour for (its
    `getStableColorForRun`: a Fletcher-style checksum of the UTF-16 code units into `PALETTE`)."""
    t, n = _checksum(uuid)
    return PALETTE[(t | n << 8) % len(PALETTE)]


def group_uuid(key: str, label: str) -> str:
    """The UI's id of the group of runs whose tag `key` is `label`."""
    return f"tag.{key}.{label}"


def group_colour(key: str, label: str) -> str:
    return ui_colour(group_uuid(key, label))


def group_key(sweep: str, labels: Iterable[str]) -> str:
    """The group tag's name under which the groups `labels` get the most distinct colours (all
    distinct when there are at most as many as the palette has): `gatesweep.group.NAME` when it
    does, else the first salt that does."""
    groups = sorted(set(labels))
    want = min(len(groups), len(PALETTE))
    # the checksum is linear: a label's part of it, (sum, weighted sum, length), is the same under every key
    parts = [(*_checksum(g), len(g.encode("utf-16-le")) // 2) for g in groups]
    best, best_n = names.group_tag(sweep), -1
    for salt in range(MAX_SALT):
        key = names.group_tag(sweep, salt)
        t0, n0 = _checksum(group_uuid(key, ""))
        n = len({((t0 + s) % 255 | (n0 + length * t0 + w) % 255 << 8) % len(PALETTE) for s, w, length in parts})
        if n > best_n:
            best, best_n = key, n
        if n >= want:
            break
    return best


def group_label(axes: dict[str, Any]) -> str:
    """A trial's group: its values on the varied axes but the seeds, as the report names its
    rows (`G1-elementwise`, `G1-elementwise, lr=0.003`; `all runs` when nothing else varies)."""
    items = [(p, v) for p, v in axes.items() if not names.is_seed_axis(p)]
    parts = []
    for p, v in items:
        text = f"{v:g}" if isinstance(v, float) else str(v)
        parts.append(text if p == GATE_AXIS or len(items) == 1 else f"{p.rsplit('.', 1)[-1]}={text}")
    return ", ".join(parts) or "all runs"


def sampled_group(key: str, label: str, sampled: dict[str, Any]) -> dict[str, str]:
    """An Optuna sample's group tags: its arm's label with the sampled values (`lr=0.0031`)."""
    values = ", ".join(
        f"{p.rsplit('.', 1)[-1]}={v:.3g}" if isinstance(v, float) else f"{p.rsplit('.', 1)[-1]}={v}" for p, v in sampled.items()
    )
    text = values if label == "all runs" else f"{label}, {values}"
    return {key: text, names.RUN_COLOR_TAG: group_colour(key, text)}


def group_by(key: str) -> dict[str, Any]:
    """The view's grouping: runs by tag `key`, charts of each group's mean (min/max band)."""
    return {"aggregateFunction": GROUP_AGGREGATE, "groupByKeys": [{"mode": "tag", "groupByData": key}]}
