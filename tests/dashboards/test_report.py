"""`gatesweep report` on a store filled by a real sweep: seed grouping, statistics recomputed here
from the MLflow runs, delta and paired test against `none`, best marks, the failed trial, reused
runs, every output format, the report artifacts on the parent run, user errors."""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from dashboards.report import build_report
from dashboards.stats import compare
from dashboards.store import read_sweep
from tests.support.cli import run_cli
from tests.support.records import mlflow_runs

pytestmark = pytest.mark.slow

METRICS = ("val_ppl", "first_token_attn", "sink_ratio", "max_activation", "loss_spikes", "tokens_per_s")


def expected_groups(children):
    """(gate, lr) -> {seed: run} of finished runs."""
    out: dict[tuple[str, str], dict[str, object]] = {}
    for r in children:
        if r.info.status != "FINISHED":
            continue
        t = r.data.tags
        out.setdefault((t["gatesweep.axis.model.gate"], t["gatesweep.axis.train.lr"]), {})[t["gatesweep.axis.train.seed"]] = r
    return out


@pytest.fixture(scope="module")
def comparison(store):
    return compare(read_sweep(store.uri, "cmp"))


def row_of(comp, gate: str, lr: str):
    [row] = [r for r in comp.rows if r.axes["model.gate"] == gate and float(r.axes["train.lr"]) == float(lr)]
    return row


def test_rows_are_configurations_with_seeds_grouped(store, comparison):
    assert comparison.axes == ["model.gate", "train.lr", "train.grad_clip"]
    assert comparison.seed_axes == ["train.seed"]
    assert len(comparison.rows) == 3  # none, G1, and the diverging none-lr=1e10 cell
    _, _, children = mlflow_runs(store)
    for (gate, lr), seeds in expected_groups(children).items():
        row = row_of(comparison, gate, lr)
        assert row.n == len(seeds) == 2
        assert sorted(r.run_id for r in row.counted.values()) == sorted(r.info.run_id for r in seeds.values())
        assert row.status == "ok"


def test_mean_std_ci_match_values_computed_from_mlflow(store, comparison):
    _, _, children = mlflow_runs(store)
    checked = 0
    for (gate, lr), seeds in expected_groups(children).items():
        row = row_of(comparison, gate, lr)
        for key in METRICS + ("gate_score_mean",):
            values = np.array([r.data.metrics[key] for r in seeds.values() if key in r.data.metrics])
            st = row.stats.get(key)
            if key == "gate_score_mean" and gate == "none":
                assert len(values) == 0 and st.mean is None  # the paper's "–"
                continue
            assert len(values) == 2 and st.n == 2
            mean, std = values.mean(), values.std(ddof=1)
            ci = sps.t.ppf(0.975, len(values) - 1) * std / math.sqrt(len(values))
            assert st.mean == pytest.approx(mean, rel=1e-12, abs=1e-15)
            assert st.std == pytest.approx(std, rel=1e-9, abs=1e-15)
            assert st.ci95 == pytest.approx(ci, rel=1e-9, abs=1e-15)
            assert (st.lo, st.hi) == (pytest.approx(mean - ci, abs=1e-12), pytest.approx(mean + ci, abs=1e-12))
            checked += 1
    assert checked == 2 * len(METRICS) + 1


def test_delta_and_paired_test_against_the_none_row(store, comparison):
    _, _, children = mlflow_runs(store)
    groups = expected_groups(children)
    base, gated = groups[("none", "0.003")], groups[("G1-elementwise", "0.003")]
    row = row_of(comparison, "G1-elementwise", "0.003")
    assert row.baseline is row_of(comparison, "none", "0.003") and row.baseline.is_baseline
    for key in METRICS:
        seeds = sorted(base)
        a = [gated[s].data.metrics[key] for s in seeds]
        b = [base[s].data.metrics[key] for s in seeds]
        d = row.deltas[key]
        assert d.diff == pytest.approx(np.mean(a) - np.mean(b), abs=1e-12)
        assert d.n_pairs == 2
        if np.ptp(np.subtract(a, b)) > 0:
            res = sps.ttest_rel(a, b)
            assert d.p == pytest.approx(res.pvalue, rel=1e-9) and d.t == pytest.approx(res.statistic, rel=1e-9)
        else:  # no variation in the differences (e.g. 0 spikes everywhere): no test
            assert d.p is None
    assert "gate_score_mean" not in row.deltas  # absent for the baseline
    assert not row_of(comparison, "none", "0.003").deltas


