"""Seed statistics on hand-made runs (no store): a 2 gates x 2 learning rates x 3 seeds design
with a failed, a running and a superseded run; Optuna axes recovered from params."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from dashboards import html, tables
from dashboards.metrics import axis_text, decimals, fmt
from dashboards.seedstats import describe
from dashboards.stats import compare
from dashboards.store import RunRecord
from tests.support.records import run, sweep_of


def ppl(gate: str, lr: str, seed: int) -> float:
    return 20.0 + (-1.5 if gate != "none" else 0.0) + (0.7 if lr == "0.01" else 0.0) + 0.11 * seed + 0.05 * (seed * seed % 3)


def design() -> list[RunRecord]:
    runs, i = [], 0
    for gate in ("none", "G1-elementwise"):
        for lr in ("0.003", "0.01"):
            for seed in (0, 1, 2):
                i += 1
                m = {
                    "val_ppl": ppl(gate, lr, seed),
                    "first_token_attn": 0.4 if gate == "none" else 0.05 + 0.01 * seed,
                    "tokens_per_s": 1000.0 + seed,
                }
                if gate != "none":
                    m["gate_score_mean"] = 0.2
                runs.append(run(i, gate, lr, seed, metrics=m))
    # seed 2 of (none, 0.01) failed first and was rerun: the finished rerun counts
    runs.append(run(90, "none", "0.01", 2, status="FAILED", tags={"gatesweep.failure_reason": "loss is nan"}, start=1))
    # a third learning rate: one seed failed, one still running
    runs.append(run(91, "none", "1.0", 0, status="FAILED", tags={"gatesweep.failure_reason": "loss is nan at step 3"}))
    runs.append(run(92, "none", "1.0", 1, status="RUNNING"))
    return runs


def test_grouping_statistics_deltas_and_states():
    comp = compare(sweep_of(design()))
    assert comp.axes == ["model.gate", "train.lr"] and comp.seed_axes == ["train.seed"]
    assert [(r.axes["model.gate"], r.axes["train.lr"]) for r in comp.rows] == [
        ("none", "0.003"),
        ("none", "0.01"),
        ("none", "1.0"),
        ("G1-elementwise", "0.003"),
        ("G1-elementwise", "0.01"),
    ]
    g1 = comp.rows[4]
    values = [ppl("G1-elementwise", "0.01", s) for s in (0, 1, 2)]
    st = g1.stats["val_ppl"]
    assert st.n == 3 and st.mean == pytest.approx(np.mean(values)) and st.std == pytest.approx(np.std(values, ddof=1))
    assert st.ci95 == pytest.approx(sps.t.ppf(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3))
    base = [ppl("none", "0.01", s) for s in (0, 1, 2)]
    d = g1.deltas["val_ppl"]
    assert g1.baseline is comp.rows[1] and d.diff == pytest.approx(np.mean(values) - np.mean(base)) == pytest.approx(-1.5)
    assert d.n_pairs == 3
    assert d.p is None  # the differences are exactly -1.5 for every seed: no variation, no test
    fa = g1.deltas["first_token_attn"]
    res = sps.ttest_rel([0.05, 0.06, 0.07], [0.4, 0.4, 0.4])
    assert fa.p == pytest.approx(res.pvalue) and fa.rel == pytest.approx(100 * (0.06 - 0.4) / 0.4)
    # best only where significant after Holm: first-token attention is; the val_ppl Δ is the same
    # on every seed, so it has no variance and no test, and its best mean gets no mark
    assert comp.rows[3].best == {"first_token_attn"} and fa.significant and not any("val_ppl" in r.best for r in comp.rows)
    assert not any("gate_score_mean" in r.best for r in comp.rows)  # no better side
    assert comp.rows[2].n == 0 and comp.rows[2].status == "1 failed, 1 running"
    assert [r.run_id for r in comp.superseded] == ["r090"]
    assert sorted(r.run_id for r in comp.unfinished) == ["r091", "r092"]
    assert comp.rows[1].n == 3 and comp.rows[1].status == "ok"
    # main effects: the gate averaged over learning rates (rows without finished seeds skipped)
    eff = {e.level: e for e in comp.effects["model.gate"]}
    assert eff["none"].configs == 2
    assert eff["none"].means["val_ppl"] == pytest.approx(np.mean([comp.rows[0].stats["val_ppl"].mean, comp.rows[1].stats["val_ppl"].mean]))
    text = tables.terminal(comp, width=100)
    assert max(map(len, text.splitlines())) <= 100 and "1 failed, 1 running" in text


def test_describe_edge_cases():
    assert describe({}).mean is None
    one = describe({(0,): 2.5})
    assert (one.n, one.mean, one.std, one.ci95) == (1, 2.5, None, None)
    nan = describe({(0,): float("nan"), (1,): 1.0, (2,): 3.0})
    assert nan.n == 2 and nan.mean == 2.0


def test_optuna_axes_fall_back_to_params():
    runs = []
    for i, lr in enumerate(("0.0011", "0.0042", "0.0093")):
        r = run(i + 1, "G1-elementwise", lr, 0, metrics={"val_ppl": 10.0 + i})
        for k in ("gatesweep.axis.train.lr", "gatesweep.axis.train.seed"):
            r.tags.pop(k)
        r.params = {"train.lr": lr, "train.seed": "0", "model.num_params": "7"}
        runs.append(r)
    s = sweep_of(runs, axes="-", search="optuna")
    assert s.axes == ["train.lr"]
    comp = compare(s)
    assert [r.axes["train.lr"] for r in comp.rows] == ["0.0011", "0.0042", "0.0093"] and all(r.n == 1 for r in comp.rows)


def test_optuna_axes_come_from_the_parent_s_space_param():
    runs = []
    for i, (lr, wd) in enumerate((("0.0011", "0.1"), ("0.0042", "0.1"), ("0.0093", "0.2"))):
        r = run(i + 1, "G1-elementwise", lr, 0, metrics={"val_ppl": 10.0 + i})
        for k in ("gatesweep.axis.train.lr", "gatesweep.axis.train.seed"):
            r.tags.pop(k)
        r.params = {"train.lr": lr, "train.weight_decay": wd, "train.seed": "0"}
        runs.append(r)
    s = sweep_of(runs, axes="-", search="optuna", space="train.lr")
    assert s.axes == ["train.lr"]  # weight_decay differs too, but the sweep did not sample it
    assert sweep_of(runs, axes="-", search="optuna").axes == ["train.lr", "train.weight_decay"]  # older sweeps: from params


def test_number_formatting():
    assert fmt(None) == "–" and fmt(float("nan")) == "–"
    assert fmt(22.4539) == "22.45" and fmt(0.08793) == "0.088" and fmt(16624.3) == "16,624" and fmt(0.000123) == "0.000123"
    assert decimals(5.761) == 3 and axis_text("10000000000.0") == "1e+10" and axis_text("1.0") == "1"
    assert axis_text("G1-elementwise") == "G1-elementwise"


def test_degenerate_sweeps_render_in_every_format():
    """No runs at all, and a single run with no varying axis."""
    from dashboards import html

    single = run(1, "G1-elementwise", "0.003", 0, metrics={"val_ppl": 12.0, "gate_score_mean": 0.3})
    for runs in ([], [single]):
        comp = compare(sweep_of(runs))
        assert comp.axes == [] and len(comp.rows) == len(runs) and not comp.effects and not comp.has_baseline
        for render in (tables.terminal, tables.markdown, tables.csv_text, tables.latex, html.render):
            assert render(comp)
    assert "12.00" in tables.terminal(comp) and comp.rows[0].label() == "all runs"


def test_a_chosen_baseline_value_and_attention_kinds_get_deltas():
    """`--baseline train.lr=0.01`: the lr axis joins the architecture axes, so every other row,
    the baseline gate at lr 0.003 too, is compared with the (none, 0.01) row; an attention kind
    departs from the baseline as a gate does."""
    comp = compare(sweep_of(design()), baseline={"train.lr": "0.01"})
    base = next(r for r in comp.rows if r.is_baseline)
    assert base.axes == {"model.gate": "none", "train.lr": "0.01"}
    others = [r for r in comp.rows if r.baseline is not None]
    assert {(r.axes["model.gate"], r.axes["train.lr"]) for r in others} == {
        ("none", "0.003"),
        ("none", "1.0"),
        ("G1-elementwise", "0.003"),
        ("G1-elementwise", "0.01"),
    }
    g1 = next(r for r in others if r.axes == {"model.gate": "G1-elementwise", "train.lr": "0.003"})
    want = [ppl("G1-elementwise", "0.003", s) - ppl("none", "0.01", s) for s in (0, 1, 2)]
    assert g1.deltas["val_ppl"].diff == pytest.approx(np.mean(want))
    assert "train.lr=0.01" in comp.baseline_text
    md = tables.markdown(comp)
    assert "Δ against the baseline (no gate, softmax attention, train.lr=0.01" in md
    for bad, says in (
        ({"train.seed": "0"}, "train.seed is not an axis this sweep varies; the axes and their values: model.gate: none, G1-elementwise; "),
        ({"train.lr": "0.1"}, "no configuration has it; the axes and their values: .*train.lr: 0.003, 0.01, 1$"),
        ({"model.ffn_dim": "395"}, "model.ffn_dim is not an axis this sweep varies; the axes and their values: model.gate: none"),
    ):
        with pytest.raises(ValueError, match=says):
            compare(sweep_of(design()), baseline=bad)
    assert compare(sweep_of(design()), baseline={"train.lr": "1.0e-2"}).baseline_text.endswith("train.lr=1.0e-2")  # numbers by value

    kinds = []
    for i, (kind, seed) in enumerate((k, s) for k in ("softmax", "softpick", "sigmoid") for s in (0, 1)):
        r = run(i + 1, "none", "0.01", seed, metrics={"val_ppl": 10.0 + i})
        r.tags["gatesweep.axis.model.attention.kind"] = kind
        kinds.append(r)
    comp = compare(sweep_of(kinds, axes="model.attention.kind,train.seed"))
    assert [r.axes["model.attention.kind"] for r in comp.rows] == ["softmax", "sigmoid", "softpick"], "the baseline's kind first"
    assert comp.rows[0].is_baseline and all(r.baseline is comp.rows[0] for r in comp.rows[1:])


def test_the_baseline_takes_the_sweep_files_key_of_the_gate_axis():
    """One spelling of an axis (issue 33): the file grids `model.gate.position`, the runs record the
    composed `model.gate`; `--baseline model.gate.position=G1` selects the G1 level, and a value
    no run has, or a field that selects several levels, is refused listing both spellings."""
    runs = []
    for i, (gate, pos, gran) in enumerate(
        (("none", "none", None), ("G1-elementwise", "G1", "elementwise"), ("G1-headwise", "G1", "headwise"))
    ):
        for seed in (0, 1):
            params = {"model.gate.position": pos, "train.seed": str(seed), **({"model.gate.granularity": gran} if gran else {})}
            r = run(10 * i + seed + 1, gate, "0.01", seed, metrics={"val_ppl": 10.0 + i + seed / 10}, params=params)
            runs.append(r)
    sweep = sweep_of(runs, axes="model.gate,train.seed")
    sweep.sweep_file = {"grid": {"model.gate.position": ["none", "G1"], "model.gate.granularity": ["elementwise", "headwise"]}}
    plain = compare(sweep)
    assert [r.is_baseline for r in plain.rows] == [True, False, False]
    comp = compare(sweep, baseline={"model.gate.position": "none"})
    assert [r.is_baseline for r in comp.rows] == [True, False, False] and comp.rows[1].deltas
    comp = compare(sweep, baseline={"model.gate.position": "G1", "model.gate.granularity": "headwise"})
    assert [r.axes["model.gate"] for r in comp.rows if r.is_baseline] == ["G1-headwise"]
    with pytest.raises(ValueError, match=r"2 configurations of model.gate have it \(G1-elementwise, G1-headwise\); name one"):
        compare(sweep, baseline={"model.gate.position": "G1"})
    with pytest.raises(
        ValueError,
        match=r"model.gate: none, G1-elementwise, G1-headwise \(model.gate.position: none, G1; model.gate.granularity: elementwise, headwise\)",
    ):
        compare(sweep, baseline={"model.gate.position": "G7"})


def test_an_attention_kind_s_own_settings_are_part_of_the_variant():
    """A zip of kind with `model.attention.sigmoid_bias` (sink_remedies_cpu.yaml: sigmoid at 0
    and at -log T): the biased sigmoid rows have no softmax row with their bias, yet they are
    compared with the softmax baseline of the same data, not left without a Δ; the data axis
    still has to match."""
    runs = []
    arms = (("softmax", "0"), ("sigmoid", "0"), ("sigmoid", "-4.1589"))
    for i, ((kind, bias), source, seed) in enumerate((a, d, s) for a in arms for d in ("bbc", "text") for s in (0, 1)):
        r = run(i + 1, "none", "0.01", seed, metrics={"val_ppl": 10.0 + i})
        r.tags.update(
            {
                "gatesweep.axis.model.attention.kind": kind,
                "gatesweep.axis.model.attention.sigmoid_bias": bias,
                "gatesweep.axis.data.source": source,
            }
        )
        runs.append(r)
    comp = compare(sweep_of(runs, axes="model.attention.kind,model.attention.sigmoid_bias,data.source,train.seed"))
    biased = [r for r in comp.rows if r.axes["model.attention.sigmoid_bias"] == "-4.1589"]
    assert len(biased) == 2
    for row in biased:
        assert row.baseline is not None and row.baseline.is_baseline
        assert row.baseline.axes["data.source"] == row.axes["data.source"]
        assert "val_ppl" in row.deltas
    assert sum(r.is_baseline for r in comp.rows) == 2 and sum(r.baseline is not None for r in comp.rows) == 4


def test_a_one_seed_report_says_in_one_sentence_that_there_are_no_tests():
    """Issue 35: one seed per configuration gives no test; the report says so once, with the
    seeds the tests need, instead of "Holm-adjusted over the 0 tests", "α/0" and tables of dashes."""
    runs = [
        run(i, gate, "0.01", 0, metrics={"val_ppl": 10.0 + i, "first_token_attn": 0.7 if gate == "none" else 0.05})
        for i, gate in enumerate(("none", "G1-elementwise", "G1-headwise"), 1)
    ]
    comp = compare(sweep_of(runs, axes="model.gate"))
    assert comp.n_tests == 0
    sentence = "No tests: one seed per configuration, and a paired t-test needs at least 2 seeds of both configurations"
    for name, text in (("terminal", tables.terminal(comp)), ("markdown", tables.markdown(comp)), ("html", html.render(comp))):
        text = " ".join(text.split())  # the terminal wraps its lines
        assert sentence in text and "--grid train.seed=0,1,2" in text, name
        for wrong in ("over the 0 tests", "α/0", "Seeds needed", "seeds for 80% power", "p=–", "p –"):
            assert wrong not in text, (name, wrong)
        assert "No intervals" in text, name
    assert "-0.650" in tables.terminal(comp)  # the single differences are still shown


def test_every_terminal_table_that_abbreviates_has_a_legend_under_it():
    comp = compare(sweep_of(design()))
    lines = tables.terminal(comp, width=400).splitlines()
    legend = "Columns: gate = model.gate; lr = train.lr; PPL = val_ppl; F-Attn = first_token_attn; gate-score = gate_score_mean (gate score); tok/s = tokens_per_s (throughput)."
    assert legend in lines
    headers = [i for i, line in enumerate(lines) if "F-Attn" in line and not line.startswith("Columns:")]
    assert len(headers) >= 4  # configurations, Δ, seeds needed, main effect of train.lr
    for i in headers:
        block = lines[i : lines.index("", i) if "" in lines[i:] else len(lines)]
        assert any(line.startswith("Columns:") and "F-Attn = first_token_attn" in line for line in block), lines[i]


def _tagged(runs: list[RunRecord], key_of) -> list[RunRecord]:
    for r in runs:
        key = key_of(r)
        if key is not None:
            desc = {"cpu": f"CPU {key}", "cpu_isa": "AVX2" if key == "b" else "AVX512", "threads": 1, "torch": "2.13.0"}
            r.tags.update({"gatesweep.numerics": json.dumps(desc), "gatesweep.numerics_key": key})
    return runs


def test_runs_from_two_numeric_environments_are_named_in_every_format():
    """Counted runs under two environments (the G1 arm trained elsewhere; the superseded and the
    unfinished runs under a third, which does not count): a note in every text format and the
    environments in the JSON."""
    from dashboards import html
    from dashboards.report_json import report_document

    runs = _tagged(design(), lambda r: "c" if r.run_id in ("r090", "r091", "r092") else "b" if r.name.startswith("G1") else "a")
    comp = compare(sweep_of(runs))
    assert [(e.key, len(e.runs)) for e in comp.environments] == [("a", 6), ("b", 6)]
    assert comp.environments[1].label == "CPU b, AVX2, 1 thread, torch 2.13.0"
    assert "The counted runs were trained under 2 numeric environments" in tables.terminal(comp, width=100)
    assert "CPU b, AVX2" in tables.terminal(comp, width=100)
    md = tables.markdown(comp)
    assert "## Numeric environments" in md and "| CPU a, AVX512, 1 thread, torch 2.13.0 | a " in md
    page = html.render(comp)
    assert 'id="table-numerics"' in page and "CPU b, AVX2" in page
    doc = report_document(comp)
    assert [e["key"] for e in doc["numerics"]] == ["a", "b"] and "2 numeric environments" in doc["numerics_note"]
    assert doc["numerics"][1]["runs"] == sorted(r.name for r in runs if r.name.startswith("G1"))


def test_one_numeric_environment_or_none_recorded_adds_no_note():
    from dashboards import html
    from dashboards.report_json import report_document

    for key_of in (lambda r: "a", lambda r: None, lambda r: "a" if r.run_id != "r001" else None):
        comp = compare(sweep_of(_tagged(design(), key_of)))
        assert len(comp.environments) <= 1
        assert "numerics" not in tables.terminal(comp) and "Numeric environments" not in tables.markdown(comp)
        assert "table-numerics" not in html.render(comp) and report_document(comp)["numerics_note"] is None


def test_a_run_resumed_under_another_environment_is_a_note_on_its_own():
    runs = _tagged(design(), lambda r: "a+b" if r.run_id == "r001" else "a")
    a, b = ({"cpu": c, "cpu_isa": "AVX2", "threads": 1, "torch": "2.13.0"} for c in "AB")
    runs[0].tags["gatesweep.numerics"] = json.dumps({"mixed": [a, b]})
    comp = compare(sweep_of(runs))
    assert [e.key for e in comp.environments] == ["a", "a+b"]
    assert (
        comp.environments[1].label
        == "resumed under another environment: A, AVX2, 1 thread, torch 2.13.0; then B, AVX2, 1 thread, torch 2.13.0"
    )
    only = compare(sweep_of([r for r in runs if r.run_id == "r001"]))
    assert "The counted runs were trained under 1 numeric environment " in tables.terminal(only, width=200)
