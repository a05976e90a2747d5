"""Per-layer gate statistics as small heat maps: for each arm, its first-token attention and its
gate-score mean per layer over its evaluations (layers x steps), so that "the gate concentrates
in the early layers" or "the sink forms in layer 3 after step 500" shows at a glance.

Every evaluation of a trial logs `first_token_attn/layer_<i>` and `gate_score_mean/layer_<i>`
(`orchestrator.evals.probe_metrics`); their MLflow histories are fetched here for the runs a
report draws (`search_runs` returns only the last value), averaged over an arm's seeds at each
step. `section` is the report's part (`dashboards.sections.plots.layer_heat`); `rung_heat` builds the
same grid from per-rung values (layers x rungs), for a ladder report to pass to `draw` (it is not
wired into the ladder report, whose modules are being rewritten).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .artifacts import metric_history
from .comparison import Comparison, Row
from .records import RunRecord

HEATMAP_FILE = "layer_heatmaps.png"
METRICS = (("first_token_attn", "first-token attention"), ("gate_score_mean", "gate score mean"))
"""(metric prefix, panel title): one column of panels each."""
MAX_ROWS = 16
"""Configurations drawn (one small row each; the report picks them as for its other plots)."""
MAX_SEEDS = 3
"""Seeds averaged per arm (each costs one history request per layer and metric)."""
MAX_LAYERS = 48
"""Layers drawn (a deeper model shows its first MAX_LAYERS)."""


@dataclass
class Heat:
    """One arm's grids: metric prefix -> [layer][column], NaN where a value is missing."""

    label: str
    columns: list[str]
    """Evaluation steps, or rung names."""
    grids: dict[str, list[list[float]]]


def _layers(run: RunRecord, prefix: str) -> int:
    """How many `<prefix>/layer_<i>` the run's last values hold (0 when it logs none)."""
    pattern = re.compile(rf"^{re.escape(prefix)}/layer_(\d+)$")
    found = [int(m.group(1)) for k in run.metrics if (m := pattern.match(k))]
    return min(max(found) + 1, MAX_LAYERS) if found else 0


def layer_history(cl, runs: Sequence[RunRecord], prefix: str) -> tuple[list[int], list[list[float]]]:
    """(steps, [layer][step]) of `<prefix>/layer_<i>`, the mean over `runs` at each step (over
    the runs that logged a finite value there; NaN where none did)."""
    n_layers = max((_layers(r, prefix) for r in runs), default=0)
    per_layer: list[list[dict[int, float]]] = []
    for i in range(n_layers):
        per_layer.append([dict(zip(*metric_history(cl, r.run_id, f"{prefix}/layer_{i}"))) for r in runs])
    steps = sorted({s for layer in per_layer for points in layer for s in points})
    grid = []
    for layer in per_layer:
        row = []
        for s in steps:
            vals = [p[s] for p in layer if s in p and math.isfinite(p[s])]
            row.append(math.fsum(vals) / len(vals) if vals else math.nan)
        grid.append(row)
    return steps, grid


def arm_heat(cl, label: str, runs: Sequence[RunRecord]) -> Heat | None:
    """The heat of one arm from its runs' histories, on the union of the steps either metric was
    logged at; None when the runs logged no per-layer metric."""
    found = {}
    for prefix, _ in METRICS:
        steps, grid = layer_history(cl, runs, prefix)
        if grid:
            found[prefix] = (steps, grid)
    if not found:
        return None
    columns = sorted({s for steps, _ in found.values() for s in steps})
    grids = {p: [[dict(zip(steps, row)).get(s, math.nan) for s in columns] for row in grid] for p, (steps, grid) in found.items()}
    return Heat(label, [str(s) for s in columns], grids)


def rung_heat(label: str, per_rung: Mapping[str, Mapping[str, Sequence[float]]]) -> Heat:
    """A ladder's layers x rungs grid of one arm: `per_rung` is rung name -> metric prefix ->
    per-layer values (e.g. the mean over seeds of `<prefix>/layer_<i>` at the rung's end), in
    rung order; missing values are NaN."""
    rungs = list(per_rung)
    grids: dict[str, list[list[float]]] = {}
    for prefix, _ in METRICS:
        depth = max((len(v.get(prefix, ())) for v in per_rung.values()), default=0)
        if depth:
            grids[prefix] = [
                [float(per_rung[r][prefix][i]) if i < len(per_rung[r].get(prefix, ())) else math.nan for r in rungs]
                for i in range(min(depth, MAX_LAYERS))
            ]
    return Heat(label, rungs, grids)


