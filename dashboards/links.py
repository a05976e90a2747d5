"""The sweeps' places in the MLflow UI for `gatesweep ui`: each sweep's experiment and parent run,
with the experiment marked as model training and the sweep's saved view written when it has none
(sweeps launched before gatesweep wrote views; a store that refuses the write keeps MLflow's
default columns, with a warning)."""

from __future__ import annotations

import sys

from orchestrator.tracking import names, search_all, views

from .store import experiment_ids, find_parent, open_client, sweep_parents


def sweep_links(uri: str, sweep: str | None) -> list[tuple[str, str, str]]:
    """(label, experiment id, parent run id) of the named sweep, or of the newest few sweeps;
    each sweep's experiment marked as model training and its saved view in place."""
    cl = open_client(uri)
    if sweep:
        run, _ = find_parent(cl, sweep)
        parents = [(sweep, run)]
    else:
        parents = list(sweep_parents(cl, experiment_ids(cl)).items())[:10]
    for name, run in parents:
        ensure_view(cl, name, run)
    return [(name, run.info.experiment_id, run.info.run_id) for name, run in parents]


def ensure_view(cl, sweep: str, parent) -> None:
    """Mark the sweep's experiment as model training and give it the sweep's saved view when it
    has none (sweeps launched before gatesweep wrote them); a store that refuses is left as is."""
    exp_id = parent.info.experiment_id
    try:
        exp = cl.get_experiment(exp_id)
        views.mark_training_experiment(cl, exp)
        if views.view_tag(sweep) in (exp.tags or {}):
            return
        pid = parent.info.run_id
        members = search_all(cl, [exp_id], views.member_filter(sweep, pid))
        flt = views.member_filter(sweep, pid) if members else views.children_filter(pid)
        trials = members or search_all(cl, [exp_id], views.children_filter(pid))
        params = parent.data.params
        axes = [p for key in (names.SWEEP_AXES_PARAM, names.SWEEP_SPACE_PARAM) for p in params.get(key, "-").split(",") if p and p != "-"]
        logged = {k for r in trials for k in r.data.metrics}
        views.write_sweep_view(
            cl, exp_id, sweep, search_filter=flt, axes=list(dict.fromkeys(axes)), logged=logged, runs=max(10, len(trials))
        )
    except Exception as err:  # read-only or older store: the URLs still work, with MLflow's defaults
        print(
            f"gatesweep: warning: could not write the saved view of sweep {sweep!r} ({type(err).__name__}); "
            "the runs table opens with MLflow's default columns",
            file=sys.stderr,
        )
