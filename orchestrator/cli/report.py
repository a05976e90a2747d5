"""`gatesweep report NAME`: compare a sweep's configurations side by side.

Rows are configurations (seeds grouped: mean ± std, 95% CI, n), columns the axes that vary and
the paper's metrics; deltas against the baseline (no gate, softmax attention; with --baseline
AXIS=VALUE also that value, e.g. a parameter-matched baseline) with a paired t-test over matching
seeds; the best value per column marked where significantly better after Holm; main effects and
each arm's Δ at every level of the other axes (interactions); failed and running
trials listed. The chosen --format goes to stdout (progress to stderr); report.md, report.html
(one self-contained file), report.csv, report.tex and the plots go to --out, and report.md,
report.html, report.csv and the plots are logged under `report/` on the sweep's MLflow parent run.
An unknown --metrics name is an error (exit 2, with the closest logged names) before anything is
written, and a report that fails halfway leaves the previous one in --out as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from dashboards.store import StoreError
from dashboards.tables import RENDERERS
from orchestrator.core.errors import UserError
from orchestrator.spec.sweep import NAME_RE

from ..tracking import redact_uri
from .commands import COMMAND_TABLE
from .common import tracking_uri


def _table(report) -> str:
    width = shutil.get_terminal_size((100, 24)).columns
    return RENDERERS["table"](report.comparison, width=max(60, width))


def _file(name: str) -> Callable:
    return lambda report: report.files[name].read_text(encoding="utf-8")


def _rendered(fmt: str) -> Callable:
    def render(report) -> str:
        return RENDERERS[fmt](report.comparison)

    return render


FORMATS: dict[str, Callable] = {
    "table": _table,
    "md": _file("report.md"),
    "html": _file("report.html"),
    "csv": _rendered("csv"),
    "latex": _rendered("latex"),
    "json": _file("report.json"),
}
"""--format NAME -> what goes to stdout: a function of the built `dashboards.report.Report`. Add
an entry to add a format."""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help=COMMAND_TABLE["report"].help,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="sweep name (its newest launch); optional with --parent")
    p.add_argument("--format", choices=list(FORMATS), default="table", help="what to print on stdout (default: table)")
    p.add_argument(
        "--out",
        help="folder for report.md/.html/.csv/.tex and the plots (default: the sweep's own report folder, runs/sweeps/NAME/report, "
        "where the end of the sweep wrote it, when the sweep ran from here; else reports/NAME)",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    p.add_argument("--experiment", help="look for the sweep in this experiment only (default: every experiment)")
    p.add_argument("--parent", metavar="RUN_ID", help="report this launch (parent run id) instead of the newest")
    p.add_argument(
        "--metrics",
        help="comma-separated metric columns, each a metric the sweep's runs logged (default: the paper's metrics that were logged)",
    )
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="the baseline row must also have this axis value (repeatable), e.g. model.ffn_dim=395 for a "
        "parameter-matched baseline; other rows are compared with it at equal remaining axes",
    )
    p.add_argument(
        "--target-flops",
        type=_flops,
        metavar="FLOPS",
        help="a ladder's target compute for the extrapolated multiplier (default: the paper's dense-1.7b x 400B tokens, 4.7e21)",
    )
    p.add_argument(
        "--margin",
        type=_margin,
        metavar="SHARE",
        help="a ladder's equivalence margin: a multiplier within 1 +- SHARE is 'no practical difference' (e.g. 0.05; "
        "default: the sweep file's ladder.margin, else none)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the plots (faster)")
    p.add_argument("--no-log", action="store_true", help="do not log the report to the MLflow parent run")
    return p


def _margin(text: str) -> float:
    """An equivalence margin: a share in (0, 10) (0.05: within 5%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.05 (within 5%), got {text!r}") from None
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"expected a share above 0 and below 10 (0.05: within 5%), got {text!r}")
    return value


def _flops(text: str) -> float:
    """A positive, finite number of FLOPs (`1e21`, `4.1e+21`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of FLOPs such as 1e21, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of FLOPs, got {text!r}")
    return value


def default_out(name: str | None):
    """The sweep's own report folder, `runs/sweeps/NAME/report/` (where the end of a sweep writes
    it), when the sweep ran from this folder with the default runs folder; else None
    (`build_report`'s default, `reports/NAME/`). One place for a sweep's report."""
    if not name or not NAME_RE.fullmatch(name):
        return None
    own = Path("runs") / "sweeps" / name
    return own / "report" if (own / "state.json").is_file() else None


def run(args) -> int:
    from dashboards.report import build_report  # lazy: imports matplotlib

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if not args.name and not args.parent:
        raise UserError("name a sweep (gatesweep report NAME) or pass --parent RUN_ID")
    uri = tracking_uri(args.tracking_uri)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    if args.metrics is not None and not metrics:
        raise UserError("--metrics: expected comma-separated metric names, e.g. val_ppl,first_token_attn")

    baseline = {}
    for item in args.baseline:
        path, sep, value = item.partition("=")
        if not sep or not path.strip() or not value.strip():
            raise UserError(f"--baseline {item!r}: expected AXIS=VALUE, e.g. model.ffn_dim=395")
        baseline[path.strip()] = value.strip()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        report = build_report(
            uri,
            args.name,
            out_dir=args.out or default_out(args.name),
            parent_id=args.parent,
            experiment=args.experiment,
            metrics=metrics,
            baseline=baseline,
            with_plots=not args.no_plots,
            log=not args.no_log,
            progress=say,
            target_flops=args.target_flops,
            margin=args.margin,
        )
    except StoreError as err:
        raise UserError(str(err)) from None

    sys.stdout.write(FORMATS[args.format](report))
    sys.stdout.flush()

    comp = report.comparison
    for m in comp.metrics if metrics else []:
        if all(row.stats[m.key].n == 0 for row in comp.rows):
            say(f"warning: --metrics: {m.key!r} was logged only by runs that did not finish")
    t = report.timings
    say(
        f"report written to {report.out_dir}/ (report.html, report.md, report.csv, report.tex, report.json, {len(report.plots)} plots) "
        f"in {sum(t.values()):.1f} s"
    )
    if report.logged_run_id:
        say(
            f"logged under report/ on parent run {report.logged_run_id} in {redact_uri(uri)}"
            f" (experiment {report.comparison.sweep.experiment!r})"
        )
    elif report.log_error:
        say(f"warning: could not log the report to the parent run: {report.log_error}")
    return 0