def draw(heats: Sequence[Heat], path: Path, title: str = "per-layer statistics", xlabel: str = "evaluation step") -> Path:
    """One row of small heat maps per arm (layer 0 on top), one column per metric of METRICS.
    First-token attention on [0, 1]; gate scores on [0, max(1, largest)] shared by the arms, so
    an unbounded gate above 1 shows. Small grids carry their values."""
    import numpy as np

    from orchestrator import plots  # lazy: imports matplotlib

    plt = plots.plt
    cols = [p for p, _ in METRICS if any(p in h.grids for h in heats)]
    titles = dict(METRICS)
    top = {p: 1.0 for p in cols}
    for h in heats:
        for p, grid in h.grids.items():
            vals = [v for row in grid for v in row if math.isfinite(v)]
            if vals and p != "first_token_attn":
                top[p] = max(top[p], max(vals))
    height = 1.8 + 1.5 * len(heats)
    fig, axs = plt.subplots(len(heats), len(cols), figsize=(3.6 * len(cols) + 0.8, height), squeeze=False, gridspec_kw={"hspace": 0.85})
    fig.subplots_adjust(top=1 - 1.4 / height, bottom=0.5 / height)  # margins in inches, not a share of a tall figure
    images: dict[int, object] = {}
    for r, h in enumerate(heats):
        for c, p in enumerate(cols):
            ax = axs[r][c]
            grid = h.grids.get(p)
            if grid is None:
                ax.text(0.5, 0.5, "no gate" if p == "gate_score_mean" else "not logged", ha="center", va="center", fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
            else:
                data = np.asarray(grid, dtype=float)
                im = ax.imshow(data, cmap="magma", vmin=0.0, vmax=top[p], aspect="auto", interpolation="nearest")
                ax.set_yticks(range(len(grid)))
                ax.set_yticklabels([str(i) for i in range(len(grid))], fontsize=6)
                step = max(1, math.ceil(len(h.columns) / 8))
                ax.set_xticks(range(0, len(h.columns), step))
                ax.set_xticklabels(h.columns[::step], fontsize=6)
                if data.size <= 48:
                    for (i, j), v in np.ndenumerate(data):
                        if math.isfinite(v):
                            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=5, color="white" if v < 0.6 * top[p] else "black")
                images[c] = im
            if c == 0:
                ax.set_title("\n".join(textwrap.wrap(h.label, 70)), loc="left", fontsize=7)
                ax.set_ylabel("layer", fontsize=7)
            elif r == 0:
                ax.set_title(titles[p], fontsize=9)
            if r == len(heats) - 1:
                ax.set_xlabel(xlabel, fontsize=7)
    for c, im in images.items():  # one scale per metric, beside its column
        fig.colorbar(im, ax=axs[:, c].tolist(), fraction=0.05, pad=0.03)
    fig.suptitle(f"{title}\ncolumns: {', '.join(titles[p] for p in cols)}", fontsize=10)
    fig.savefig(path, dpi=plots.DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def short_label(comp: Comparison, row: Row) -> str:
    """A row's name without the axes zipped with another (`G1-elementwise, kind=mla,
    source=shakespeare` rather than every zipped setting too)."""
    folded = {q for qs in comp.together.values() for q in qs}
    return row.label([a for a in comp.axes if a not in folded])


def section(cl, comp: Comparison, out: Path, rows: Sequence[Row], note: str = "") -> list[tuple[Path, str]]:
    """The report's heat maps: one row per drawn configuration (up to MAX_SEEDS seeds averaged)."""
    heats = []
    for row in rows:
        runs = list(row.counted.values())[:MAX_SEEDS]
        heat = arm_heat(cl, short_label(comp, row), runs)
        if heat is not None:
            heats.append(heat)
    if not heats:
        return []
    path = draw(heats, out / HEATMAP_FILE, f"per-layer statistics over training, sweep {comp.sweep.name}")
    caption = (
        "Per layer (rows, layer 0 on top) and evaluation step (columns): first-token attention and the gate score's mean "
        f"on held-out data, mean over up to {MAX_SEEDS} seeds of each configuration; gate scores share one colour scale "
        f"(from 0 to the largest, at least 1, so an unbounded gate above 1 shows){note}."
    )
    return [(path, caption)]
