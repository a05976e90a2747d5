"""What the MLflow UI is given (orchestrator.tracking.views, inputs; launch.outcome's summary
metrics), on a real SQLite store and without training: the experiment kind tag, the saved
view's state in the format MLflow 3.17's UI reads (plain and deflated), URLs, column and chart
choices from the metric registry, metric names MLflow accepts, dataset inputs, and
`gatesweep ui`'s view for a sweep launched before views existed (and on a store that refuses
the write)."""

from __future__ import annotations

import json
import math

import pytest
from mlflow.tracking import MlflowClient
from mlflow.utils.validation import _validate_metric_name

from dashboards.publish import config_key
from orchestrator.core import metrics as registry
from orchestrator.tracking import get_or_create_experiment, inputs, names, views


def test_experiments_are_model_training_and_a_users_kind_stays(tracking_uri):
    cl = MlflowClient(tracking_uri)
    exp_id = get_or_create_experiment(cl, "e", tracking_uri)
    assert cl.get_experiment(exp_id).tags[views.EXPERIMENT_KIND_TAG] == "custom_model_development"
    old = cl.create_experiment("old")  # made before gatesweep marked experiments
    assert views.EXPERIMENT_KIND_TAG not in cl.get_experiment(old).tags
    assert get_or_create_experiment(cl, "old", tracking_uri) == old
    assert cl.get_experiment(old).tags[views.EXPERIMENT_KIND_TAG] == views.TRAINING_KIND
    mine = cl.create_experiment("genai", tags={views.EXPERIMENT_KIND_TAG: "genai_development"})
    get_or_create_experiment(cl, "genai", tracking_uri)
    assert cl.get_experiment(mine).tags[views.EXPERIMENT_KIND_TAG] == "genai_development"


def test_urls_open_the_runs_table_in_training_mode():
    url = views.runs_url("http://127.0.0.1:5000/", "3", "quickstart")
    assert url == "http://127.0.0.1:5000/#/experiments/3/runs?viewStateShareKey=gatesweep-quickstart&workflowType=machine_learning"
    run = views.run_url("http://h:1", "3", "abc", "report/report.html")
    assert run == "http://h:1/#/experiments/3/runs/abc/artifacts/report/report.html?workflowType=machine_learning"
    note = views.parent_note("Sinks.", "3", "abc", "qs")
    assert note.startswith("**Comparison report**") and note.endswith("\n\nSinks.")
    assert "(#/experiments/3/runs/abc/artifacts/report/report.html?workflowType=machine_learning)" in note
    assert "viewStateShareKey=gatesweep-qs" in note and views.parent_note("", "3", "abc", "qs").startswith("**Comparison report**")


LOGGED = [
    "val_loss",
    "val_ppl",
    "val_bpb",
    "first_token_attn",
    "first_token_attn/layer_0",
    "sink_ratio",
    "max_activation",
    "gate_score_mean",
    "loss_spikes",
    "tokens_per_s",
    "ruler_avg/512",
    "ruler/niah_single/512",
    "train/loss",
    "train/lr",
    "bbc/copy_acc",
    "system/cpu_utilization_percentage",
    "eval_time_s/periodic",
]


def test_view_state_lists_a_sweep_flat_with_axes_and_headline_metrics():
    state = views.sweep_view_state(search_filter=views.member_filter("qs", "p1"), axes=["model.gate", "train.seed"], logged=LOGGED)
    assert state["searchFilter"] == "tags.`gatesweep.in.qs` = 'p1'"
    assert state["orderByKey"] == "tags.`mlflow.runName`"  # not start time: MLflow lists the runs flat
    cols = state["selectedColumns"]
    assert cols[:2] == ["tags.`gatesweep.gate`", "params.`train.seed`"] and cols == state["columnOrder"]
    metric_cols = [c for c in cols if c.startswith("metrics.")]
    headline = [m for m in registry.names("headline") if m in LOGGED]
    assert metric_cols[: len(headline)] == [f"metrics.`{m}`" for m in headline]  # the registry's order
    assert "metrics.`ruler_avg/512`" in metric_cols and "metrics.`val_bpb`" in metric_cols
    assert all(f"metrics.`{m}`" in metric_cols for m in registry.names("final") if m in LOGGED)
    assert "metrics.`train/loss`" not in metric_cols and "metrics.`ruler/niah_single/512`" not in metric_cols
    assert state["runsHiddenMode"] == "SHOW_ALL" and state["isAccordionReordered"] is True
    sections = [s["name"] for s in state["compareRunSections"]]
    assert sections[0] == views.HEADLINE_SECTION and sections[1] == "Model metrics" and sections[2] == "train"
    assert sections[-1] == "System metrics" and "first_token_attn" in sections and "ruler/niah_single" in sections
    by_section = {s["uuid"]: s["name"] for s in state["compareRunSections"]}
    charts = state["compareRunCharts"]
    bars = [c["metricKey"] for c in charts if by_section[c["metricSectionId"]] == views.HEADLINE_SECTION]
    assert bars == [c.split("`")[1] for c in metric_cols] and all(c["type"] == "BAR" and not c["isGenerated"] for c in charts[: len(bars)])
    rest = charts[len(bars) :]
    assert sorted(c["metricKey"] for c in rest) == sorted(LOGGED)  # every metric once more, in MLflow's own section
    for c in rest:
        assert by_section[c["metricSectionId"]] == views.section_of(c["metricKey"])
        m = registry.lookup(c["metricKey"])
        assert c["type"] == ("BAR" if m is not None and m.when == "end" else "LINE")
    system = next(c for c in rest if c["metricKey"].startswith("system/"))
    assert system["xAxisKey"] == "time" and system["useGlobalXaxisKey"] is False
    assert len({c["uuid"] for c in charts}) == len(charts)
    plain = views.sweep_view_state(search_filter="x", axes=[])
    assert "compareRunCharts" not in plain and plain["selectedColumns"][-1] == "attributes.`Dataset`"


