"""`gatesweep run FILE`: launch a sweep on Ray Tune.

With no --address, a local Ray is started on 127.0.0.1 and stopped at the end; with one, the
sweep joins that cluster. Trials whose config hash already finished in the MLflow experiment are
skipped (--rerun forces them). --smoke runs every trial for a few steps first-class (its own
sweep name, NAME-smoke) to catch broken cells before a real launch. Ctrl-C stops cleanly;
`gatesweep resume NAME` continues.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dashboards.publish import publish
from orchestrator.core.errors import UserError
from orchestrator.core.printable import terminal
from orchestrator.launch.data import prepare_sweep_data
from orchestrator.launch.launcher import Launcher
from orchestrator.launch.logfile import LibraryLog
from orchestrator.launch.preflight import preflight
from orchestrator.launch.preflight_storage import runs_location
from orchestrator.launch.summary import summary_rows
from orchestrator.ray.progress import wants_bar
from orchestrator.runtime import signals
from orchestrator.spec.search import ResourcesConfig

from ..tracking import redact_uri, scheme_of, views
from .commands import COMMAND_TABLE
from .common import print_table, tracking_uri, writable_dir
from .sweepfile import add_override_options, effective_file, load_and_expand, overrides_of

CONFIRM_ABOVE = 500


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help=COMMAND_TABLE["run"].help, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="sweep YAML")
    add_override_options(p)
    add_launch_options(p)
    p.add_argument("--smoke", action="store_true", help="run every trial for a few steps (sweep NAME-smoke)")
    p.add_argument("--rerun", action="store_true", help="run trials even if their config already finished in the store")
    p.add_argument("--yes", action="store_true", help=f"launch sweeps of more than {CONFIRM_ABOVE} trials without asking")
    return p


def add_launch_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="Ray cluster address (e.g. 10.0.0.5:6379 or auto); default: start a local Ray on 127.0.0.1")
    p.add_argument(
        "--tracking-uri", help="MLflow tracking URI (default: the sweep's tracking.uri, MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)"
    )
    p.add_argument(
        "--max-concurrent",
        type=int,
        help="trials at once; 0: as many as the cluster fits (default: resources.max_concurrent, whose 0 means the same)",
    )
    p.add_argument(
        "--runs-dir",
        default="runs",
        help="sweep state and checkpoints: a folder (default: ./runs) or an object-store URI such as s3://bucket/prefix "
        "(on a cluster: shared storage or a URI)",
    )


def check_max_concurrent(value: int | None) -> None:
    """--max-concurrent takes what resources.max_concurrent takes, with the same meaning (0: as
    many trials as the cluster fits)."""
    low, high = ResourcesConfig.LIMITS["max_concurrent"]
    if value is not None and not low <= value <= high:
        raise UserError(f"--max-concurrent: got {value}; allowed: {low}..{high:,} (0: as many as the cluster fits)")


def resolve_uri(args, spec) -> str:
    return tracking_uri(args.tracking_uri, spec.tracking.uri)


def launch(spec, expansion, source, args, *, resume: bool, rerun: bool) -> int:
    check_max_concurrent(args.max_concurrent)
    with LibraryLog():  # Ray's and MLflow's own log lines go to RUNS/sweeps/NAME/sweep.log
        return _launch(spec, expansion, source, args, resume=resume, rerun=rerun)


def _launch(spec, expansion, source, args, *, resume: bool, rerun: bool) -> int:
    runs_root = runs_location(args.runs_dir)  # a URI no store backs, or a store that cannot be used: one line, nothing written
    uri = resolve_uri(args, spec)
    preflight(uri, args.address, spec, expansion, source=source)  # nothing is written if a service is missing
    if not args.address:
        prepare_sweep_data([t.config for t in expansion.trials], say=lambda line: print(line, flush=True), source=source)
    if runs_root.local is not None:
        writable_dir(runs_root.local, "--runs-dir")
    launcher = Launcher(
        spec,
        expansion,
        source=source,
        runs_root=runs_root,
        tracking_uri=uri,
        address=args.address,
        max_concurrent=args.max_concurrent,
        rerun=rerun,
        resume=resume,
        log=lambda line: print(line, flush=True),
        bar=wants_bar(sys.stdout),
    )
    outcome = launcher.run()
    has_results = not outcome.interrupted and any(r.status in ("finished", "skipped") for r in outcome.rows)
    if outcome.reused:  # nothing ran: the latest launch's report stands
        outcome.report_dir = launcher.work / "report" if (launcher.work / "report" / "report.html").is_file() else None
    elif has_results and not publish_report(spec.name, uri, outcome, launcher.work / "report"):
        return 130
    launcher.upload("report")  # a remote runs folder gets the report and sweep.log too
    launcher.upload("sweep.log")
    print_outcome(outcome)
    print(f"MLflow: experiment {spec.tracking.experiment!r}, parent run {outcome.parent_run_id} in {redact_uri(uri)}")
    print_browse_lines(spec.name, uri, outcome, args.tracking_uri)
    if runs_root.remote:
        print(f"runs folder: {launcher.dir} (this machine's scratch: {launcher.work})")
    if outcome.interrupted:
        print(f"interrupted: `gatesweep resume {spec.name}` continues", file=sys.stderr)
        return 130
    if outcome.error:
        print(f"gatesweep: the sweep stopped early: {outcome.error}; `gatesweep resume {spec.name}` continues it", file=sys.stderr)
    return 1 if outcome.failed else 0


def publish_report(name: str, uri: str, outcome, out_dir) -> bool:
    """The comparison report and the parent's per-configuration metrics, after the launcher closed
    the parent run; False when a signal stopped it (the sweep's results are in the store)."""
    print(f"building the report of sweep {name} (statistics, plots, report.html; Ctrl-C leaves the results in the store)…", flush=True)
    try:
        with signals.as_interrupt():
            done = publish(uri, name, outcome.parent_run_id, out_dir)
    except KeyboardInterrupt:
        print(
            f"interrupted while the report was built; the sweep's results are in the store "
            f"(parent run {outcome.parent_run_id}, {outcome.parent_status}): `gatesweep report {name}` builds it",
            file=sys.stderr,
        )
        return False
    outcome.report_dir = done.report_dir
    if done.error:
        outcome.report_error = "; ".join(filter(None, [outcome.report_error, done.error]))
    return True


def print_browse_lines(name: str, uri: str, outcome, explicit_uri: str | None) -> None:
    """Where to look next: the report written at the end, the runs table in the MLflow UI (on
    `gatesweep ui`'s default address for a local store), `gatesweep report`."""
    flag = f" --tracking-uri {redact_uri(explicit_uri)}" if explicit_uri else ""  # a password in the URI is never printed
    if outcome.report_dir is not None:
        print(f"report: {outcome.report_dir / 'report.html'} (and under report/ on the parent run)")
    if outcome.experiment_id:
        remote = scheme_of(uri) in ("http", "https")
        base = redact_uri(uri) if remote else "http://127.0.0.1:5000"
        how = "" if remote else f"`gatesweep ui --sweep {name}{flag}`, then "
        print(f"runs table: {how}{views.runs_url(base, outcome.experiment_id, name)}")
    print(f"compare: gatesweep report {name}{flag}")


def run(args) -> int:
    overrides = overrides_of(args)
    spec, expansion = load_and_expand(args.file, smoke=args.smoke, overrides=overrides)
    n = len(expansion.trials)
    if n > CONFIRM_ABOVE and not args.yes:
        if not sys.stdin.isatty():
            raise UserError(f"{args.file}: {n} trials; pass --yes to launch more than {CONFIRM_ABOVE} trials")
        answer = input(f"{n} trials. Launch? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("not launched")
            return 2
    if overrides:
        print(f"overrides: {overrides.describe()} (kept with the sweep: resume and report see the same sweep)", flush=True)
    with tempfile.TemporaryDirectory(prefix="gatesweep-overrides-") as folder:
        source = effective_file(args.file, overrides, Path(folder))  # the file as changed: what the launch keeps
        return launch(spec, expansion, source, args, resume=False, rerun=args.rerun)


def print_outcome(outcome, file=None) -> None:
    file = file or sys.stdout
    print(file=file)
    print_table(summary_rows([vars(r) for r in outcome.rows]), file=file)
    for r in outcome.rows:
        if r.reason:
            kind = f" [{r.outcome}]" if r.outcome and r.outcome not in ("stopped", "interrupted") else ""
            print(f"  {r.name}: {r.status}{kind}: {terminal(r.reason)}", file=file)
    counts: dict[str, int] = {}
    for r in outcome.rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(f"\n{outcome.name}: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" in {outcome.wall_s:.0f} s", file=file)