def test_best_value_per_column_is_marked_only_where_significant(comparison):
    """The mark goes to the best mean of a column, and only where it is significantly better
    after Holm (its Δ against the baseline, or every Δ against it when the baseline is best)."""
    for m in comparison.metrics:
        means = {id(r): r.stats[m.key].mean for r in comparison.rows if r.stats[m.key].mean is not None}
        marked = [r for r in comparison.rows if m.key in r.best]
        if m.better is None or len(set(means.values())) < 2:
            assert not marked, m.key
            continue
        target = (min if m.better == "min" else max)(means.values())
        for r in comparison.rows:
            best = r.stats[m.key].mean == target
            if r.baseline is not None:
                significant = m.key in r.deltas and r.deltas[m.key].significant
            else:
                vs = [o for o in comparison.rows if o.baseline is r and o.stats[m.key].mean is not None]
                significant = bool(vs) and all(m.key in o.deltas and o.deltas[m.key].significant for o in vs)
            assert (m.key in r.best) == (best and significant), (m.key, r.label())


def test_failed_trial_is_a_row_and_listed_with_its_reason(comparison):
    row = row_of(comparison, "none", "1e10")
    assert row.n == 0 and row.status == "1 failed"
    assert all(st.mean is None for st in row.stats.values())
    [bad] = comparison.unfinished
    assert bad.state == "failed" and "diverged" in bad.reason and bad.axes["train.lr"] == "10000000000.0"
    assert comparison.state_counts() == {"finished": 4, "failed": 1}


def test_main_effects_average_over_the_other_axes(comparison):
    gate = {e.level: e for e in comparison.effects["model.gate"]}
    assert set(gate) == {"none", "G1-elementwise"}
    for level, effect in gate.items():
        finished_rows = [r for r in comparison.rows if r.axes["model.gate"] == level and r.n]
        assert effect.configs == len(finished_rows) == 1
        assert effect.means["val_ppl"] == pytest.approx(finished_rows[0].stats["val_ppl"].mean)
    lr = {float(e.level): e for e in comparison.effects["train.lr"]}
    ok = [r for r in comparison.rows if float(r.axes["train.lr"]) == 0.003]
    assert lr[0.003].configs == 2
    assert lr[0.003].means["val_ppl"] == pytest.approx(np.mean([r.stats["val_ppl"].mean for r in ok]))
    assert lr[1e10].configs == 0 and lr[1e10].means["val_ppl"] is None
    # the zipped grad_clip splits the rows as lr does: folded into lr's main effect
    assert comparison.together == {"train.lr": ["train.grad_clip"]} and "train.grad_clip" not in comparison.effects


def test_reused_finished_runs_are_included(store, comparison):
    """The second sweep trained nothing; its report is built from the runs it reused."""
    again = read_sweep(store.uri, "cmp-again")
    assert len(again.runs) == 4 and all(r.reused and r.finished for r in again.runs)
    comp = compare(again)
    assert comp.axes == ["model.gate"] and comp.seed_axes == ["train.seed"]
    for row in comp.rows:
        first = row_of(comparison, row.axes["model.gate"], "0.003")
        assert row.n == 2 and row.stats["val_ppl"].mean == pytest.approx(first.stats["val_ppl"].mean)
    assert comp.rows[1].deltas["val_ppl"].p == pytest.approx(row_of(comparison, "G1-elementwise", "0.003").deltas["val_ppl"].p)