def test_view_tag_round_trips_plain_and_deflated():
    state = views.sweep_view_state(search_filter="x", axes=["model.gate"], logged=LOGGED)
    value = views.encode_view("sweep qs", state, now_ms=5)
    env = json.loads(value)
    assert set(env) == {"name", "createdAt", "updatedAt", "state"} and env["name"] == "sweep qs" and env["createdAt"] == 5
    assert isinstance(env["state"], str) and not env["state"].startswith("deflate;")
    assert views.decode_view(value) == ("sweep qs", state)
    big = views.sweep_view_state(search_filter="x", axes=[], logged=LOGGED + [f"mmlu/subject_{i:03d}" for i in range(400)])
    value = views.encode_view("sweep big", big)
    assert len(value) <= views.MAX_TAG_VALUE and json.loads(value)["state"].startswith("deflate;")
    assert views.decode_view(value) == ("sweep big", big)


def test_summary_metric_names_are_valid_mlflow_names():
    for label in ("G1-elementwise", "G1-elementwise, lr=0.003", "none, size=dense-1.7b, lr=1e-05", "all runs", "a/b: c", "..x"):
        key = f"first_token_attn/{config_key(label)}"
        _validate_metric_name(key)
        assert "/" not in config_key(label) and config_key(label)


def test_dataset_inputs_of_each_kind_of_source(tmp_path):
    kind, src = inputs.source_of("bigram-backcopy", settings={"vocab_size": 64})
    assert (kind, src) == ("code", {"generator": "bigram-backcopy", "settings": {"vocab_size": 64}})
    assert inputs.source_of("shakespeare", corpora=("shakespeare",)) == ("code", {"corpus": "shakespeare"})
    assert inputs.source_of("hf:roneneldan/TinyStories:v2", hf_split="validation") == (
        "hugging_face",
        {"path": "roneneldan/TinyStories", "config_name": "v2", "split": "validation"},
    )
    f = tmp_path / "corpus.txt"
    assert inputs.source_of(str(f)) == ("local", {"uri": f.resolve().as_uri()})
    ds = inputs.dataset_inputs(
        str(f), "abc", "local", {"uri": f.as_uri()}, {"training": {"train_tokens": 5}, "validation": {"val_tokens": 1}}
    )
    assert [d.dataset.name for d in ds] == ["corpus.txt", "corpus.txt (validation)"]
    assert [d.tags[0].value for d in ds] == ["training", "validation"] and json.loads(ds[0].dataset.profile) == {"train_tokens": 5}
    assert inputs.settings_digest({"a": 1, "b": 2}) == inputs.settings_digest({"b": 2, "a": 1})


def _old_sweep(cl, uri: str) -> tuple[str, str, list[str]]:
    """A parent and two children the way sweeps were written before views and member tags."""
    exp = cl.create_experiment("old-sweeps")
    parent = cl.create_run(exp, run_name="qs", tags={names.KIND_TAG: names.SWEEP_KIND, names.SWEEP_TAG: "qs"}).info.run_id
    cl.log_param(parent, names.SWEEP_AXES_PARAM, "model.gate,train.seed")
    kids = []
    for gate in ("none", "G1-elementwise"):
        rid = cl.create_run(exp, run_name=f"{gate}-s0", tags={names.PARENT_TAG: parent, names.SWEEP_TAG: "qs"}).info.run_id
        cl.log_metric(rid, "first_token_attn", 0.7 if gate == "none" else 0.05, step=10)
        cl.set_terminated(rid)
        kids.append(rid)
    cl.set_terminated(parent)
    return exp, parent, kids


