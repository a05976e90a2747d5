"""The fast path of `dashboards.store.read_sweep` for a local SQLite store.

The same rows `MlflowClient.search_runs` returns, read directly with the standard `sqlite3`
module, opened read-only, from MLflow's `runs`, `tags`, `params` and `latest_metrics` tables
(`latest_metrics` is what `search_runs` returns as a run's metrics): ~0.15 s for 1,000 runs
against ~4 s through MLflow's ORM. Any schema surprise raises sqlite3.Error, LookupError,
TypeError or ValueError, and the caller falls back to the API.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from orchestrator.tracking import names, redact_uri

from .records import RunRecord, StoreError, SweepRuns, check_parent, make_record, no_such_experiment, no_such_sweep

_ACTIVE_SWEEPS = """SELECT r.run_uuid, r.start_time FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id
    WHERE r.lifecycle_stage = 'active' AND e.lifecycle_stage = 'active'
      AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = ? AND value = ?)"""
_TAGGED_IN_EXPERIMENT = (
    "SELECT t.run_uuid FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid WHERE t.key = ? AND t.value = ? AND r.experiment_id = ?"
)


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
        sql, args = _ACTIVE_SWEEPS, [names.KIND_TAG, names.SWEEP_KIND]
        if name is not None:
            sql += " AND r.run_uuid IN (SELECT run_uuid FROM tags WHERE key = ? AND value = ?)"
            args += [names.SWEEP_TAG, name]
        if experiment is not None:
            sql += " AND e.name = ?"
            args.append(experiment)
        return [r[0] for r in self.con.execute(sql + " ORDER BY r.start_time DESC", args)]

    def sweep_names(self, experiment: str | None) -> list[str]:
        ids = self.sweep_parents(None, experiment)
        found: dict[str, None] = {}
        for run_id in ids:
            row = self.con.execute("SELECT value FROM tags WHERE run_uuid = ? AND key = ?", (run_id, names.SWEEP_TAG)).fetchone()
            found.setdefault(row[0] if row else "?", None)
        return list(found)

    def records(self, where: str, args: tuple, *, reused: bool = False) -> list[RunRecord]:
        """Active runs whose run_uuid is in the subquery `where`, with tags, params and latest metrics."""
        sub = f"SELECT run_uuid FROM runs WHERE lifecycle_stage = 'active' AND run_uuid IN ({where})"
        runs = self.con.execute(
            f"SELECT run_uuid, name, status, start_time, end_time, experiment_id, artifact_uri FROM runs WHERE run_uuid IN ({sub})", args
        ).fetchall()
        tags: dict[str, dict[str, str]] = {r[0]: {} for r in runs}
        params: dict[str, dict[str, str]] = {r[0]: {} for r in runs}
        metrics: dict[str, dict[str, float]] = {r[0]: {} for r in runs}
        for run_id, key, value in self.con.execute(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({sub})", args):
            tags[run_id][key] = value
        for run_id, key, value in self.con.execute(f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({sub})", args):
            params[run_id][key] = value
        for run_id, key, value, is_nan in self.con.execute(
            f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({sub})", args
        ):
            metrics[run_id][key] = math.nan if is_nan else float(value)
        out = [
            make_record(
                run_id,
                name,
                status,
                params=params[run_id],
                metrics=metrics[run_id],
                tags=tags[run_id],
                start_time=start,
                end_time=end,
                experiment_id=exp_id,
                artifact_uri=art,
                reused=reused,
            )
            for run_id, name, status, start, end, exp_id, art in runs
        ]
        return sorted(out, key=lambda r: (r.start_time, r.run_id))

    def histories(self, run_ids: list[str], keys: list[str]) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
        """(run id, metric) -> (steps, values) from MLflow's `metrics` table, ordered by step; the
        latest point of a step counts (as `dashboards.artifacts.metric_history`)."""
        out: dict[tuple[str, str], dict[int, float]] = {}
        for i in range(0, len(run_ids), 500):  # SQLite's limit on bound parameters
            chunk = run_ids[i : i + 500]
            sql = (
                f"SELECT run_uuid, key, step, value, is_nan FROM metrics WHERE run_uuid IN ({','.join('?' * len(chunk))}) "
                f"AND key IN ({','.join('?' * len(keys))}) ORDER BY run_uuid, key, step, timestamp"
            )
            for run_id, key, step, value, is_nan in self.con.execute(sql, [*chunk, *keys]):
                out.setdefault((run_id, key), {})[int(step)] = math.nan if is_nan else float(value)
        return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in out.items()}

    def tagged(self, key: str, value: str, experiment_id: str, *, reused: bool = False) -> list[RunRecord]:
        """Runs of the experiment whose tag `key` is `value`."""
        return self.records(_TAGGED_IN_EXPERIMENT, (key, value, experiment_id), reused=reused)


def read_sweep_sqlite(path: Path, uri: str, name: str | None, *, parent_id: str | None = None, experiment: str | None = None) -> SweepRuns:
    """`read_sweep` straight from a local SQLite store (read-only); axes not resolved."""
    db = SqliteRuns(path)
    try:
        if parent_id:
            found = db.records("SELECT ?", (parent_id,))
            parent, launches = check_parent(found[0] if found else None, parent_id, name), 1
        else:
            if not name:
                raise StoreError("name a sweep (or pass --parent RUN_ID)")
            if experiment is not None and experiment not in db.experiment_names():
                raise no_such_experiment(experiment, db.experiment_names())
            ids = db.sweep_parents(name, experiment)
            if not ids:
                raise no_such_sweep(name, experiment, db.sweep_names(experiment))
            parent, launches = db.records("SELECT ?", (ids[0],))[0], len(ids)
        name = parent.sweep or name or "?"
        exp_id = parent.experiment_id
        children = db.tagged(names.PARENT_TAG, parent.run_id, exp_id)
        known = {r.run_id for r in children}
        reused = [r for r in db.tagged(names.also_in_tag(name), parent.run_id, exp_id, reused=True) if r.run_id not in known]
        row = db.con.execute("SELECT name FROM experiments WHERE experiment_id = ?", (exp_id,)).fetchone()
        return SweepRuns(
            name=name,
            uri=redact_uri(uri),
            experiment_id=exp_id,
            experiment=row[0],
            parent=parent,
            runs=children + reused,
            launches=launches,
            search=parent.params.get(names.SWEEP_SEARCH_PARAM, "grid"),
        )
    finally:
        db.close()
