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

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.runtime.pids import pid_alive
from orchestrator.storage import BadLocation, Location
from orchestrator.storage.owned import NotOurs
from orchestrator.storage.owned import replace as replace_owned
from orchestrator.tracking import names

from . import html as html_report
from . import ladder, layer_heatmaps, tables
from .artifacts import ArtifactCache, metric_history
from .comparison import Comparison, Row
from .ladder import RUNG_AXIS
from .metrics import FIRST_TOKEN, TRAIN_LOSS, axis_text
from .records import BASELINE_AXES, BASELINE_GATE, GATE_AXIS, StoreError, finite, is_variant_setting
from .report_json import report_json
from .stats import compare
from .store import open_client, read_sweep

MAX_CURVE_ROWS = 8
"""Configurations drawn in the overlaid plots (loss curves, per-layer attention, histograms)."""
MAX_SEEDS_PER_CURVE = 3
MAX_AXIS_PANELS = 6
"""Metrics drawn against each axis: the first columns (all of them are in the tables)."""
ARTIFACT_DIR = names.REPORT_DIR
REPORT_FILES = ("report.md", "report.html", "report.csv", "report.tex", "report.json")
LOGGED = ("report.md", "report.html", "report.csv", "report.json")


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
        kw = {} if ladder_replicates is None else {"replicates": ladder_replicates}
        file_margin, file_baseline = ladder.file_settings(sweep.sweep_file)
        comp.ladder = ladder.analyse(
            comp, target=target_flops, baseline=baseline or file_baseline, margin=margin if margin is not None else file_margin, **kw
        )
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
        (stage / "report.md").write_text(tables.markdown(comp, [(p.name, c) for p, c in made]), encoding="utf-8")
        (stage / "report.csv").write_text(tables.csv_text(comp), encoding="utf-8")
        (stage / "report.tex").write_text(tables.latex(comp), encoding="utf-8")
        (stage / "report.json").write_text(report_json(comp), encoding="utf-8")
        (stage / "report.html").write_text(html_report.render(comp, made), encoding="utf-8")
        _commit(stage, out, [p.name for p, _ in made] + ["report.md", "report.csv", "report.tex", "report.json", "report.html"], with_plots)
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
        try:
            for key in LOGGED:
                cl.log_artifact(sweep.parent.run_id, str(files[key]), ARTIFACT_DIR)
            for path, _ in made:
                cl.log_artifact(sweep.parent.run_id, str(path), ARTIFACT_DIR)
            report.logged_run_id = sweep.parent.run_id
        except Exception as err:  # a read-only store still gets its local report
            report.log_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        timings["log"] = time.perf_counter() - t
    return report


STAGE_PREFIX = ".report-partial-"
AXIS_PLOT_PATTERNS = ("metric_vs_*.png", "interaction_*.png", layer_heatmaps.HEATMAP_FILE)
"""Plot files a report writes besides REPORT_FILES and PLOT_FILES (one per axis)."""


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


# ---- plots ----------------------------------------------------------------------------------
LOSS_CURVES, FIRST_TOKEN_LAYERS, ATTENTION_MAPS, GATE_HISTOGRAMS, LADDER_FITS, LADDER_MULTIPLIERS, LADDER_TRENDS = PLOT_FILES = (
    "loss_curves.png",
    "first_token_attn_per_layer.png",
    "attention_maps.png",
    "gate_histograms.png",
    "ladder_fits.png",
    "ladder_multipliers.png",
    "ladder_trends.png",
)


def primary_metric(comp: Comparison) -> str | None:
    """The first metric column with a better side (val_ppl in the default columns)."""
    return next((m.key for m in comp.metrics if m.better is not None), None)


def plotted_rows(comp: Comparison, limit: int = MAX_CURVE_ROWS) -> tuple[list[Row], str]:
    """Configurations drawn in the overlaid plots and a note saying which when not all are."""
    rows = [r for r in comp.rows if r.n]
    if len(rows) <= limit:
        return rows, ""
    key = primary_metric(comp)
    base = [r for r in rows if r.is_baseline][:1]
    if key is None:
        return (base + [r for r in rows if r not in base])[:limit], f" ({limit} of {len(rows)} configurations)"
    better = next(m.better for m in comp.metrics if m.key == key)
    scored = [r for r in rows if r not in base and r.stats[key].mean is not None]
    scored.sort(key=lambda r: r.stats[key].mean if better == "min" else -r.stats[key].mean)
    picked = base + scored[: limit - len(base)]
    picked.sort(key=comp.rows.index)
    what = "the first baseline and " if base else ""
    return picked, f" ({limit} of {len(rows)} configurations: {what}the best by {key})"


