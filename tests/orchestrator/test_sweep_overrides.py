"""Validation all at once across axes, did-you-mean on every field that takes names, and the
command line's `--set` / `--grid` overrides of a sweep file (issue 35, items 7 and 8): validated
like the file, shown by `plan` and `validate`, refused in one line when they cannot apply."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from gatedmodels.typedconfig import ConfigError
from orchestrator.cli.main import main
from orchestrator.spec.overrides import parse_overrides
from orchestrator.spec.sweep import SweepSpec
from tests.support.cli import gatesweep, run_cli

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
BASE = {
    "model": {"size": "bigram-1l"},
    "data": {"source": "bigram-backcopy", "seq_len": 64},
    "train": {"steps": 100, "eval_every": 50},
}


def issues(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as err:
        SweepSpec.from_dict(doc)
    return [str(i) for i in err.value.issues]


def test_a_misspelt_grid_path_does_not_hide_a_bad_value_on_another_axis():
    found = issues({"name": "x", "base": BASE, "grid": {"model.gate.postion": ["none", "G1"], "train.lr": [-1.0, 0.01]}})
    assert any("grid.model.gate.postion: unknown field 'postion'" in i for i in found), found
    assert any(i.startswith("train.lr: got -1.0; allowed: > 0") for i in found), found
    # a broken zip group does not hide the grid's values either, nor an exclusion naming it
    found = issues(
        {
            "name": "x",
            "base": BASE,
            "grid": {"model.attention.kind": ["softmax", "softpik"]},
            "zip": [{"train.lr": [0.01, 0.02], "train.warmup_steps": [1]}],
            "exclude": [{"train.lr": 0.02}],
        }
    )
    assert any("zip[0]: lists of a zip group must have one length" in i for i in found), found
    assert any("model.attention.kind: got 'softpik'" in i and "did you mean 'softpick'" in i for i in found), found


@pytest.mark.parametrize(
    ("where", "typo", "suggestion"),
    [
        ("scheduler.metric", "val_los", "val_loss"),
        ("search.metric", "first_token_atn", "first_token_attn"),
        ("scheduler.type", "ashaa", "asha"),
        ("search.sampler", "tpee", "tpe"),
        ("base.model.size", "bigram-1k", "bigram-1l"),
        ("base.model.gate.activation", "sigmod", "sigmoid"),
        ("base.data.source", "shakspeare", "shakespeare"),
        ("base.eval.tasks.names", ["hellaswg"], "hellaswag"),
        ("base.eval.ruler.tasks", ["niah_singel"], "niah_single"),
        ("grid.model.attention.kind", ["softpik"], "softpick"),
    ],
)
def test_every_field_that_takes_names_says_what_a_typo_is_close_to(where, typo, suggestion):
    doc: dict = {"name": "x", "base": copy.deepcopy(BASE), "grid": {"model.gate.position": ["none", "G1"]}}
    if where == "search.metric":
        doc["search"] = {"type": "optuna", "num_samples": 2, "metric": typo, "space": {"train.lr": {"loguniform": [1e-3, 1e-2]}}}
    elif where == "search.sampler":
        doc["search"] = {"type": "optuna", "num_samples": 2, "sampler": typo, "space": {"train.lr": {"loguniform": [1e-3, 1e-2]}}}
    elif where.startswith("scheduler."):
        doc["scheduler"] = {"type": "asha", "metric": "val_loss", where.split(".")[1]: typo}
    elif where.startswith("grid."):
        doc["grid"][where[5:]] = typo
    else:
        node = doc
        *parents, leaf = where.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = typo
    found = issues(doc)
    assert any(f"did you mean {suggestion!r}" in i for i in found), found


def test_eval_tasks_on_the_command_line_say_what_a_typo_is_close_to(tmp_path, capsys):
    assert main(["eval", str(tmp_path), "--tasks", "hellaswg"]) == 2
    assert "'hellaswg' (did you mean 'hellaswag'?)" in capsys.readouterr().err


def test_set_and_grid_parse_apply_and_pin():
    o = parse_overrides(["train.steps=200", "train.seed=0", "name=mine"], ["model.gate.position=none,G1", "train.lr=1e-3,0.01"])
    doc = o.apply(yaml.safe_load(QUICKSTART.read_text()), Path.cwd())
    assert doc["base"]["train"]["steps"] == 200 and doc["name"] == "mine"
    assert doc["grid"]["train.seed"] == [0]  # a gridded key is pinned to the one value
    assert doc["grid"]["model.gate.position"] == ["none", "G1"] and doc["grid"]["train.lr"] == ["1e-3", 0.01]
    assert doc["exclude"] == []  # the exclusion named G2, which is gone
    spec = SweepSpec.from_dict(doc)
    assert spec.name == "mine" and o.describe().startswith("--set train.steps=200 --set train.seed=0")


@pytest.mark.parametrize(
    ("sets", "grids", "says"),
    [
        (["train.steps"], [], "--set: got 'train.steps'; expected KEY=VALUE"),
        (["optimizer.lr=1"], [], "--set optimizer.lr: a dotted path into a trial section or a field of the sweep"),
        ([], ["train.seed"], "--grid: got 'train.seed'; expected KEY=V1,V2"),
        ([], ["nme=a,b"], "--grid nme: a dotted path into a trial section"),
        ([], ["traim.seed=0,1"], "(did you mean 'train'?)"),
    ],
)
def test_a_malformed_override_is_one_line_naming_the_flag(sets, grids, says):
    with pytest.raises(ConfigError) as err:
        parse_overrides(sets, grids)
    assert says in err.value.render()


def test_overrides_are_validated_like_the_file_and_shown_by_validate_and_plan(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = str(QUICKSTART)
    assert main(["validate", f, "--grid", "model.gate.position=none,G1", "--set", "train.seed=0", "--set", "train.steps=300"]) == 0
    out = capsys.readouterr().out
    assert "with --set train.seed=0 --set train.steps=300 --grid model.gate.position=none,G1: valid sweep 'quickstart': 3 trials" in out
    # a bad value, a bad key and a zipped key: one line each, exit 2, nothing written
    assert main(["validate", f, "--grid", "model.gate.position=none,G7"]) == 2
    err = capsys.readouterr().err
    assert "with --grid model.gate.position=none,G7" in err and "model.gate.position: got 'G7'" in err
    assert main(["validate", f, "--set", "train.stepz=3"]) == 2
    assert "base.train.stepz: unknown key (did you mean 'steps'?)" in capsys.readouterr().err
    zipped = tmp_path / "z.yaml"
    zipped.write_text(yaml.safe_dump({"name": "z", "base": BASE, "zip": [{"train.lr": [0.01, 0.02], "train.warmup_steps": [1, 2]}]}))
    assert main(["validate", str(zipped), "--grid", "train.lr=0.1,0.2"]) == 2
    assert "--grid train.lr: is in a zip group with train.warmup_steps" in capsys.readouterr().err
    assert (
        main(["plan", f, "--grid", "train.seed=0,1", "--set", "train.steps=300", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 0
    )
    out = capsys.readouterr().out
    assert "overrides: --set train.steps=300 --grid train.seed=0,1" in out and "-> 8 trials" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["z.yaml"]  # no store, no state written


def test_a_sweep_s_report_has_one_place_and_its_building_is_announced(tmp_path, capsys, monkeypatch):
    """Issue 35: `gatesweep report NAME` writes where the end of the sweep did (runs/sweeps/NAME/report)
    when the sweep ran from here, and the end of a sweep says it is building the report before
    the seconds it takes."""
    from types import SimpleNamespace

    from orchestrator.cli import report as report_cli
    from orchestrator.cli import run as run_cmd

    monkeypatch.chdir(tmp_path)
    assert report_cli.default_out("qs") is None  # not run from here: reports/qs (build_report's default)
    (tmp_path / "runs" / "sweeps" / "qs").mkdir(parents=True)
    (tmp_path / "runs" / "sweeps" / "qs" / "state.json").write_text("{}")
    assert report_cli.default_out("qs") == Path("runs") / "sweeps" / "qs" / "report"
    assert report_cli.default_out("../qs") is None

    said = []

    def publish(uri, name, parent, out):
        said.append(capsys.readouterr().out)  # what was printed before the report's seconds began
        return SimpleNamespace(report_dir=out, error="")

    monkeypatch.setattr(run_cmd, "publish", publish)
    outcome = SimpleNamespace(parent_run_id="p", parent_status="FINISHED", report_dir=None, report_error="")
    assert run_cmd.publish_report("qs", "sqlite:///x.db", outcome, tmp_path / "r")
    assert said and said[0].startswith("building the report of sweep qs")


@pytest.mark.slow
def test_overrides_are_kept_with_the_sweep_so_resume_and_report_see_the_same_sweep(tmp_path, shared_ray, capsys, monkeypatch):
    """A real launch with --set and --grid: the sweep's stored file (state folder and parent run) is
    the changed file, `resume NAME` continues that sweep (not the file on disk), and the results and
    the report read its axes in the overridden order. Both join the session's Ray (`shared_ray`)."""
    import dashboards

    src = tmp_path / "s.yaml"
    src.write_text(yaml.safe_dump({"name": "s", "base": {**BASE, "train": {"steps": 500, "eval_every": 0}}, "grid": {"train.seed": [0]}}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--tracking-uri", uri, "--runs-dir", str(tmp_path / "runs"), "--address", shared_ray]

    out = gatesweep(
        "run",
        src,
        "--set",
        "train.steps=3",
        "--set",
        "name=ov",
        "--grid",
        "model.gate.position=G1,none",
        *common,
        cwd=tmp_path,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "overrides: --set train.steps=3 --set name=ov --grid model.gate.position=G1,none" in out.stdout
    stored = tmp_path / "runs" / "sweeps" / "ov" / "sweep.yaml"
    doc = yaml.safe_load(stored.read_text())
    assert doc["name"] == "ov" and doc["base"]["train"]["steps"] == 3 and doc["grid"]["model.gate.position"] == ["G1", "none"]
    assert stored.read_text().startswith(f"# {src} with --set train.steps=3")
    df = dashboards.results("ov", uri)
    assert list(df["model.gate"].cat.categories) == ["G1-elementwise", "none"] and (df["config.train.steps"] == 3).all()
    src.write_text(src.read_text().replace("steps: 500", "steps: 400"))  # the file on disk moves on; the sweep does not
    out = gatesweep("resume", "ov", *common, cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 finished" in out.stdout or "nothing to run" in out.stdout, out.stdout
    assert len(dashboards.results("ov", uri)) == 2 and (dashboards.results("ov", uri)["config.train.steps"] == 3).all()
    monkeypatch.chdir(tmp_path)  # the report in this process (what the command does, not its process)
    code, report, err = run_cli(capsys, "report", "ov", "--tracking-uri", uri, "--no-log")
    assert code == 0 and report.index("G1-elementwise") < report.index("\nnone "), report + err
