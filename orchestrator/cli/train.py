"""`gatesweep train CONFIG.yaml`: one trial, no Ray. The file has the schema of a sweep's `base`.

Local paths in the file are relative to the file's folder; in --set values, to the working
directory. Its checkpoints live in RUNS_DIR/train-<config hash>/, with the MLflow run id beside
them, so `--resume` continues the same run from its newest checkpoint, on the same data order.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from gatedmodels.typedconfig import ConfigError
from orchestrator import storage
from orchestrator.core.errors import UserError
from orchestrator.launch.preflight import check_hub, check_tracking_uri
from orchestrator.launch.preflight_storage import runs_location
from orchestrator.spec.paths import environment_problems, resolve_paths
from orchestrator.spec.trial import TrialConfig, apply_overrides, experiment_problem
from orchestrator.storage.scratch import scratch_for

from .commands import COMMAND_TABLE
from .common import config_error, load_yaml, print_table, tracking_uri, writable_dir
from .sweepfile import check_tracking_uri as check_file_tracking_uri


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help=COMMAND_TABLE["train"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="trial config YAML (the schema of a sweep's `base` section)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field by dotted path, e.g. --set model.gate.position=G1 (repeatable)",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--experiment", help="MLflow experiment (default: tracking.experiment of the file)")
    p.add_argument("--run-name", help="MLflow run name (default: gate-size-seed)")
    p.add_argument(
        "--runs-dir",
        default="runs",
        help="where checkpoints and final weights go: a folder (default: ./runs) or an object-store URI (s3://bucket/prefix)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--resume", action="store_true", help="continue this config's previous trial from its newest checkpoint, in the same MLflow run"
    )
    group.add_argument("--fresh", action="store_true", help="discard this config's previous checkpoints and start a new run")
    p.add_argument("--quiet", action="store_true", help="print only the final table")
    return p


def load_trial_config(path: str, overrides: list[str]):
    """The validated trial config of a file and its --set overrides, its local paths absolute
    (the file's against its folder, the overrides' against the working directory), checked
    against this machine; UserError naming the file and field otherwise."""
    data = resolve_paths(load_yaml(path), Path(path).expanduser().absolute().parent)
    try:
        apply_overrides(data, overrides, folder=Path.cwd())
        cfg = TrialConfig.from_dict(data)
    except ConfigError as err:
        raise config_error(err, path) from None
    issues = environment_problems(cfg)
    if issues:
        raise config_error(ConfigError(issues), path)
    check_file_tracking_uri(cfg.tracking.uri, path)
    return cfg


def _read_meta(path: Path, *, fresh: bool) -> dict:
    """A previous trial's run.json; UserError if it is unreadable (unless --fresh discards it)."""
    try:
        meta = json.loads(path.read_text())
        if isinstance(meta, dict):
            return meta
        problem = "not a JSON object"
    except (OSError, ValueError) as err:
        problem = str(err)
    if fresh:
        return {}
    raise UserError(f"{path}: the previous trial's record cannot be read ({problem}); use --fresh to start a new run")


def run(args) -> int:
    cfg = load_trial_config(args.config, args.overrides)
    if args.experiment is not None and experiment_problem(args.experiment):
        raise UserError(f"--experiment: {experiment_problem(args.experiment)}")
    root = runs_location(args.runs_dir)  # a URI no store backs, or a store that cannot be used: one line, nothing written
    uri = tracking_uri(args.tracking_uri, cfg.tracking.uri)
    check_hub([cfg], source=args.config)  # before anything is written
    check_tracking_uri(uri)
    where = root.child(f"train-{cfg.config_hash()}")
    remote = where if where.remote else None
    if remote is not None:  # the store is the truth; the trial works in this machine's scratch folder
        run_dir = scratch_for(remote, "train", remote.name)
        _fetch_meta(remote, run_dir)
    else:
        run_dir = Path(where.path)
    meta_path = run_dir / "run.json"
    run_id = None
    if meta_path.exists():
        meta = _read_meta(meta_path, fresh=args.fresh)
        if args.resume:
            run_id = meta.get("run_id")
        elif args.fresh:
            shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
            meta_path.unlink()
            if remote is not None:
                remote.child("checkpoints").delete_tree()
                remote.child("run.json").delete()
        else:
            raise UserError(
                f"this config already has a trial in {where} (MLflow run {meta.get('run_id')}); "
                "use --resume to continue it or --fresh to start a new run"
            )
    elif args.resume:
        raise UserError(f"nothing to resume: no previous trial of this config in {where}")

    from orchestrator.trial.run import FINAL_METRICS, TrialContext, TrialFailed, run_trial  # lazy: imports torch and matplotlib

    writable_dir(run_dir, "--runs-dir" if remote is None else "GATESWEEP_SCRATCH")

    ctx = TrialContext(
        run_dir=run_dir,
        remote_dir=remote,
        tracking_uri=uri,
        experiment=args.experiment or cfg.tracking.experiment,
        run_id=run_id,
        run_name=args.run_name,
        resume=args.resume,
        progress=None if args.quiet else (lambda line: print(line, flush=True)),
    )
    try:
        result = run_trial(cfg, ctx)
    except TrialFailed as err:
        print(f"gatesweep: trial failed: {err.reason}" + (f" (MLflow run {err.run_id})" if err.run_id else ""), file=sys.stderr)
        return 1
    row = {k: result.metrics.get(k) for k in FINAL_METRICS if k in result.metrics}
    for k in ("bbc/trigger_loss", "bbc/copy_acc", "bbc/optimal_loss"):
        if k in result.metrics:
            row[k] = result.metrics[k]
    print()
    print_table([{"metric": k, "value": v} for k, v in row.items()])
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from else ""
    print(f"\n{result.steps} steps in {result.wall_s:.1f} s{resumed}. MLflow run {result.run_id} in {uri}")
    print("browse: gatesweep ui" + (f" --tracking-uri {args.tracking_uri}" if args.tracking_uri else ""))
    return 0


MAX_META_BYTES = 1 << 20
"""run.json holds a run id, a hash and an experiment: far less than this."""


def _fetch_meta(remote, run_dir: Path) -> None:
    """The remote trial's run.json into the scratch folder (a stale local copy removed when the
    store has none), so the checks below read what the store says."""
    local = run_dir / "run.json"
    local.unlink(missing_ok=True)
    try:
        data = remote.child("run.json").read_bytes(limit=MAX_META_BYTES)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:
        raise UserError(f"{remote / 'run.json'}: cannot be read ({' '.join(str(err).split())[:200]})") from None
    run_dir.mkdir(parents=True, exist_ok=True)
    storage.write_bytes(local, data)
