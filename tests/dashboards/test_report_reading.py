"""What a report says, on hand-made runs (no store): levels in the sweep's order, the interaction
table (each arm's Δ at every level of each other axis), best marks only where significant after
Holm, unknown --metrics names refused with the closest logged names, LaTeX escaped."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from dashboards import html, tables
from dashboards.levels import level_order, same_value
from dashboards.records import StoreError
from dashboards.stats import compare
from dashboards.store import RunRecord, SweepRuns, resolve_axes
from dashboards.tables_latex import tex
from orchestrator.tracking import run_state

SIZES = {"tiny": 1_200_000, "small": 5_300_000, "125m": 125_000_000}


def run(i: int, axes: dict[str, str], metrics: dict[str, float], params: dict[str, str] | None = None, status="FINISHED") -> RunRecord:
    tags = {f"gatesweep.axis.{p}": v for p, v in axes.items()}
    state, reason = run_state(status, tags)
    return RunRecord(f"r{i:03d}", f"run{i}", status, state, reason, params or {}, metrics, tags, i, None, "1")


def sweep(runs: list[RunRecord], axes: str, sweep_file: dict | None = None) -> SweepRuns:
    parent = RunRecord(
        "p", "s", "FINISHED", "finished", "", {"sweep.axes": axes, "sweep.search": "grid"}, {}, {"gatesweep.kind": "sweep"}, 0, None, "1"
    )
    s = SweepRuns("s", "sqlite:///x.db", "1", "e", parent, runs, 1, sweep_file=sweep_file)
    resolve_axes(s)
    return s


def gates_by_size(noise: float = 0.01, seeds=(0, 1, 2), sweep_file: dict | None = None, lrs=("0.003",)) -> SweepRuns:
    """none / G1-elementwise / G1-headwise x model.size (small, tiny: listed out of order) x seeds:
    G1 lowers first-token attention by 0.6 at tiny and 0.3 at small; throughput is noise (each
    configuration's seeds a permutation of the same spread, its mean a little apart)."""
    rng = random.Random(1)
    runs, i, config = [], 0, 0
    for gate in ("none", "G1-elementwise", "G1-headwise"):
        for size in ("small", "tiny"):
            for lr in lrs:
                config += 1
                for seed in seeds:
                    i += 1
                    effect = 0.0 if gate == "none" else (0.6 if size == "tiny" else 0.3)
                    m = {
                        "first_token_attn": 0.7 - effect + noise * rng.gauss(0, 1),
                        "val_ppl": 9.0 + (size == "tiny") + 0.01 * seed + 0.02 * rng.random(),
                        "tokens_per_s": 1000.0 + 3 * config + (40.0, -40.0, 0.0)[(seed + config) % 3],
                    }
                    position, _, granularity = gate.partition("-")
                    params = {"model.num_params": str(SIZES[size]), "model.gate.position": position, "train.lr": lr}
                    if granularity:
                        params["model.gate.granularity"] = granularity
                    axes = {"model.gate": gate, "model.size": size, "train.seed": str(seed)}
                    if len(lrs) > 1:
                        axes["train.lr"] = lr
                    runs.append(run(i, axes, m, params))
    return sweep(runs, "model.gate,model.size,train.lr,train.seed" if len(lrs) > 1 else "model.gate,model.size,train.seed", sweep_file)


def test_levels_follow_the_sweep_file_and_sizes_their_parameter_count():
    file = {
        "grid": {"model.gate.position": ["G1", "none"], "model.gate.granularity": ["headwise", "elementwise"], "train.lr": [1.0e-2, "3e-3"]}
    }
    s = gates_by_size(sweep_file=file, lrs=("0.003", "0.01"))
    levels = level_order(s, ["model.gate", "model.size", "train.lr"])
    assert levels["model.size"] == ["tiny", "small"]  # by parameter count, not alphabetically (small < tiny)
    assert levels["train.lr"] == ["0.01", "0.003"]  # the file's order; YAML's 1.0e-2 and "3e-3" are the tags' 0.01, 0.003
    assert levels["model.gate"] == ["G1-headwise", "G1-elementwise", "none"]  # the order of the gate fields in the file
    comp = compare(s)
    assert [tuple(r.axes.values()) for r in comp.rows[:3]] == [
        ("G1-headwise", "tiny", "0.01"),
        ("G1-headwise", "tiny", "0.003"),
        ("G1-headwise", "small", "0.01"),
    ]
    assert [e.level for e in comp.effects["model.size"]] == ["tiny", "small"]
    # without a file: the baseline first, numbers by value, text alphabetically; sizes still by size
    bare = level_order(gates_by_size(lrs=("0.01", "0.003")), ["model.gate", "model.size", "train.lr"])
    assert bare == {"model.gate": ["none", "G1-elementwise", "G1-headwise"], "model.size": ["tiny", "small"], "train.lr": ["0.003", "0.01"]}
    assert same_value("0.001", "1e-3") and same_value("True", True) and not same_value("0.1", "0.01") and not same_value(None, 1)


def test_interactions_give_each_arm_s_delta_at_every_level():
    comp = compare(gates_by_size())
    [inter] = comp.interactions  # model.size is the only non-architecture axis
    assert inter.axis == "model.size" and inter.levels == ["tiny", "small"] and inter.arms == ["G1-elementwise", "G1-headwise"]
    cells = inter.cells["first_token_attn"]
    for arm in inter.arms:
        for level, cell in zip(inter.levels, cells[arm]):
            [row] = [r for r in comp.rows if r.axes == {"model.gate": arm, "model.size": level}]
            base = row.baseline
            assert base is not None and base.axes["model.size"] == level
            want = np.mean([row.stats["first_token_attn"].values[k] - base.stats["first_token_attn"].values[k] for k in row.counted])
            assert cell.diff == pytest.approx(want) and cell.rows == 1 and cell.delta is row.deltas["first_token_attn"]
            assert cell.diff == pytest.approx(-0.6 if level == "tiny" else -0.3, abs=0.05)
            assert cell.significant == row.deltas["first_token_attn"].significant
    # a further axis (the learning rate) is averaged over, without a test of its own
    comp = compare(gates_by_size(lrs=("0.003", "0.01")))
    by_axis = {i.axis: i for i in comp.interactions}
    assert set(by_axis) == {"model.size", "train.lr"}
    cell = by_axis["model.size"].cells["first_token_attn"]["G1-elementwise"][0]
    assert cell.rows == 2 and cell.delta is None and not cell.significant
    md, text, page = tables.markdown(comp), tables.terminal(comp, width=100), html.render(comp)
    assert "## Δ against the baseline at each level of model.size" in md and "(mean of 2)" in md
    assert "Δ against the baseline at each level of train.lr" in text and max(map(len, text.splitlines())) <= 100
    assert 'id="table-interaction-model.size"' in page


def test_best_is_marked_only_where_significant_after_holm():
    comp = compare(gates_by_size())
    fta = [r for r in comp.rows if "first_token_attn" in r.best]
    assert fta and all(r.deltas["first_token_attn"].significant for r in fta)
    # throughput is noise: its best mean gets no mark
    assert not any("tokens_per_s" in r.best for r in comp.rows)
    assert all(not r.deltas["tokens_per_s"].significant for r in comp.rows if "tokens_per_s" in r.deltas)
    # the baseline is marked when every row compared with it is significantly worse
    rev = gates_by_size()
    for r in rev.runs:
        r.metrics["first_token_attn"] = 1.0 - r.metrics["first_token_attn"]
        r.metrics.pop("tokens_per_s")
    comp = compare(rev)
    marked = [r for r in comp.rows if "first_token_attn" in r.best]
    assert [r.is_baseline for r in marked] == [True]
    # no baseline row: nothing is tested, nothing marked
    lone = sweep(
        [run(i, {"train.lr": lr, "train.seed": str(s)}, {"val_ppl": float(i)}) for i, (lr, s) in enumerate([("0.1", 0), ("0.2", 0)])],
        "train.lr,train.seed",
    )
    assert not any(r.best for r in compare(lone).rows)


def test_an_unknown_metric_is_an_error_with_the_closest_names():
    s = gates_by_size()
    with pytest.raises(StoreError) as caught:
        compare(s, ["val_los", "first_token_attn"])
    text = str(caught.value)
    assert "--metrics: 'val_los' (did you mean 'val_ppl'?) is not a metric of sweep s" in text and "first_token_attn" in text
    with pytest.raises(
        StoreError, match=r"'ppl_val', 'fta' are not metrics of sweep s; its runs logged: first_token_attn, tokens_per_s, val_ppl"
    ):
        compare(s, ["ppl_val", "fta"])
    assert [m.key for m in compare(s, ["tokens_per_s"]).metrics] == ["tokens_per_s"]


HOSTILE = ["a_b", "50%", "x&y", "#1", "$5", "~u", "^2", "{c}", "back\\slash", "<0.1", ">2", "|p|", '"q"']


def hostile_comparison():
    """Gate none / G1 on data sources named with every character LaTeX treats as markup; G1's
    first-token attention Δ has p < 0.001."""
    runs, i = [], 0
    for gate in ("none", "G1-elementwise"):
        for v in HOSTILE:
            for seed in (0, 1, 2):
                i += 1
                fta = 0.7 + 0.01 * seed if gate == "none" else 0.05 + 0.0101 * seed
                runs.append(
                    run(
                        i,
                        {"model.gate": gate, "data.source": v, "train.seed": str(seed)},
                        {"val_ppl": 5.0 + 0.1 * seed, "first_token_attn": fta},
                    )
                )
    return compare(sweep(runs, "model.gate,data.source,train.seed"))


def test_latex_is_escaped():
    """Every character LaTeX reads as markup is escaped, and `<`, `>` (which the default OT1 fonts
    print as ¡ and ¿) and `|` are spelled as commands."""
    assert tex("<0.001") == r"\textless{}0.001" and tex("a_b & 50%") == r"a\_b \& 50\%"
    comp = hostile_comparison()
    text = tables.latex(comp)
    body = [ln for ln in text.splitlines() if not ln.startswith("%")]
    joined = "\n".join(body)
    assert not re.search(r"[<>|~^¡¿]", joined), joined
    assert not re.findall(r"(?<!\\)[%#_]", joined)
    assert "\\textless{}0.001" in joined  # the Holm p of a significant Δ, once written raw
    columns, rows = 0, 0
    for ln in body:
        spec = re.match(r"\\begin\{tabular\}\{([lr]+)\}", ln)
        if spec:
            columns = len(spec.group(1))
        elif ln.endswith(r" \\"):  # a row: one unescaped & per column boundary, or a name broke it
            assert len(re.findall(r"(?<!\\)&", ln)) == columns - 1, ln
            rows += 1
    assert rows == 2 * len(HOSTILE) + len(HOSTILE) + 2  # both gates' rows, the Δ rows, two headers


def compile_tex(tmp_path, table: str):
    """pdflatex on a document around `table`, or None when no TeX engine is installed."""
    import shutil
    import subprocess

    engine = shutil.which("pdflatex")
    if engine is None:
        return None
    doc = tmp_path / "doc.tex"
    # booktabs when installed (texlive-latex-recommended), else its three rules as \\hline
    rules = r"\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{\newcommand\toprule{\hline}\newcommand\midrule{\hline}\newcommand\bottomrule{\hline}}"
    doc.write_text("\\documentclass{article}\n" + rules + "\n\\begin{document}\n" + table + "\n\\end{document}\n", encoding="utf-8")
    return subprocess.run(
        [engine, "-halt-on-error", "-interaction=nonstopmode", doc.name], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_latex_compiles(tmp_path):
    out = compile_tex(tmp_path, tables.latex(hostile_comparison()))
    if out is None:
        pytest.skip("no TeX engine here (pdflatex; Debian: apt-get install -y texlive-latex-base); the escaping is tested above")
    assert out.returncode == 0, out.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000