def _representative(row: Row):
    """The run that stands for a configuration in single-run plots: its lowest seed."""
    return next(iter(row.counted.values()))


def make_plots(cl, comp: Comparison, out: Path, cache: ArtifactCache) -> list[tuple[Path, str]]:
    """Draw every plot the data allows; return (path, caption) in report order."""
    from orchestrator import plots  # matplotlib: imported only when plots are drawn

    from . import figures

    made: list[tuple[Path, str]] = []
    rows, note = plotted_rows(comp)
    labels = {id(r): r.label(comp.axes) for r in rows}

    # loss curves with spikes
    curves: list = []
    for g, row in enumerate(rows):
        for run in list(row.counted.values())[:MAX_SEEDS_PER_CURVE]:
            steps, values = metric_history(cl, run.run_id, TRAIN_LOSS)
            if not steps:
                continue
            spikes = cache.get(run, names.SPIKES_ARTIFACT) or {}
            rule = (spikes.get("rules") or {}).get("rule")
            events = [e for e in spikes.get("events") or [] if isinstance(e, dict) and (rule is None or e.get("rule") == rule)]
            marks = [(int(e["step"]), float(e["loss"])) for e in events if finite(e.get("loss")) and "step" in e]
            curves.append(plots.Curve(labels[id(row)], g, steps, values, marks))
    if curves:
        seeds = min(MAX_SEEDS_PER_CURVE, max(r.n for r in rows))
        made.append(
            (
                plots.loss_curves(curves, out / LOSS_CURVES, f"training loss, sweep {comp.sweep.name}"),
                f"Training loss ({TRAIN_LOSS}) of each configuration, up to {seeds} seeds in one colour; red x: loss "
                f"spikes counted by the trial's rule (spikes.json){note}.",
            )
        )

    # first-token attention per layer
    variants = []
    for row in rows:
        per_layer = _per_layer_means(row, FIRST_TOKEN)
        if per_layer:
            variants.append((labels[id(row)], per_layer))
    if variants:
        made.append(
            (
                plots.first_token_layers(variants, comp.uniform_first_token, out / FIRST_TOKEN_LAYERS),
                "First-token attention per layer (mean over seeds; attention on key 0 over queries ≥ 1, mean over "
                f"heads), dashed: uniform attention{note}.",
            )
        )

    # one attention map, baseline beside gated
    pair = _attention_pair(comp, cache)
    if pair is not None:
        (bl, bmap), (gl, gmap), caption = pair
        made.append((plots.attention_pair((bl, bmap), (gl, gmap), out / ATTENTION_MAPS, "attention map, baseline beside gated"), caption))

    # gate-score histograms
    hists, groups, highs = [], [], []
    arms = arm_labels(comp)
    for row in rows:
        if row.axes.get(GATE_AXIS) == BASELINE_GATE:
            continue
        probes = cache.get(_representative(row), names.PROBES_ARTIFACT) or {}
        gh = probes.get("gate_histogram")
        counts = gh.get("counts") if isinstance(gh, dict) else None
        if counts and all(isinstance(c, list) and c for c in counts):
            hists.append((labels[id(row)], counts))
            highs.append(_histogram_high(gh))
            groups.append(arms.index(row.label(comp.arch_axes)) if arms else len(groups))
    if hists:
        made.append(
            (
                plots.gate_histograms(hists, out / GATE_HISTOGRAMS, "gate-score distribution", groups, highs),
                "Gate scores on held-out data, all layers pooled, one panel per configuration on shared axes (probes.json of "
                f"its lowest seed); log scale: sparse gates pile up near 0, and each panel gives its share below "
                f"{plots.LOW_GATE:g}{note}.",
            )
        )

    heat_rows, heat_note = plotted_rows(comp, layer_heatmaps.MAX_ROWS)  # small panels: more rows than the overlaid plots
    made += layer_heatmaps.section(cl, comp, out, heat_rows, heat_note)
    if comp.ladder is not None:
        made += ladder.draw(comp.ladder, out)
    made += _axis_plots(comp, out, figures)
    made += _interaction_plots(comp, out, figures)
    return made


