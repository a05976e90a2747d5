"""Build a sweep's comparison report: read the store, compute the statistics, draw the plots,
write report.md / report.html / report.csv / report.tex and the PNGs into a folder, and log
report.md, report.html, report.csv and the PNGs under `report/` on the sweep's MLflow parent
run, so that the sweep's page in the MLflow UI shows the comparison.

A report never destroys the previous one, nor a user's file: a user mistake (an unknown
--metrics name, a --baseline the sweep has no configuration for) is raised before anything is
written, and the files are written into a staging folder inside the output folder
(`.report-partial-PID-...`), then handed to `orchestrator.storage.owned`, which keeps a manifest
of the files reports wrote there (`.gatesweep-files.json`): a file of the same name that no
report wrote (or that was changed since) refuses the report, nothing replaced; otherwise the
files are moved into place one by one (PNGs first, report.html last), and only then are the
previous report's files that no longer apply (a plot of an axis that is gone) removed. With
`with_plots=False` the previous report's plots are left as they are. A report that fails or is
interrupted halfway leaves the previous one as it was.

Logging those artifacts is the report's only write to the store: no training state, no tag, no
metric. Plots need per-run data that `search_runs` does not return (the `train/loss` history,
`spikes.json`, `probes.json`); it is fetched only for the few runs a plot shows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.runtime.pids import pid_alive
from orchestrator.storage import BadLocation, Location
from orchestrator.storage.owned import NotOurs
from orchestrator.storage.owned import replace as replace_owned
from orchestrator.tracking import names

from . import html as html_report
from . import ladder, tables
from .artifacts import ArtifactCache
from .comparison import Comparison
from .ladder import RUNG_AXIS
from .records import StoreError
from .report_json import report_json
from .sections.plots import AXIS_PLOT_PATTERNS, PLOT_FILES, make_plots
from .stats import compare
from .store import open_client, read_sweep

ARTIFACT_DIR = names.REPORT_DIR
REPORT_FILES = ("report.md", "report.html", "report.csv", "report.tex", "report.json")
LOGGED = ("report.md", "report.html", "report.csv", "report.json")
Figures = Sequence[tuple[Path, str]]

WRITERS: dict[str, Callable[[Comparison, Figures], str]] = {
    "report.md": lambda comp, made: tables.markdown(comp, [(p.name, c) for p, c in made]),
    "report.csv": lambda comp, made: tables.csv_text(comp),
    "report.tex": lambda comp, made: tables.latex(comp),
    "report.json": lambda comp, made: report_json(comp),
    "report.html": lambda comp, made: html_report.render(comp, made),
}
"""One writer per output file, in the order they are staged (report.html last: `_commit` moves
them into place in this order): (comparison, drawn plots) -> the file's text. Adding a format is
one entry here (and its name in REPORT_FILES)."""


@dataclass
class Report:
    """What `build_report` made."""

    comparison: Comparison
    out_dir: Path
    files: dict[str, Path]
    """report.md, report.html, report.csv, report.tex -> path."""
    plots: list[tuple[Path, str]] = field(default_factory=list)
    """(PNG path, caption)."""
    logged_run_id: str | None = None
    """The parent run the report was logged to (None with log=False or when logging failed)."""
    log_error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds: read, stats, plots, write, log."""


