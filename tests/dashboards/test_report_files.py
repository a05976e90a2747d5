"""A report never destroys the previous one, and reads the sweep's order from its store: a real
SQLite MLflow store filled by hand (`tests.sweepstore`), `gatesweep report` in-process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dashboards import report as report_module
from dashboards.report import build_report
from dashboards.store import read_sweep
from orchestrator.cli.main import main

from ..sweepstore import Trial, fill

pytestmark = pytest.mark.slow  # an MLflow store per test (its schema takes seconds to create)


def fill_sizes(uri: str, name: str = "sizes", *, sizes=("small", "tiny"), with_file: bool = True) -> str:
    """none / G1 x model.size x 3 seeds, the file listing the sizes out of order (small, tiny)."""
    rng = random.Random(0)
    params = {"tiny": 1_200_000, "small": 5_300_000}
    trials = []
    for gate in ("none", "G1-elementwise"):
        for size in sizes:
            for seed in (0, 1, 2):
                fta = (0.7 if gate == "none" else (0.1 if size == "tiny" else 0.4)) + 0.01 * rng.random()
                trials.append(
                    Trial(
                        {"model.gate": gate, "model.size": size, "train.seed": seed},
                        {"first_token_attn": fta, "val_ppl": 9.0 + rng.random() / 10},
                        params={"model.num_params": params[size], "model.gate.position": gate.split("-")[0]},
                    )
                )
    doc = {"name": name, "grid": {"model.gate.position": ["none", "G1"], "model.size": list(sizes), "train.seed": [0, 1, 2]}}
    return fill(uri, name, trials, sweep_file=doc if with_file else None)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_typo_in_metrics_is_exit_2_and_leaves_the_previous_report(tracking_uri, tmp_path, capsys):
    fill_sizes(tracking_uri)
    out = tmp_path / "rep"
    assert main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out), "--no-log"]) == 0
    before = snapshot(out)
    assert {"report.html", "report.md", "metric_vs_model.size.png", "interaction_model.size.png"} <= set(before)
    capsys.readouterr()
    rc = main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out), "--no-log", "--metrics", "val_los"])
    err = capsys.readouterr().err
    assert rc == 2 and "'val_los' (did you mean 'val_ppl'?) is not a metric of sweep sizes" in err and "Traceback" not in err
    assert snapshot(out) == before  # not one file touched, no staging folder left


def test_a_report_that_fails_or_is_interrupted_halfway_keeps_the_previous_one(tracking_uri, tmp_path, monkeypatch):
    fill_sizes(tracking_uri)
    out = tmp_path / "rep"
    build_report(tracking_uri, "sizes", out_dir=out, log=False)
    before = snapshot(out)
    for raised in (RuntimeError("the disk is full"), KeyboardInterrupt()):

        def broken(*args, raised=raised, **kwargs):
            raise raised

        monkeypatch.setattr(report_module.html_report, "render", broken)  # after the plots and report.md were staged
        with pytest.raises(type(raised)):
            build_report(tracking_uri, "sizes", out_dir=out, log=False)
        assert snapshot(out) == before
    # a first report that fails leaves no folder behind
    monkeypatch.setattr(report_module.html_report, "render", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        build_report(tracking_uri, "sizes", out_dir=tmp_path / "new" / "rep", log=False, with_plots=False)
    assert not (tmp_path / "new" / "rep").exists()


def test_a_new_report_replaces_the_files_that_no_longer_apply_and_leaves_others_alone(tracking_uri, tmp_path):
    fill_sizes(tracking_uri, "sizes")
    fill_sizes(tracking_uri, "one-size", sizes=("tiny",))
    out = tmp_path / "rep"
    (tmp_path / "rep").mkdir()
    (out / "notes.txt").write_text("mine")
    stale = out / f"{report_module.STAGE_PREFIX}999999999-abc"  # a killed report's staging folder
    stale.mkdir()
    (stale / "report.html").write_text("half")
    build_report(tracking_uri, "sizes", out_dir=out, log=False)
    assert (out / "metric_vs_model.size.png").exists() and not stale.exists()
    build_report(tracking_uri, "one-size", out_dir=out, log=False)  # no size axis any more
    names = set(snapshot(out))
    assert "metric_vs_model.size.png" not in names and "interaction_model.size.png" not in names
    assert {"report.html", "metric_vs_model.gate.png", "notes.txt"} <= names and (out / "notes.txt").read_text() == "mine"
    assert not [n for n in names if n.startswith(report_module.STAGE_PREFIX)]


def test_the_sweep_file_logged_on_the_parent_orders_the_levels(tracking_uri, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the default --out, reports/NAME, is relative to the working folder
    fill_sizes(tracking_uri, "ordered")
    for api in ("0", "1"):  # the SQLite reader and MLflow's search_runs read the same file
        monkeypatch.setenv("GATESWEEP_REPORT_SEARCH_RUNS", api)
        s = read_sweep(tracking_uri, "ordered")
        assert s.sweep_file is not None and s.sweep_file["grid"]["model.size"] == ["small", "tiny"]
    rep = build_report(tracking_uri, "ordered", out_dir=None, log=False, with_plots=False)
    assert rep.comparison.levels["model.size"] == ["tiny", "small"]  # by size, though the file lists small first
    assert rep.comparison.levels["model.gate"] == ["none", "G1-elementwise"]
    md = rep.files["report.md"].read_text()
    assert md.index("| none           | tiny") < md.index("| none           | small")


# ---- a user's files in --out (issue 33) -----------------------------------------------------------
USER_PLOTS = ("loss_curves.png", "gate_histograms.png", "interaction_lr.png", "metric_vs_width.png")


def test_no_plots_never_deletes_a_users_files_of_the_same_names(tracking_uri, tmp_path, capsys):
    """The issue's case: the user's own PNGs, named like the report's, in --out; `--no-plots`
    writes no PNG and touches none of them."""
    fill_sizes(tracking_uri)
    out = tmp_path / "mine"
    out.mkdir()
    for name in USER_PLOTS:
        (out / name).write_bytes(b"the user's own " + name.encode())
    assert main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out), "--no-log", "--no-plots"]) == 0
    for name in USER_PLOTS:
        assert (out / name).read_bytes() == b"the user's own " + name.encode(), name
    assert (out / "report.html").is_file()


def test_a_users_file_in_the_way_refuses_the_report_and_nothing_is_replaced(tracking_uri, tmp_path, capsys):
    fill_sizes(tracking_uri)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my own notes, not a report")
    capsys.readouterr()
    rc = main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out), "--no-log", "--no-plots"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("gatesweep: error: ")]
    assert rc == 2 and len(errors) == 1 and "report.md is not a file an earlier report wrote" in errors[0] and "Traceback" not in err, err
    assert snapshot(out) == {"report.md": b"my own notes, not a report"}, "nothing replaced, no staging folder left"
    # the report's own files are replaced by the next report; once the user edits one, it is theirs
    out2 = tmp_path / "rep"
    assert main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out2), "--no-log", "--no-plots"]) == 0
    assert main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out2), "--no-log", "--no-plots"]) == 0
    (out2 / "report.csv").write_text("edited")
    capsys.readouterr()
    assert main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", str(out2), "--no-log", "--no-plots"]) == 2
    assert "report.csv is not a file an earlier report wrote" in capsys.readouterr().err
    assert (out2 / "report.csv").read_text() == "edited"


def test_no_plots_leaves_the_previous_reports_plots_alone(tracking_uri, tmp_path):
    fill_sizes(tracking_uri)
    out = tmp_path / "rep"
    build_report(tracking_uri, "sizes", out_dir=out, log=False)
    plots = {n: b for n, b in snapshot(out).items() if n.endswith(".png")}
    assert "metric_vs_model.size.png" in plots
    build_report(tracking_uri, "sizes", out_dir=out, log=False, with_plots=False)
    assert {n: b for n, b in snapshot(out).items() if n.endswith(".png")} == plots
    build_report(tracking_uri, "sizes", out_dir=out, log=False)  # plots again: they are still the report's own
    assert {n for n in snapshot(out) if n.endswith(".png")} == set(plots)


@pytest.mark.parametrize("out", ["s3://bucket/reports", "s3:/bucket/reports", "s3a://bucket/r"])
def test_an_out_that_is_or_looks_like_a_uri_is_refused_before_anything(out, tracking_uri, tmp_path, capsys, monkeypatch):
    fill_sizes(tracking_uri)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["report", "sizes", "--tracking-uri", tracking_uri, "--out", out, "--no-log", "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines()[-1].startswith(f"gatesweep: error: --out {out}") and "Traceback" not in err, err
    before = {"mlartifacts", "mlflow.db", "mlflow.db.lock"}
    assert {p.name for p in tmp_path.iterdir()} <= before, "no local folder named like the URI, no reports/"
