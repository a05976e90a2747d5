"""What earlier launches left in the store, read before a launch writes anything: the finished
run of every config hash (a trial that finished, in any sweep or `gatesweep train`, is not run
again), a live driver of the same sweep on this machine (refused), and the latest launch of the
sweep when it already holds every trial's finished run (shown again instead of a new, empty one);
on a resume, each trial's run that state.json recorded, if the store still has it.
Writing the launch's runs is `launch.runs`."""

from __future__ import annotations

import os
import socket
from typing import Any

from orchestrator.core.errors import UserError
from orchestrator.spec.expand import Expansion
from orchestrator.tracking import client, names, quoted, search_all


def finished_runs(uri: str, experiment: str) -> dict[str, Any]:
    """config hash -> a FINISHED run of it in the experiment (any sweep or `gatesweep train`)."""
    cl = client(uri)
    exp = cl.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    out: dict[str, Any] = {}
    for run in search_all(cl, [exp.experiment_id], "attributes.status = 'FINISHED'"):
        h = run.data.tags.get(names.CONFIG_HASH_TAG)
        if h and h not in out:
            out[h] = run
    return out


def refuse_live_driver(cl, exp_id: str, name: str) -> None:
    """A sweep of this name still RUNNING in the store under a live driver on this machine (one
    launched with another --runs-dir, whose lock this driver cannot see) is refused too."""
    import psutil

    running = cl.search_runs(
        [exp_id],
        filter_string=f"tags.`gatesweep.sweep` = '{name}' and tags.`gatesweep.kind` = 'sweep' and attributes.status = 'RUNNING'",
        max_results=100,
    )
    for run in running:
        host, _, pid = run.data.tags.get(names.DRIVER_TAG, "").rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and int(pid) != os.getpid() and psutil.pid_exists(int(pid)):
            try:
                cmd = " ".join(psutil.Process(int(pid)).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if "gatesweep" in cmd or "orchestrator" in cmd:
                raise UserError(
                    f"sweep {name!r} is already running in this store (driver pid {pid} on host {host}, "
                    f"parent run {run.info.run_id}); wait for it, or stop it and `gatesweep resume` it"
                )


def complete_launch(uri: str, experiment: str, sweep: str, expansion: Expansion) -> tuple[Any, dict[str, Any]] | None:
    """(the sweep's latest parent run, config hash -> its finished run) when that launch has
    exactly the finished runs of every trial of `expansion` as its members; None otherwise
    (something to run, the latest launch still RUNNING, or another launch holding the runs)."""
    done = finished_runs(uri, experiment)
    if not expansion.trials or any(t.config_hash not in done for t in expansion.trials):
        return None
    cl = client(uri)
    exp = cl.get_experiment_by_name(experiment)
    latest = cl.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`{names.KIND_TAG}` = '{names.SWEEP_KIND}' and tags.`{names.SWEEP_TAG}` = {quoted(sweep)}",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not latest or latest[0].info.status == "RUNNING":
        return None
    parent = latest[0].info.run_id
    members = {r.info.run_id for r in search_all(cl, [exp.experiment_id], f"tags.`{names.member_tag(sweep)}` = {quoted(parent)}")}
    if members != {done[t.config_hash].info.run_id for t in expansion.trials}:
        return None
    return latest[0], done


def resumed_run(cl, run_id: str | None) -> tuple[str | None, str]:
    """(the run, its status) of a trial's run that state.json recorded; (None, "") when none was
    recorded or the store no longer has it (a new run is created then)."""
    if not run_id:
        return None, ""
    try:
        return run_id, cl.get_run(run_id).info.status
    except Exception:
        return None, ""