def test_report_files_and_artifacts_on_the_parent_run(store, tmp_path):
    cl, parent, _ = mlflow_runs(store)
    rep = build_report(store.uri, "cmp", out_dir=tmp_path / "rep")
    names = {p.name for p, _ in rep.plots}
    assert {
        "loss_curves.png",
        "first_token_attn_per_layer.png",
        "attention_maps.png",
        "gate_histograms.png",
        "metric_vs_model.gate.png",
        "metric_vs_train.lr.png",
    } <= names
    for p, _ in rep.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert rep.logged_run_id == parent.info.run_id and rep.log_error is None
    logged = {a.path for a in cl.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/report.csv"} | {f"report/{n}" for n in names} <= logged
    # the report writes nothing else: no new runs, parent metrics/params/tags unchanged
    after = cl.get_run(parent.info.run_id)
    assert after.data.params == parent.data.params and after.data.metrics == parent.data.metrics
    assert after.data.tags == parent.data.tags
    assert len(mlflow_runs(store)[2]) == 5


def test_every_format_renders(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    common = ["cmp", "--tracking-uri", store.uri, "--out", str(tmp_path / "r"), "--no-plots"]
    rc, out, err = run_cli(capsys, "report", *common)
    assert rc == 0, err
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 100, [ln for ln in lines if len(ln) > 100]
    assert re.search(r"^none\s+0\.003\s+1\s+2\s+ok\s", out, re.M) and re.search(r"^none\s+1e\+10\s+0\s+0\s+1 failed", out, re.M)
    assert "*" in out and "±" in out and "Δ against the baseline" in out and "Runs that did not finish" in out and "diverged" in out

    rc, md, _ = run_cli(capsys, "report", *common, "--format", "md")
    assert rc == 0 and "| model.gate" in md and "**" in md and "## Runs that did not finish" in md
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert len({len(ln) for ln in table[:4]}) == 1  # header and 3 rows, padded: the raw text lines up

    rc, text, _ = run_cli(capsys, "report", *common, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rc == 0 and len(rows) == 3
    g1 = [r for r in rows if r["model.gate"] == "G1-elementwise"][0]
    assert int(g1["n_finished"]) == 2 and float(g1["val_ppl.p"]) > 0 and g1["gate_score_mean.mean"]
    assert [r["status"] for r in rows if r["train.lr"].startswith("1")] == ["1 failed"]

    rc, tex, _ = run_cli(capsys, "report", *common, "--format", "latex")
    assert rc == 0 and r"\begin{tabular}" in tex and r"\toprule" in tex and "--" in tex
    # bold marks a best value only where it is significant after Holm (rarely, with these 2 seeds)
    marked = any(r.best for r in compare(read_sweep(store.uri, "cmp")).rows)
    assert "bold: best per column: marked only where significantly better after Holm" in tex and (r"\textbf{" in tex) == marked

    rc, page, _ = run_cli(capsys, "report", *common, "--format", "html")
    assert rc == 0 and page.startswith("<!DOCTYPE html>") and "<table" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "<script" not in page


def test_user_errors_exit_2_and_create_nothing(store, tmp_path, capsys):
    rc, _, err = run_cli(capsys, "report", "nope", "--tracking-uri", store.uri, "--no-log")
    assert rc == 2 and "no sweep named 'nope'" in err and "cmp" in err and "cmp-again" in err
    assert "Traceback" not in err
    missing = tmp_path / "missing.db"
    rc, _, err = run_cli(capsys, "report", "cmp", "--tracking-uri", f"sqlite:///{missing}")
    assert rc == 2 and "no store at" in err and not missing.exists()
    rc, _, err = run_cli(capsys, "report", "--tracking-uri", store.uri)
    assert rc == 2 and "name a sweep" in err
    rc, _, err = run_cli(capsys, "report", "cmp", "--tracking-uri", store.uri, "--parent", "0" * 32)
    assert rc == 2 and "no run" in err


def test_sqlite_reader_matches_search_runs(store, monkeypatch):
    """The direct SQLite read returns exactly what MLflow's search_runs returns."""
    for name in ("cmp", "cmp-again"):
        fast = read_sweep(store.uri, name)
        monkeypatch.setenv("GATESWEEP_REPORT_SEARCH_RUNS", "1")
        api = read_sweep(store.uri, name)
        monkeypatch.delenv("GATESWEEP_REPORT_SEARCH_RUNS")
        assert (fast.name, fast.experiment_id, fast.experiment, fast.launches, fast.search, fast.axes) == (
            api.name,
            api.experiment_id,
            api.experiment,
            api.launches,
            api.search,
            api.axes,
        )
        assert len(fast.runs) == len(api.runs) >= 4
        by_id = {r.run_id: r for r in api.runs}
        for a in [fast.parent] + fast.runs:
            b = api.parent if a is fast.parent else by_id[a.run_id]
            for attr in (
                "name",
                "status",
                "state",
                "reason",
                "params",
                "tags",
                "start_time",
                "end_time",
                "experiment_id",
                "artifact_uri",
                "reused",
                "axes",
            ):
                assert getattr(a, attr) == getattr(b, attr), (a.name, attr)
            assert a.metrics.keys() == b.metrics.keys()
            assert all(a.metrics[k] == b.metrics[k] or (math.isnan(a.metrics[k]) and math.isnan(b.metrics[k])) for k in a.metrics)


def test_parent_option_reports_one_launch(store, tmp_path, capsys):
    _, parent, _ = mlflow_runs(store)
    rc, out, err = run_cli(
        capsys,
        "report",
        "--parent",
        parent.info.run_id,
        "--tracking-uri",
        store.uri,
        "--format",
        "csv",
        "--no-plots",
        "--no-log",
        "--out",
        str(tmp_path),
    )
    assert rc == 0, err
    assert len(list(csv.DictReader(io.StringIO(out)))) == 3
    rc, _, err = run_cli(capsys, "report", "cmp-again", "--parent", parent.info.run_id, "--tracking-uri", store.uri, "--no-log")
    assert rc == 2 and "parent of sweep 'cmp'" in err