def test_ui_adds_the_view_of_an_old_sweep_and_keeps_an_existing_one(tracking_uri, capsys):
    from dashboards.links import sweep_links

    cl = MlflowClient(tracking_uri)
    exp, parent, _ = _old_sweep(cl, tracking_uri)
    assert sweep_links(tracking_uri, "qs") == [("qs", exp, parent)]
    tags = cl.get_experiment(exp).tags
    assert tags[views.EXPERIMENT_KIND_TAG] == views.TRAINING_KIND
    name, state = views.decode_view(tags[views.view_tag("qs")])
    assert name == "sweep qs" and state["searchFilter"] == views.children_filter(parent)
    assert len(cl.search_runs([exp], state["searchFilter"])) == 2  # the filter MLflow will run finds both trials
    assert state["selectedColumns"][:3] == ["tags.`gatesweep.gate`", "params.`train.seed`", "metrics.`first_token_attn`"]
    cl.set_experiment_tag(exp, views.view_tag("qs"), views.encode_view("mine", {"searchFilter": "x"}))
    sweep_links(tracking_uri, "qs")
    assert views.decode_view(cl.get_experiment(exp).tags[views.view_tag("qs")])[0] == "mine"  # a user's edit stays
    assert "warning" not in capsys.readouterr().err


def test_ui_on_a_store_that_refuses_writes_still_gives_urls(tracking_uri, monkeypatch, capsys):
    from dashboards import links as ui

    cl = MlflowClient(tracking_uri)
    exp, parent, _ = _old_sweep(cl, tracking_uri)

    def refuse(self, *a, **k):
        raise PermissionError("read-only store")

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", refuse)
    assert ui.sweep_links(tracking_uri, "qs") == [("qs", exp, parent)]
    err = capsys.readouterr().err
    assert "could not write the saved view of sweep 'qs' (PermissionError)" in err and "Traceback" not in err


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9", "sqlite:////nonexistent-folder/x.db"])
def test_ui_on_an_unreachable_or_missing_store(uri, capsys):
    from orchestrator.cli.main import main

    rc = main(["ui", "--tracking-uri", uri, "--sweep", "qs", "--port", "5999"])
    out = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out.err and len(out.err.strip().splitlines()) == 1
    if uri.startswith("http"):  # a dead server is an error, as for every command (it used to exit 0)
        assert "cannot reach the MLflow tracking server at http://127.0.0.1:9" in out.err and "already an MLflow server" not in out.out


def _launch(tmp_path, uri: str, parent: str, kids: list[str], status: str = "finished"):
    from types import SimpleNamespace

    from orchestrator.launch.outcome import SweepOutcome, TrialRow

    runs = SimpleNamespace(
        spec=SimpleNamespace(name="qs"),
        uri=uri,
        dir=tmp_path / "sweep",
        view_axes=lambda: ["model.gate"],
        view_runs=lambda: 10,
        group="gatesweep.group.qs",
        group_of=lambda h: {"gatesweep.group.qs": h, names.RUN_COLOR_TAG: "#a6630c"},
        view_parallel=lambda logged: None,
    )
    rows = [TrialRow(f"t{i}", f"h{i}", rid, status=status, metrics={"first_token_attn": 0.5}) for i, rid in enumerate(kids)]
    return runs, SweepOutcome("qs", parent, rows, 1.0)


def test_the_end_of_a_sweep_never_fails_on_what_the_ui_is_given(tmp_path, tracking_uri, monkeypatch, capsys):
    from orchestrator.launch.outcome import refresh_view

    cl = MlflowClient(tracking_uri)
    exp, parent, kids = _old_sweep(cl, tracking_uri)
    runs, outcome = _launch(tmp_path, tracking_uri, parent, kids, status="failed")
    refresh_view(runs, outcome, cl)  # the view and member tags
    assert outcome.report_error == "" and outcome.report_dir is None
    assert views.view_tag("qs") in cl.get_experiment(exp).tags
    assert all(cl.get_run(k).data.tags[names.member_tag("qs")] == parent for k in kids)

    def refuse(self, *a, **k):
        raise PermissionError("read-only store")

    monkeypatch.setattr(MlflowClient, "set_experiment_tag", refuse)
    runs, outcome = _launch(tmp_path, tracking_uri, parent, kids)
    refresh_view(runs, outcome, cl)
    assert outcome.report_error.startswith("PermissionError: read-only store")
    assert "warning: sweep qs: PermissionError" in capsys.readouterr().err


