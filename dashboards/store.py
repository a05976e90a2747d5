"""Read a sweep from any MLflow tracking store into plain records. Read-only.

The data model is the one `orchestrator.launch.launcher` and `orchestrator.trial.run` write:
- the sweep's **parent run** carries tags `gatesweep.kind=sweep` and `gatesweep.sweep=NAME`; a
  sweep launched several times has several parents, the newest one is the sweep's (or `parent=`);
- its trials are **child runs** (`mlflow.parentRunId`), plus FINISHED runs of earlier launches
  that this launch reused, which carry `gatesweep.also_in.NAME = <parent id>` instead;
- a child carries one tag `gatesweep.axis.<dotted path>` per varying axis (the gate axis is
  `model.gate` with the gate's label, `none` for the baseline), the full flattened config as
  params, and the final value of every metric as its latest value.

Two ways to read the runs, with the same result (a test checks it on a real store):
- any tracking URI: paginated `MlflowClient.search_runs` calls, three whatever the sweep's size
  (no per-run `get_run`). MLflow builds an ORM object per param, tag and metric: ~4 s for 1,000
  runs of ~100 params each;
- a local SQLite store (`sqlite:///`, the default): the same rows read directly with the standard
  `sqlite3` module, opened read-only, from MLflow's `runs`, `tags`, `params` and `latest_metrics`
  tables (`latest_metrics` is what `search_runs` returns as a run's metrics): ~0.15 s for 1,000
  runs. On any schema surprise it falls back to `search_runs`; `GATESWEEP_REPORT_SEARCH_RUNS=1`
  forces the API.
Metric histories and artifacts are fetched only for the few runs a plot shows.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

PAGE = 5000
"""Runs per search_runs page (MLflow's limit is 50,000)."""
FORCE_API_ENV = "GATESWEEP_REPORT_SEARCH_RUNS"
DERIVED_PARAMS = frozenset({"model.num_params", "model.gate_params", "data.vocab_size", "model.vocab_size", "world_size"})
"""Params a trial derives from its config (never an axis of their own)."""

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no progress bars on stderr per download

GATE_AXIS = "model.gate"
BASELINE_GATE = "none"

#: MLflow status (+ gatesweep tags) -> the state a report shows
STATES = ("finished", "failed", "stopped", "interrupted", "killed", "running", "scheduled")


class StoreError(ValueError):
    """A problem of the user's: no store at that URI, no such sweep, no such run."""


@dataclass
class RunRecord:
    """One MLflow run, flattened to what a report needs."""

    run_id: str
    name: str
    status: str
    """MLflow status: FINISHED, FAILED, KILLED, RUNNING, SCHEDULED."""
    state: str
    """One of STATES: FAILED is `failed`; KILLED is `stopped` (ASHA), `interrupted` or `killed`."""
    reason: str
    """Why a run did not finish (`gatesweep.failure_reason` / `gatesweep.stopped_early`), else ""."""
    params: dict[str, str]
    metrics: dict[str, float]
    """Final (latest) value of every metric."""
    tags: dict[str, str]
    start_time: int
    end_time: int | None
    experiment_id: str
    artifact_uri: str = ""
    """Where the run's artifacts live (a local file: URI is read directly)."""
    reused: bool = False
    """Finished in an earlier launch and reused by this one (tag `gatesweep.also_in.NAME`)."""
    axes: dict[str, str] = field(default_factory=dict)
    """Values of the sweep's axes (filled by `resolve_axes`)."""
    superseded: bool = False
    """Another run of the same seed cell counts instead (set by `dashboards.stats.compare`)."""

    @property
    def finished(self) -> bool:
        return self.state == "finished"


@dataclass
class SweepRuns:
    """A sweep as the store holds it."""

    name: str
    uri: str
    """The tracking URI, credentials redacted."""
    experiment_id: str
    experiment: str
    parent: RunRecord
    runs: list[RunRecord]
    launches: int
    """How many parent runs carry this sweep's name (the newest is used unless one is named)."""
    axes: list[str] = field(default_factory=list)
    """Axis paths that vary among `runs` (seed axes included), in the sweep's order."""
    search: str = "grid"
    read_s: float = 0.0


def state_of(status: str, tags: dict[str, str]) -> tuple[str, str]:
    """(state, reason) of a run from its MLflow status and gatesweep's tags."""
    reason = tags.get("gatesweep.failure_reason", "")
    if status == "FINISHED":
        return "finished", ""
    if status == "FAILED":
        return "failed", reason or "failed (no reason recorded)"
    if status == "KILLED":
        if "gatesweep.stopped_early" in tags:
            return "stopped", tags["gatesweep.stopped_early"]
        if reason == "interrupted" or reason.startswith("interrupted"):
            return "interrupted", reason
        return "killed", reason or "killed"
    if status == "RUNNING":
        return "running", ""
    return "scheduled", ""


def record(run, *, reused: bool = False) -> RunRecord:
    info, data = run.info, run.data
    tags = dict(data.tags)
    state, reason = state_of(info.status, tags)
    metrics = {k: float(v) for k, v in data.metrics.items()}
    return RunRecord(
        run_id=info.run_id, name=tags.get("gatesweep.trial_name") or info.run_name or info.run_id[:8],
        status=info.status, state=state, reason=reason, params=dict(data.params), metrics=metrics, tags=tags,
        start_time=int(info.start_time or 0), end_time=info.end_time, experiment_id=info.experiment_id,
        artifact_uri=info.artifact_uri or "", reused=reused,
    )


# ---- opening a store ----------------------------------------------------------------------
def check_store(uri: str) -> None:
    """Raise StoreError when a local store does not exist: reading it must never create one."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():
            raise StoreError(f"no store at {path} (no such SQLite file); pass --tracking-uri or set MLFLOW_TRACKING_URI")
    elif uri.startswith("file:"):
        path = Path(unquote(urlsplit(uri).path))
        if not path.is_dir():
            raise StoreError(f"no store at {path} (no such folder); pass --tracking-uri or set MLFLOW_TRACKING_URI")


def open_client(uri: str):
    """An MlflowClient on an existing store (`orchestrator.tracking.client`: lock-guarded)."""
    from orchestrator.tracking import client

    check_store(uri)
    return client(uri)


def search_all(cl, experiment_ids: list[str], filter_string: str, order_by: list[str] | None = None) -> list:
    """Every run matching the filter, page by page."""
    out: list = []
    token = None
    while True:
        page = cl.search_runs(experiment_ids, filter_string=filter_string, max_results=PAGE, order_by=order_by, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def experiment_ids(cl, experiment: str | None = None) -> list[str]:
    """The named experiment's id, or every active experiment's."""
    if experiment:
        exp = cl.get_experiment_by_name(experiment)
        if exp is None:
            names = sorted(e.name for e in _experiments(cl))
            raise StoreError(f"no experiment named {experiment!r}; experiments: {', '.join(names) or 'none'}")
        return [exp.experiment_id]
    return [e.experiment_id for e in _experiments(cl)]


def _experiments(cl) -> list:
    out, token = [], None
    while True:
        page = cl.search_experiments(max_results=1000, page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def sweep_names(cl, ids: list[str]) -> list[str]:
    """Names of the sweeps launched in these experiments, newest first."""
    if not ids:
        return []
    parents = search_all(cl, ids, "tags.`gatesweep.kind` = 'sweep'", order_by=["attributes.start_time DESC"])
    seen: dict[str, None] = {}
    for run in parents:
        seen.setdefault(run.data.tags.get("gatesweep.sweep", "?"), None)
    return list(seen)


def find_parent(cl, name: str | None, *, parent_id: str | None = None, experiment: str | None = None) -> tuple[Any, int]:
    """(parent run, number of launches of that sweep). Newest launch unless `parent_id`."""
    if parent_id:
        try:
            run = cl.get_run(parent_id)
        except Exception as err:  # MlflowException: RESOURCE_DOES_NOT_EXIST
            raise StoreError(f"no run {parent_id!r} in this store ({type(err).__name__})") from None
        tags = run.data.tags
        if tags.get("gatesweep.kind") != "sweep":
            raise StoreError(f"run {parent_id} is not a sweep's parent run (no tag gatesweep.kind=sweep)")
        if name and tags.get("gatesweep.sweep") != name:
            raise StoreError(f"run {parent_id} is the parent of sweep {tags.get('gatesweep.sweep')!r}, not {name!r}")
        return run, 1
    if not name:
        raise StoreError("name a sweep (or pass --parent RUN_ID)")
    ids = experiment_ids(cl, experiment)
    found = []
    if ids:
        quoted = name.replace("'", "\\'")
        found = search_all(cl, ids, f"tags.`gatesweep.kind` = 'sweep' and tags.`gatesweep.sweep` = '{quoted}'",
                           order_by=["attributes.start_time DESC"])
    if not found:
        names = sweep_names(cl, ids)
        where = f"experiment {experiment!r}" if experiment else "this store"
        raise StoreError(f"no sweep named {name!r} in {where}; sweeps there: {', '.join(names) if names else 'none'}")
    return found[0], len(found)


def read_sweep(uri: str, name: str | None, *, parent_id: str | None = None, experiment: str | None = None,
               cl=None) -> SweepRuns:
    """The sweep's parent and all its trials (children and reused finished runs), axes resolved.
    `cl`: an MlflowClient to reuse (one is opened only when needed)."""
    t0 = time.perf_counter()
    check_store(uri)
    sweep = None
    path = sqlite_path(uri)
    if path is not None and os.environ.get(FORCE_API_ENV) != "1":
        try:
            sweep = read_sweep_sqlite(path, uri, name, parent_id=parent_id, experiment=experiment)
        except (sqlite3.Error, LookupError, TypeError, ValueError) as err:
            if isinstance(err, StoreError):
                raise
            sweep = None  # a schema this reader does not know: MLflow's API reads it
    clients = [cl]

    def get_client():
        if clients[0] is None:
            clients[0] = open_client(uri)
        return clients[0]

    if sweep is None:
        sweep = read_sweep_api(get_client(), uri, name, parent_id=parent_id, experiment=experiment)
    resolve_axes(sweep, get_client)
    sweep.read_s = time.perf_counter() - t0
    return sweep


def read_sweep_api(cl, uri: str, name: str | None, *, parent_id: str | None = None,
                   experiment: str | None = None) -> SweepRuns:
    """`read_sweep` through `MlflowClient.search_runs` (any tracking URI); axes not resolved."""
    from orchestrator.tracking import redact_uri

    parent_run, launches = find_parent(cl, name, parent_id=parent_id, experiment=experiment)
    parent = record(parent_run)
    name = parent.tags.get("gatesweep.sweep", name or "?")
    exp_id = parent_run.info.experiment_id
    pid = parent.run_id
    children = [record(r) for r in search_all(cl, [exp_id], f"tags.`mlflow.parentRunId` = '{pid}'")]
    known = {r.run_id for r in children}
    reused = [record(r, reused=True) for r in search_all(cl, [exp_id], f"tags.`gatesweep.also_in.{name}` = '{pid}'")
              if r.info.run_id not in known]
    exp = cl.get_experiment(exp_id)
    return SweepRuns(name=name, uri=redact_uri(uri), experiment_id=exp_id, experiment=exp.name, parent=parent,
                     runs=children + reused, launches=launches, search=parent.params.get("sweep.search", "grid"))


# ---- the SQLite fast path -------------------------------------------------------------------
def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


_ACTIVE_SWEEPS = """SELECT r.run_uuid, r.start_time FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id
    WHERE r.lifecycle_stage = 'active' AND e.lifecycle_stage = 'active'
      AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = 'gatesweep.kind' AND value = 'sweep')"""


class SqliteRuns:
    """Read-only access to MLflow's tables in a local SQLite store (MLflow 1.x-3.x schema)."""

    def __init__(self, path: Path):
        self.con = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=30)

    def close(self) -> None:
        self.con.close()

    def experiment_names(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT name FROM experiments WHERE lifecycle_stage = 'active' ORDER BY name")]

    def sweep_parents(self, name: str | None, experiment: str | None) -> list[str]:
        """Run ids of the named sweep's parents (every sweep's when None), newest first."""
        sql, args = _ACTIVE_SWEEPS, []
        if name is not None:
            sql += " AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = 'gatesweep.sweep' AND value = ?)"
            args.append(name)
        if experiment is not None:
            sql += " AND e.name = ?"
            args.append(experiment)
        return [r[0] for r in self.con.execute(sql + " ORDER BY r.start_time DESC", args)]

    def sweep_names(self, experiment: str | None) -> list[str]:
        ids = self.sweep_parents(None, experiment)
        names: dict[str, None] = {}
        for run_id in ids:
            row = self.con.execute("SELECT value FROM tags WHERE run_uuid = ? AND key = 'gatesweep.sweep'", (run_id,)).fetchone()
            names.setdefault(row[0] if row else "?", None)
        return list(names)

    def records(self, where: str, args: tuple, *, reused: bool = False) -> list[RunRecord]:
        """Active runs whose run_uuid is in the subquery `where`, with tags, params and latest metrics."""
        sub = f"SELECT run_uuid FROM runs WHERE lifecycle_stage = 'active' AND run_uuid IN ({where})"
        runs = self.con.execute(f"SELECT run_uuid, name, status, start_time, end_time, experiment_id, artifact_uri FROM runs "
                                f"WHERE run_uuid IN ({sub})", args).fetchall()
        tags: dict[str, dict[str, str]] = {r[0]: {} for r in runs}
        params: dict[str, dict[str, str]] = {r[0]: {} for r in runs}
        metrics: dict[str, dict[str, float]] = {r[0]: {} for r in runs}
        for run_id, key, value in self.con.execute(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({sub})", args):
            tags[run_id][key] = value
        for run_id, key, value in self.con.execute(f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({sub})", args):
            params[run_id][key] = value
        for run_id, key, value, is_nan in self.con.execute(
                f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({sub})", args):
            metrics[run_id][key] = math.nan if is_nan else float(value)
        out = []
        for run_id, name, status, start, end, exp_id, art in runs:
            t = tags[run_id]
            state, reason = state_of(status, t)
            out.append(RunRecord(run_id=run_id, name=t.get("gatesweep.trial_name") or name or run_id[:8], status=status,
                                 state=state, reason=reason, params=params[run_id], metrics=metrics[run_id], tags=t,
                                 start_time=int(start or 0), end_time=end, experiment_id=str(exp_id), artifact_uri=art or "",
                                 reused=reused))
        return sorted(out, key=lambda r: (r.start_time, r.run_id))


def read_sweep_sqlite(path: Path, uri: str, name: str | None, *, parent_id: str | None = None,
                      experiment: str | None = None) -> SweepRuns:
    """`read_sweep` straight from a local SQLite store (read-only); axes not resolved."""
    from orchestrator.tracking import redact_uri

    db = SqliteRuns(path)
    try:
        if parent_id:
            found = db.records("SELECT ?", (parent_id,))
            if not found:
                raise StoreError(f"no run {parent_id!r} in this store")
            if found[0].tags.get("gatesweep.kind") != "sweep":
                raise StoreError(f"run {parent_id} is not a sweep's parent run (no tag gatesweep.kind=sweep)")
            if name and found[0].tags.get("gatesweep.sweep") != name:
                raise StoreError(f"run {parent_id} is the parent of sweep {found[0].tags.get('gatesweep.sweep')!r}, not {name!r}")
            parent, launches = found[0], 1
        else:
            if not name:
                raise StoreError("name a sweep (or pass --parent RUN_ID)")
            if experiment is not None and experiment not in db.experiment_names():
                raise StoreError(f"no experiment named {experiment!r}; experiments: {', '.join(db.experiment_names()) or 'none'}")
            ids = db.sweep_parents(name, experiment)
            if not ids:
                names = db.sweep_names(experiment)
                where = f"experiment {experiment!r}" if experiment else "this store"
                raise StoreError(f"no sweep named {name!r} in {where}; sweeps there: {', '.join(names) if names else 'none'}")
            parent, launches = db.records("SELECT ?", (ids[0],))[0], len(ids)
        name = parent.tags.get("gatesweep.sweep", name or "?")
        exp_id = parent.experiment_id
        children = db.records("SELECT t.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
                              "WHERE t.key = 'mlflow.parentRunId' AND t.value = ? AND r.experiment_id = ?",
                              (parent.run_id, exp_id))
        known = {r.run_id for r in children}
        reused = [r for r in db.records("SELECT t.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
                                        "WHERE t.key = ? AND t.value = ? AND r.experiment_id = ?",
                                        (f"gatesweep.also_in.{name}", parent.run_id, exp_id), reused=True)
                  if r.run_id not in known]
        row = db.con.execute("SELECT name FROM experiments WHERE experiment_id = ?", (exp_id,)).fetchone()
        return SweepRuns(name=name, uri=redact_uri(uri), experiment_id=exp_id, experiment=row[0], parent=parent,
                         runs=children + reused, launches=launches, search=parent.params.get("sweep.search", "grid"))
    finally:
        db.close()


# ---- axes -------------------------------------------------------------------------------------
def axis_value(run: RunRecord, path: str) -> str | None:
    """A run's value on an axis: its own axis tag; for runs without one (reused from another
    sweep or from `gatesweep train`, or sampled by Optuna) the gate label tag or the param."""
    tag = run.tags.get(f"gatesweep.axis.{path}")
    if tag is not None:
        return tag
    if path == GATE_AXIS:
        return run.tags.get("gatesweep.gate")
    return run.params.get(path)


def resolve_axes(sweep: SweepRuns, get_client: Callable[[], Any] | None = None) -> None:
    """Fill `sweep.axes` and every run's `axes`: the parent's `sweep.axes` param and the
    children's axis tags, plus an Optuna sweep's sampled parameters; keep those that vary."""
    paths: list[str] = []
    declared = sweep.parent.params.get("sweep.axes", "")
    for p in declared.split(","):
        if p and p != "-" and p not in paths:
            paths.append(p)
    for run in sweep.runs:
        for key in run.tags:
            if key.startswith("gatesweep.axis."):
                p = key[len("gatesweep.axis."):]
                if p not in paths:
                    paths.append(p)
    if sweep.search == "optuna":
        for p in optuna_space(sweep, get_client):
            if p not in paths:
                paths.append(p)
    for run in sweep.runs:
        run.axes = {p: v for p in paths if (v := axis_value(run, p)) is not None}
    # an axis is shown when its (known) values differ; runs without any value show "?"
    varying = [p for p in paths if len({r.axes.get(p) for r in sweep.runs if p in r.axes}) > 1]
    for run in sweep.runs:
        run.axes = {p: run.axes.get(p, "?") for p in varying}
    sweep.axes = varying


def optuna_space(sweep: SweepRuns, get_client: Callable[[], Any] | None = None) -> list[str]:
    """Dotted paths an Optuna sweep sampled: `search.space` of the sweep file stored on the
    parent run; without it, params that differ between runs sharing every axis tag."""
    if get_client is not None:
        try:
            import yaml

            cl = get_client()
            for art in cl.list_artifacts(sweep.parent.run_id):
                if art.is_dir or not art.path.endswith((".yaml", ".yml")):
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    doc = yaml.safe_load(Path(cl.download_artifacts(sweep.parent.run_id, art.path, tmp)).read_text())
                space = ((doc or {}).get("search") or {}).get("space") or {}
                if space:
                    return list(space)
        except Exception:  # an unreadable artifact: fall back to the params
            pass
    groups: dict[tuple, list[RunRecord]] = {}
    for run in sweep.runs:
        key = tuple(sorted((k, v) for k, v in run.tags.items() if k.startswith("gatesweep.axis.")))
        groups.setdefault(key, []).append(run)
    out: list[str] = []
    for runs in groups.values():
        with_params = [r for r in runs if r.params]
        if len(with_params) < 2:
            continue
        common = set.intersection(*(set(r.params) for r in with_params))
        for k in sorted(common):
            if k in DERIVED_PARAMS:
                continue  # they follow the sampled fields
            if len({r.params[k] for r in with_params}) > 1 and k not in out:
                out.append(k)
    return out


# ---- per-run data for plots ---------------------------------------------------------------
def metric_history(cl, run_id: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric of one run, ordered by step; empty when absent."""
    try:
        points = cl.get_metric_history(run_id, key)
    except Exception:
        return [], []
    by_step: dict[int, float] = {}
    for m in sorted(points, key=lambda m: (m.step, m.timestamp)):
        by_step[int(m.step)] = float(m.value)
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def local_artifact(artifact_uri: str, path: str) -> Path | None:
    """The file of an artifact in a local (file:) artifact store, when it is there."""
    if not artifact_uri.startswith("file:"):
        return None
    f = Path(unquote(urlsplit(artifact_uri).path)) / path
    return f if f.is_file() else None


def json_artifact(cl, run_id: str, path: str, tmp: Path, artifact_uri: str = "") -> dict | None:
    """A run's JSON artifact, or None when it is missing or unreadable (older runs lack some).
    Local artifact stores are read in place; others are downloaded through the client."""
    try:
        local = local_artifact(artifact_uri, path)
        if local is None:
            dst = tmp / run_id
            dst.mkdir(parents=True, exist_ok=True)
            local = Path(cl.download_artifacts(run_id, path, str(dst)))
        data = json.loads(local.read_text())
    except Exception:
        return None
    return data if isinstance(data, dict) else None


class ArtifactCache:
    """Downloads JSON artifacts once per report into a temporary folder (removed on close)."""

    def __init__(self, cl):
        self.cl = cl
        self.tmp = Path(tempfile.mkdtemp(prefix="gatesweep-report-"))
        self._cache: dict[tuple[str, str], dict | None] = {}

    def get(self, run: RunRecord, path: str) -> dict | None:
        key = (run.run_id, path)
        if key not in self._cache:
            self._cache[key] = json_artifact(self.cl, run.run_id, path, self.tmp, run.artifact_uri)
        return self._cache[key]

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