def build_report(
    uri: str,
    name: str | None,
    *,
    out_dir: str | Path | None = None,
    parent_id: str | None = None,
    experiment: str | None = None,
    metrics: list[str] | None = None,
    baseline: dict[str, str] | None = None,
    with_plots: bool = True,
    log: bool = True,
    progress: Callable[[str], None] | None = None,
    target_flops: float | None = None,
    margin: float | None = None,
    ladder_replicates: int | None = None,
) -> Report:
    """Read sweep `name` (its newest launch, or `parent_id`) from the store at `uri` and write
    the report into `out_dir` (default `reports/<name>`); raise StoreError for a user mistake."""
    say = progress or (lambda _line: None)
    timings: dict[str, float] = {}
    given_out = _local_out(out_dir)
    t = time.perf_counter()
    sweep = read_sweep(uri, name, parent_id=parent_id, experiment=experiment)
    timings["read"] = time.perf_counter() - t
    say(f"read sweep {sweep.name}: {len(sweep.runs)} runs from {sweep.uri} in {timings['read']:.1f} s")

    t = time.perf_counter()
    comp = compare(sweep, metrics, baseline)
    timings["stats"] = time.perf_counter() - t
    if RUNG_AXIS in comp.axes:
        t = time.perf_counter()
        file_margin, file_baseline = ladder.file_settings(sweep.sweep_file)
        kw = {} if ladder_replicates is None else {"replicates": ladder_replicates}
        margin = margin if margin is not None else file_margin
        comp.ladder = ladder.analyse(comp, target=target_flops, baseline=baseline or file_baseline, margin=margin, **kw)
        timings["ladder"] = time.perf_counter() - t
        say(f"ladder: {len(comp.ladder.rungs)} rungs x {len(comp.ladder.arms)} arms fitted in {timings['ladder']:.1f} s")

    out = given_out or Path("reports") / sweep.name
    cl = open_client(uri) if with_plots or log else None  # MLflow's client: for plot data and logging only
    stage, created = _stage(out)
    try:
        made: list[tuple[Path, str]] = []
        if with_plots:
            t = time.perf_counter()
            cache = ArtifactCache(cl)
            try:
                made = make_plots(cl, comp, stage, cache)
            finally:
                cache.close()
            timings["plots"] = time.perf_counter() - t

        t = time.perf_counter()
        for file, write in WRITERS.items():
            (stage / file).write_text(write(comp, made), encoding="utf-8")
        _commit(stage, out, [p.name for p, _ in made] + list(WRITERS), with_plots)
        timings["write"] = time.perf_counter() - t
    except BaseException:  # a failure or Ctrl-C: the previous report stays as it was
        shutil.rmtree(stage, ignore_errors=True)
        if created:
            try:
                out.rmdir()  # only when empty: nothing of anyone else's
            except OSError:
                pass
        raise
    files = {name: out / name for name in REPORT_FILES}
    made = [(out / p.name, c) for p, c in made]
    report = Report(comp, out, files, made, timings=timings)
    if log:
        t = time.perf_counter()
        _log(cl, report, sweep.parent.run_id)
        timings["log"] = time.perf_counter() - t
    return report


def _log(cl, report: Report, run_id: str) -> None:
    """Log the report's files (LOGGED) and plots under `report/` on the sweep's parent run; a
    failure (a read-only store) is kept in `report.log_error`, the local report stands."""
    try:
        for key in LOGGED:
            cl.log_artifact(run_id, str(report.files[key]), ARTIFACT_DIR)
        for path, _ in report.plots:
            cl.log_artifact(run_id, str(path), ARTIFACT_DIR)
        report.logged_run_id = run_id
    except Exception as err:  # a read-only store still gets its local report
        report.log_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


STAGE_PREFIX = ".report-partial-"


def _local_out(out_dir: str | Path | None) -> Path | None:
    """--out as a local folder; StoreError for a text that is a URI or looks like one (`s3:/b`,
    `s3://b`: the report is written locally only), before anything is read or written."""
    if out_dir is None:
        return None
    try:
        where = Location.parse(out_dir)
    except BadLocation as err:
        raise StoreError(f"--out {err}") from None
    if where.local is None:
        raise StoreError(
            f"--out {out_dir}: a local folder (the report is written here; a runs folder on a store gets it at the end of a sweep)"
        )
    return Path(out_dir)


def _stage(out: Path) -> tuple[Path, bool]:
    """A new staging folder inside `out` (created, and said so, when missing; StoreError, the
    report's user error, when it cannot be); staging folders a killed report left behind (their
    process is gone) are removed first."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob(STAGE_PREFIX + "*"):
            pid = old.name[len(STAGE_PREFIX) :].split("-", 1)[0]
            if old.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=out)), created
    except OSError as err:
        raise StoreError(f"--out: {out} cannot be written ({err.strerror or err})") from None


def _commit(stage: Path, out: Path, names: list[str], with_plots: bool) -> None:
    """Move the staged files into `out` (each replace is atomic; `names` in order, report.html
    last) through `storage.owned`: only files an earlier report wrote are replaced or removed;
    without plots, the earlier plots stay. StoreError (exit 2) when a user's file is in the way."""
    try:
        replace_owned(out, stage, names, keep=() if with_plots else PLOT_FILES + AXIS_PLOT_PATTERNS)
    except NotOurs as err:
        raise StoreError(f"--out {err}") from None


__all__ = ["Report", "StoreError", "build_report", "make_plots"]