def _histogram_high(gh: dict) -> float:
    """The upper end of a probes.json gate histogram (1 in files written before unbounded gates)."""
    rng = gh.get("range")
    high = rng[1] if isinstance(rng, list) and len(rng) == 2 else 1.0
    return float(high) if isinstance(high, (int, float)) and math.isfinite(high) and 0 < high <= 100 else 1.0


def _safe(axis: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in axis)


def _axis_plots(comp: Comparison, out: Path, plots) -> list[tuple[Path, str]]:
    """Each metric against each axis, levels in the sweep's order; for an axis that is not an
    arm's (a model size, a learning rate), one line per arm, so that each arm's course shows."""
    made = []
    folded = {q for qs in comp.together.values() for q in qs}
    for axis in (a for a in comp.axes if a not in folded):
        levels = comp.levels[axis]
        if len(levels) < 2:
            continue
        per_arm = bool(comp.arch_axes) and axis not in comp.arch_axes
        arms = arm_labels(comp) if per_arm else []
        panels = []
        effects = {e.level: e for e in comp.effects.get(axis, [])}
        for m in [m for m in comp.metrics if not _constant(comp, m.key)][:MAX_AXIS_PANELS]:
            points, owners = [], []
            for r in comp.rows:
                for run in r.counted.values():
                    if finite(run.metrics.get(m.key)):
                        points.append((levels.index(r.axes[axis]), run.metrics[m.key]))
                        owners.append(arms.index(r.label(comp.arch_axes)) if per_arm else 0)
            if not points:
                continue
            if effects:
                means = [effects[lv].means.get(m.key) if lv in effects else None for lv in levels]
            else:
                means = [next((r.stats[m.key].mean for r in comp.rows if r.axes[axis] == lv), None) for lv in levels]
            series = [(arm, [_mean_of(comp, axis, lv, arm, m.key) for lv in levels]) for arm in arms]
            panels.append(plots.AxisPanel(m.key, points, means, series, owners if per_arm else []))
        if not panels:
            continue
        numeric = all(_is_number(v) for v in levels)
        log_x = numeric and all(float(v) > 0 for v in levels) and max(float(v) for v in levels) / min(float(v) for v in levels) >= 100
        lines = (
            "one line per arm joins its means (over seeds and any other axis)"
            if per_arm
            else "the line joins the level means " + ("averaged over the other axes (main effect)" if effects else "over seeds")
        )
        made.append(
            (
                plots.metric_vs_axis(
                    comp.axis_title(axis), [axis_text(v) for v in levels], panels, out / f"metric_vs_{_safe(axis)}.png", log_x=log_x
                ),
                f"{', '.join(p.metric for p in panels)} against {comp.axis_title(axis)}, levels in the sweep's order: dots are "
                f"finished runs, {lines}.",
            )
        )
    return made


def arm_labels(comp: Comparison) -> list[str]:
    """Every arm's label in row order (the baseline's first when it comes first): the colour
    index of an arm in every plot."""
    return list(dict.fromkeys(r.label(comp.arch_axes) for r in comp.rows)) if comp.arch_axes else []


def _constant(comp: Comparison, key: str) -> bool:
    """Whether every finished run logged the same value (0 spikes everywhere): nothing to plot."""
    values = {run.metrics[key] for r in comp.rows for run in r.counted.values() if finite(run.metrics.get(key))}
    return len(values) <= 1


def _mean_of(comp: Comparison, axis: str, level: str, arm: str, key: str) -> float | None:
    """The mean over the rows of one arm at one level of its seed means."""
    vals = [
        r.stats[key].mean for r in comp.rows if r.axes[axis] == level and r.label(comp.arch_axes) == arm and r.stats[key].mean is not None
    ]
    return math.fsum(vals) / len(vals) if vals else None


