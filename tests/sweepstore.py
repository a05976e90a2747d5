"""A sweep written into a real MLflow store by hand, without Ray or training: a parent run and its
trial runs with the tags, params, metrics and artifacts a launch writes (`orchestrator.tracking.names`),
for tests of what reads a store (the report, the CLI's error contract). The numbers are the test's
own; nothing here trains. A launch writes more (provenance tags, the whole flattened config):
what is written here is what the readers use.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import yaml


@dataclass
class Trial:
    axes: dict[str, Any]
    """Axis path -> value, as the trial's `gatesweep.axis.*` tags (the gate axis is `model.gate`)."""
    metrics: dict[str, float] = field(default_factory=dict)
    status: str = "FINISHED"
    params: dict[str, Any] = field(default_factory=dict)
    """Params besides the axis values (e.g. model.num_params)."""
    artifacts: dict[str, Any] = field(default_factory=dict)
    """name -> JSON-able dict (probes.json, spikes.json)."""
    reason: str = ""
    """gatesweep.failure_reason of a FAILED trial."""


def fill(uri: str, name: str, trials: list[Trial], *, experiment: str = "hand-made", sweep_file: dict | None = None) -> str:
    """Write the sweep into the store at `uri`; return the parent run id. `sweep_file`, when given,
    is logged on the parent as `<name>.yaml`, as a launch logs the file it was given."""
    from mlflow.entities import Metric, Param, RunTag

    from orchestrator.tracking import client, get_or_create_experiment, names

    cl = client(uri)
    exp = get_or_create_experiment(cl, experiment, uri)
    axes = list(dict.fromkeys(p for t in trials for p in t.axes))
    parent = cl.create_run(exp, run_name=name, tags={names.KIND_TAG: names.SWEEP_KIND, names.SWEEP_TAG: name}).info.run_id
    cl.log_batch(
        parent,
        params=[
            Param(names.SWEEP_AXES_PARAM, ",".join(axes) or "-"),
            Param(names.SWEEP_SEARCH_PARAM, "grid"),
            Param(names.SWEEP_TRIALS_PARAM, str(len(trials))),
        ],
    )
    if sweep_file is not None:
        cl.log_text(parent, yaml.safe_dump(sweep_file, sort_keys=False), f"{name}.yaml")
    now = int(time.time() * 1000)
    for i, t in enumerate(trials):
        label = "-".join(str(v) for v in t.axes.values()) or f"trial-{i}"
        tags = {
            names.PARENT_TAG: parent,
            names.SWEEP_TAG: name,
            names.TRIAL_NAME_TAG: label,
            names.CONFIG_HASH_TAG: f"{i:016x}",
            names.member_tag(name): parent,
            **{names.axis_tag(p): str(v) for p, v in t.axes.items()},
        }
        if "model.gate" in t.axes:
            tags[names.GATE_TAG] = str(t.axes["model.gate"])
        if t.reason:
            tags[names.REASON_TAG] = t.reason
        run = cl.create_run(exp, run_name=label, tags={names.PARENT_TAG: parent}, start_time=now + i).info.run_id
        params = {**{p: v for p, v in t.axes.items() if p != "model.gate"}, **t.params}
        cl.log_batch(
            run,
            metrics=[Metric(k, float(v), now + i, 0) for k, v in t.metrics.items()],
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
        )
        for art, data in t.artifacts.items():
            cl.log_text(run, json.dumps(data), art)
        if t.status != "RUNNING":
            cl.set_terminated(run, status=t.status, end_time=now + i + 1)
    cl.set_terminated(parent, status="FINISHED", end_time=now + len(trials) + 1)
    return parent