def test_ui_colours_are_the_uis_own_and_every_group_of_a_sweep_gets_its_own():
    # what the issue saw after grouping by gatesweep.gate: G1-headwise and G2-elementwise both purple
    assert views.group_colour("gatesweep.gate", "G1-headwise") == views.group_colour("gatesweep.gate", "G2-elementwise") == "#8a63bf"
    assert len(views.PALETTE) == 29 and views.ui_colour("") == views.PALETTE[0]
    quickstart = ["none", "G1-elementwise", "G1-headwise", "G2-elementwise"]
    key = views.group_key("quickstart", quickstart)
    assert key.startswith("gatesweep.group.quickstart") and len({views.group_colour(key, g) for g in quickstart}) == 4
    for n in (7, 12, 16):
        labels = [f"G{i % 5 + 1}-elementwise, lr={1e-3 * (i + 1):g}" for i in range(n)]
        key = views.group_key("s", labels)
        assert len({views.group_colour(key, g) for g in labels}) == n, (n, key)
    # more groups than a search finds distinct colours for: the most it found, never fewer than any salt it tried
    many = [f"arm-{i}" for i in range(40)]
    best = len({views.group_colour(views.group_key("s", many), g) for g in many})
    assert best >= max(len({views.group_colour(names.group_tag("s", salt), g) for g in many}) for salt in range(200))
    assert views.group_key("s", ["a"]) == names.group_tag("s") == "gatesweep.group.s"  # no salt when none is needed


def test_group_labels_leave_the_seeds_out_and_name_the_other_axes():
    assert views.group_label({"model.gate": "G1-elementwise", "train.seed": 0}) == "G1-elementwise"
    assert views.group_label({"model.gate": "none", "train.lr": 0.003, "data.bigram.seed": 2}) == "none, lr=0.003"
    assert views.group_label({"train.lr": 1e-05}) == "1e-05" and views.group_label({"train.seed": 1}) == "all runs"
    tags = views.sampled_group("gatesweep.group.s", "G1-elementwise", {"train.lr": 0.0031234, "model.n_layers": 2})
    assert tags["gatesweep.group.s"] == "G1-elementwise, lr=0.00312, n_layers=2"
    assert tags[names.RUN_COLOR_TAG] == views.group_colour("gatesweep.group.s", "G1-elementwise, lr=0.00312, n_layers=2")


def test_view_groups_by_the_group_tag_drops_constant_metrics_and_draws_parallel_coordinates():
    values = {k: [0.5, 0.7] for k in LOGGED}
    values.update({"loss_spikes": [0.0, 0.0], "train/lr": [0.01, 0.01], "val_bpb": [2.5, math.nan]})
    state = views.sweep_view_state(
        search_filter="x",
        axes=["model.gate", "train.lr", "train.seed"],
        logged=LOGGED,
        group="gatesweep.group.qs",
        values=values,
        parallel=(["train.lr"], ["val_ppl", "first_token_attn"]),
    )
    assert state["groupBy"] == {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "gatesweep.group.qs"}]}
    assert state["useGroupedValuesInCharts"] is True and state["groupsExpanded"] == {}
    charted = [c.get("metricKey") for c in state["compareRunCharts"]]
    assert "loss_spikes" not in charted and "train/lr" not in charted  # the same final value in every trial
    assert "val_bpb" in charted and "train/loss" in charted  # a NaN is no proof of constancy
    assert "metrics.`loss_spikes`" in state["selectedColumns"]  # the table keeps its columns
    [par] = [c for c in state["compareRunCharts"] if c["type"] == "PARALLEL"]
    assert par["selectedParams"] == ["train.lr"] and par["selectedMetrics"] == ["val_ppl", "first_token_attn"]
    by_section = {s["uuid"]: s["name"] for s in state["compareRunSections"]}
    assert by_section[par["metricSectionId"]] == views.HEADLINE_SECTION
    value = views.encode_view("sweep qs", state)
    assert views.decode_view(value)[1] == state
    assert "groupBy" not in views.sweep_view_state(search_filter="x", axes=[])
    assert views.constant_metrics({"a": [1.0], "b": [0.0, 0.0], "c": [1.0, math.inf], "d": [0.0, 0.0, 1e-9]}) == {"b"}


def test_a_report_module_that_cannot_be_imported_is_a_warning_not_a_crash(monkeypatch, tmp_path, capsys):
    """Found running the CPU ladder: the package was upgraded under the running driver, and the
    import of the report at the sweep's end raised through `publish` (a traceback after 45
    finished trials). It is now the one-line reason `publish` promises."""
    import sys

    from dashboards.publish import publish

    monkeypatch.setitem(sys.modules, "dashboards.report", None)  # `import` raises ImportError
    done = publish(f"sqlite:///{tmp_path / 'm.db'}", "s", "0" * 32, tmp_path / "report")
    assert done.report_dir is None and done.error.startswith("ModuleNotFoundError: ")  # an ImportError
    assert "warning: sweep s: ModuleNotFoundError" in capsys.readouterr().err