def _interaction_plots(comp: Comparison, out: Path, plots) -> list[tuple[Path, str]]:
    """One plot per interaction: each arm's Δ at every level of the axis, per metric."""
    made = []
    arms = arm_labels(comp)
    for inter in comp.interactions:
        panels = []
        for m in comp.metrics:
            table = inter.cells.get(m.key)
            if table is None or len(panels) >= MAX_AXIS_PANELS:
                continue
            series = [
                plots.DeltaSeries(
                    arm,
                    [c.diff for c in cells],
                    [
                        (c.delta.boot_lo, c.delta.boot_hi)
                        if c.delta is not None and c.delta.boot_lo is not None and c.delta.boot_hi is not None
                        else None
                        for c in cells
                    ],
                    [c.significant for c in cells],
                    arms.index(arm) if arm in arms else 0,
                )
                for arm, cells in table.items()
            ]
            panels.append(plots.InteractionPanel(m.key, series))
        if not panels:
            continue
        path = plots.interaction_plot(
            comp.axis_title(inter.axis), [axis_text(v) for v in inter.levels], panels, out / f"interaction_{_safe(inter.axis)}.png"
        )
        made.append(
            (
                path,
                f"Each arm's Δ against the baseline ({comp.baseline_text}) at each level of {comp.axis_title(inter.axis)} "
                f"({', '.join(p.metric for p in panels)}): filled markers are significant at 0.05 after Holm, bars the 95% "
                "bootstrap interval of the paired Δ; dashed: no effect.",
            )
        )
    return made


def _is_number(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def _per_layer_means(row: Row, prefix: str) -> list[float]:
    """Mean over the row's finished seeds of `<prefix>/layer_i`, for i = 0, 1, ..."""
    out = []
    i = 0
    while True:
        vals = [r.metrics[f"{prefix}/layer_{i}"] for r in row.counted.values() if finite(r.metrics.get(f"{prefix}/layer_{i}"))]
        if not vals:
            return out
        out.append(sum(vals) / len(vals))
        i += 1


def _attention_pair(comp: Comparison, cache: ArtifactCache):
    """((label, map), (label, map), caption) of the last layer's most sink-like head for the
    first baseline row and its gated sibling (G1 elementwise when present, else the gated row
    with the least first-token attention), from their lowest seeds' probes.json."""
    others = [p for p in comp.axes if p not in BASELINE_AXES and not is_variant_setting(p)]
    arch = [p for p in comp.axes if p in BASELINE_AXES or is_variant_setting(p)]
    for base in (r for r in comp.rows if r.is_baseline and r.n):
        sibs = [r for r in comp.rows if r.baseline is base and r.n]
        if not sibs:
            continue
        g1 = [r for r in sibs if r.axes.get(GATE_AXIS) == "G1-elementwise"]
        fta = lambda r: r.stats[FIRST_TOKEN].mean if FIRST_TOKEN in r.stats and r.stats[FIRST_TOKEN].mean is not None else math.inf
        gated = g1[0] if g1 else min(sibs, key=fta)
        maps = []
        for row in (base, gated):
            run = _representative(row)
            probes = cache.get(run, names.PROBES_ARTIFACT) or {}
            am = [m for m in probes.get("attention_maps") or [] if isinstance(m, dict) and m.get("matrix")]
            if not am:
                break
            m = am[-1]
            seed = ", ".join(f"{k.rsplit('.', 1)[-1]} {v}" for k, v in zip(comp.seed_axes, next(iter(row.counted)))) or run.name
            maps.append((f"{row.label(comp.axes)}\n(layer {m.get('layer')}, head {m.get('head')}, {seed})", m["matrix"]))
        if len(maps) == 2:
            rest = ", ".join(f"{p.rsplit('.', 1)[-1]}={axis_text(base.axes[p])}" for p in others)
            caption = (
                "Attention probabilities of the last layer's most sink-like head on one held-out sequence: the "
                f"baseline ({comp.baseline_text}) beside {gated.label(arch)}"
                + (f" at {rest}" if rest else "")
                + ". A bright first column is an attention sink."
            )
            return maps[0], maps[1], caption
    return None


__all__ = ["Report", "StoreError", "build_report", "make_plots"]
