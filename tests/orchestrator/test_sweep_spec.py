"""Sweep files: strict validation (a corpus of malformed files), expansion, plan, schema."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from orchestrator.spec.expand import expand
from orchestrator.spec.sweep import SweepSpec, load_sweep
from tests.support.cli import gatesweep, run_cli

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BAD = sorted((HERE / "bad_sweeps").glob("*.yaml"))
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))

EXPECTED = {  # file -> text the error must contain (the field and what is allowed)
    "01_no_name": "name",
    "02_bad_name": "name: got 'has space'; allowed",
    "03_unknown_top_key": "grids: unknown key (did you mean 'grid'?)",
    "04_grid_not_mapping": "grid: got",
    "05_grid_values_not_list": "grid.model.gate.position: got 'G1'; expected a list",
    "06_empty_grid_axis": "grid.model.gate.position: is empty",
    "07_bad_axis_path": "grid.model.gate.positon: unknown field 'positon' in model.gate (did you mean 'position'?)",
    "08_axis_outside_sections": "grid.optimizer.lr: must be a dotted path into one of model, data, train",
    "09_bad_gate_value": "model.gate.position: got 'G6'; allowed: none, G1, G2, G3, G4, G5",
    "10_impossible_combo": "model.gate.granularity: G5 gates the n x d_model dense output",
    "11_zip_unequal": "zip[0]: lists of a zip group must have one length",
    "12_zip_axis_also_grid": "zip[0].train.lr: is already an axis",
    "13_exclude_non_axis": "exclude[0].train.seed: is not an axis",
    "14_wrong_type_base": "train.steps: got 'ten'; expected an integer",
    "15_unknown_base_key": "trainer",
    "16_optuna_without_space": "search.space: an optuna search needs at least one dimension",
    "17_optuna_bad_distribution": "search.space.train.lr: got",
    "18_optuna_low_above_high": "low must be below high",
    "19_search_axis_in_grid": "search.space.train.lr: is also a grid/zip axis",
    "20_bad_scheduler": "scheduler.type: got 'hyperband'; allowed: asha, fifo",
    "21_negative_resources": "resources.workers_per_trial: got 0",
    "22_bad_retries": "retries: got -2",
    "23_python_tag": "not allowed",
    "24_duplicate_key": "duplicate key 'name'",
    "25_not_yaml": "invalid YAML",
    "26_scalar_file": "expected a mapping at the top level",
    "27_bad_preset": "model.size: got 'gigantic'; allowed: custom, bigram-1l",
    "28_space_in_grid_sweep": "search.space: is only used by search type 'optuna'",
    "29_tracking_in_base": "base.tracking: set tracking at the top level",
    "30_every_cell_excluded": "no trials left",
    "31_bad_tokenizer_in_grid": "data.tokenizer: got 'wordpiece'",
    "32_path_into_value": "model.size is a value, not a section",
    "33_empty": "the file is empty",
    "34_mla_rank_wider_than_model": "model.attention.mla_kv_rank: got 128: a latent wider than d_model compresses nothing; allowed: <= 64",
    "35_bad_gate_activation": "model.gate.activation: got '3sigmoid'; allowed: sigmoid, silu, ns_sigmoid, softplus, 2sigmoid",
}


def test_corpus_is_complete():
    assert len(BAD) >= 30
    assert {p.stem for p in BAD} == set(EXPECTED)


def test_validate_rejects_every_malformed_file_with_the_field_and_no_traceback(tmp_path, monkeypatch, capsys):
    """One command validates the whole corpus (each file reported on its own); in-process, in the
    test's folder (where a store or runs folder would be written)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "validate", *BAD)
    assert code == 2
    assert "Traceback" not in err
    blocks = {}
    for path in BAD:
        start = err.find(str(path))
        assert start >= 0, f"{path.name} not reported"
        end = min([i for i in (err.find("gatesweep: error:", start + 1),) if i > 0] or [len(err)])
        blocks[path.stem] = err[start:end]
    for stem, text in EXPECTED.items():
        assert text in blocks[stem], f"{stem}: expected {text!r} in:\n{blocks[stem]}"
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


def test_all_problems_of_a_file_are_reported_at_once(tmp_path, capsys):
    f = tmp_path / "many.yaml"
    f.write_text(
        "name: x\nbase: {model: {size: tiny, gate: {position: G9}}, train: {steps: -1, lr: fast}}\n"
        "grid: {model.gate.positon: [G1]}\nretries: -1\nresources: {cpus_per_worker: 0}\n"
    )
    code, _, err = run_cli(capsys, "validate", f)
    assert code == 2
    for text in ("grid.model.gate.positon", "retries: got -1", "resources.cpus_per_worker: got 0"):
        assert text in err


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_sweep_loads_expands_and_matches_the_schema(path):
    import jsonschema

    from orchestrator.cli.common import load_yaml
    from orchestrator.spec.schema import sweep_schema

    spec = load_sweep(path)
    e = expand(spec)
    assert e.trials and len({t.name for t in e.trials}) == len(e.trials)
    jsonschema.validate(load_yaml(path), sweep_schema())


def spec(**kw) -> SweepSpec:
    base = {"model": {"size": "tiny"}, "data": {"source": "bigram-backcopy"}}
    return SweepSpec.from_dict({"name": "t", "base": base, **kw})


def test_expansion_normalises_and_drops_duplicates():
    s = spec(
        grid={
            "model.gate.position": ["none", "G1"],
            "model.gate.granularity": ["elementwise", "headwise"],
            "model.gate.mode": ["multiplicative", "additive"],
        }
    )
    e = expand(s)
    # none x (2 x 2) collapse to one; G1 x 2 granularities x 2 modes stay (additive gets silu)
    assert e.cells == 8 and e.duplicates == 3 and len(e.trials) == 5
    labels = sorted(t.config.model.gate.label for t in e.trials)
    assert labels == ["G1-elementwise", "G1-elementwise-additive", "G1-headwise", "G1-headwise-additive", "none"]
    assert e.varying == ["model.gate"]


def test_zip_exclude_names_and_hashes():
    s = spec(
        grid={"train.seed": [0, 1]},
        zip=[{"model.gate.position": ["none", "G1"], "train.lr": [0.003, 0.01]}],
        exclude=[{"model.gate.position": "none", "train.seed": 1}],
    )
    e = expand(s)
    assert (e.cells, e.excluded, len(e.trials)) == (4, 1, 3)
    names = sorted(t.name for t in e.trials)
    # a zipped axis names only departures from its most common value; the gate is always named
    assert names == ["G1-elementwise-s0", "G1-elementwise-s1", "none-s0-lr=0.003"]
    assert len({t.config_hash for t in e.trials}) == 3
    g1 = next(t for t in e.trials if t.name.startswith("G1") and t.config.train.seed == 0)
    assert g1.config.train.lr == 0.01 and g1.axes == {"model.gate": "G1-elementwise", "train.seed": 0, "train.lr": 0.01}


def test_config_hash_ignores_tracking_and_is_stable():
    a = expand(spec(tracking={"experiment": "a"})).trials[0]
    b = expand(spec(tracking={"experiment": "b"})).trials[0]
    assert a.config_hash == b.config_hash


def test_attention_fields_that_do_not_apply_do_not_split_a_trial():
    """`sink_init` means nothing to softmax: a grid over it with kind softmax is one trial; with
    kind learned_sink it is two."""
    for kind, trials in (("softmax", 1), ("learned_sink", 2), ("sigmoid", 1)):
        e = expand(spec(base={"model": {"attention": {"kind": kind}}}, grid={"model.attention.sink_init": [0.0, 2.0]}))
        assert len(e.trials) == trials, kind
        assert len({t.config_hash for t in e.trials}) == trials, kind


def test_plan_of_a_10000_trial_grid_scales_linearly():
    """A blow-up guard that a loaded machine cannot fail: the CPU time of this process (not the
    wall clock) to expand 10,000 trials against 1,000 of the same grid shape; linear is 10x. The
    seeds of each grid are its own (no cache of one helps the other), and the collector is off
    while timing (in a long test session its full collections scan every object the session
    holds, which made a first version of this check read 48x). The benchmark
    (benchmarks/plan_scale.py) reports the real figures."""
    import gc

    def cpu_seconds(seeds: int, first: int) -> float:
        grid = {"model.gate.position": ["none", "G1", "G2", "G3", "G4"], "train.lr": [i * 1e-4 for i in range(1, 51)]}
        s = spec(grid={**grid, "train.seed": list(range(first, first + seeds))})
        gc.collect()
        gc.disable()
        try:
            t0 = time.process_time()
            e = expand(s)
            took = time.process_time() - t0
        finally:
            gc.enable()
        assert len(e.trials) == 250 * seeds
        return took

    cpu_seconds(4, 9000)  # imports warm
    small = min(cpu_seconds(4, 1000 + 10 * k) for k in range(3))
    large = cpu_seconds(40, 2000)
    assert large < 25 * max(small, 1e-3), (small, large)


@pytest.mark.slow
def test_plan_command_prints_the_table_and_counts(tmp_path):
    out = gatesweep("plan", str(ROOT / "sweeps" / "quickstart.yaml"), cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "G1-elementwise-s0" in out.stdout and "30 cells, 5 excluded, 5 duplicates dropped -> 20 trials" in out.stdout
    assert "0 already finished" in out.stdout and "FLOPs" in out.stdout
    assert not (tmp_path / "mlflow.db").exists(), "plan must not create a store"


def test_schema_command_is_valid_json_schema(capsys):
    import jsonschema

    code, out, _ = run_cli(capsys, "schema")
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "model" in schema["properties"]["base"]["properties"]
    assert "SDPA output" in json.dumps(schema)


@pytest.mark.parametrize("position", ["none", "G1"])
def test_reported_metrics_are_what_an_evaluation_reports(position):
    """The metric lists a scheduler and a search are checked against (orchestrator.spec.reported) are
    exactly what `evaluate` returns, for an ungated and a gated model on bigram-backcopy."""
    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.data import build_trial_data
    from orchestrator.evals.heldout import evaluate
    from orchestrator.spec.data import DataConfig
    from orchestrator.spec.evaluation import EvalConfig
    from orchestrator.spec.reported import BIGRAM_METRICS, GATE_METRICS, REPORTED_METRICS

    data = build_trial_data(
        DataConfig(source="bigram-backcopy", seq_len=16, bigram={"table": "dirichlet", "vocab_size": 8, "n_triggers": 1}), 0
    )
    model = GatedTransformer(ModelConfig.preset("tiny", vocab_size=data.vocab_size, gate={"position": position}))
    metrics = evaluate(model, data, data.val_batches(1, 4), EvalConfig(batches=1, batch_size=4, probe_sequences=4)).metrics
    reported = {k for k in metrics if "/layer_" not in k}  # per-layer values are not reported to Tune
    expected = set(REPORTED_METRICS) | set(BIGRAM_METRICS) | (set(GATE_METRICS) if position != "none" else set())
    assert reported == expected


def test_smoke_settings_win_over_the_sweeps_axes():
    """A zip or grid over train.steps must not make a smoke run train for the full length (the
    sink-remedies sweep zips steps with its data setting; its smoke cells trained 1,000 steps)."""
    from orchestrator.spec.sweep import apply_smoke

    s = spec(
        grid={"train.steps": [300, 600], "train.seed": [0, 1]},
        zip=[{"data.seq_len": [32, 64], "train.eval_every": [100, 200]}],
        exclude=[{"train.steps": 600, "train.seed": 1}],
    )
    real = expand(s)
    assert sorted({t.config.train.steps for t in real.trials}) == [300, 600] and len(real.trials) == 6
    smoke = expand(apply_smoke(s))
    assert {t.config.train.steps for t in smoke.trials} == {4} and {t.config.train.eval_every for t in smoke.trials} == {0}
    assert {t.config.data.seq_len for t in smoke.trials} == {32, 64}, "other zipped axes keep their values"
    # steps 300 and 600 collapse into one cell; the exclusion of (steps, seed 1) now names steps 4
    assert len(smoke.trials) == 2 and {t.config.train.seed for t in smoke.trials} == {0}


def test_base_grid_zip_and_search_problems_are_reported_in_one_round(tmp_path):
    """A wrong base no longer hides the wrong values of the axes (and a wrong dimension of the
    search space the other dimensions' values) until a second round."""
    from gatedmodels.typedconfig import ConfigError

    f = tmp_path / "many.yaml"
    f.write_text(
        "name: x\n"
        "base: {model: {size: tiny}, data: {source: shakspeare}, train: {steps: -5}}\n"
        "grid: {model.gate.position: [none, G1, G7], model.size: [tiny, medium]}\n"
        "zip: [{train.lr: [0.001, -1.0], train.seed: [0, 1]}]\n"
        "search: {type: optuna, num_samples: 2, space: {train.weight_decay: {loguniform: [-1.0, 0.1]},"
        " model.gate.granularity: {choice: [elementwise, pixelwise]}}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_sweep(f)
    text = caught.value.render()
    for expected in (
        "base.data.source: got ",
        "no such file or folder (did you mean 'shakespeare'?)",
        "base.train.steps: got -5",
        "model.gate.position: got 'G7'",
        "model.size: got 'medium'",
        "train.lr: got -1.0; allowed: > 0 (in cell {",
        "search.space.train.weight_decay.loguniform: got [-1.0, 0.1]; loguniform needs low > 0",
        "search.space.model.gate.granularity: choice value 'pixelwise' is not valid",
    ):
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert len(caught.value.issues) == 7  # each problem once, not once per cell


def test_a_value_of_the_base_s_bad_value_set_by_an_axis_is_still_reported():
    """A base problem at a path an axis sets is left to the cells, so it is not subtracted from
    what the cells report."""
    from gatedmodels.typedconfig import ConfigError

    with pytest.raises(ConfigError) as caught:
        SweepSpec.from_dict({"name": "t", "base": {"model": {"size": "gigantic"}}, "grid": {"model.size": ["tiny", "gigantic"]}})
    assert [str(i).split(" (in cell")[0] for i in caught.value.issues] == [
        "model.size: got 'gigantic'; allowed: custom, bigram-1l, bigram-2l, tiny, small, 125m, dense-0.5b, dense-1.7b, "
        "dense-1.7b-48l, moe-15a2b"
    ]


def test_misspelt_presets_and_corpora_get_a_did_you_mean():
    from gatedmodels.typedconfig import ConfigError
    from orchestrator.spec.trial import TrialConfig

    with pytest.raises(ConfigError, match=r"model.size: got 'smal' \(did you mean 'small'\?\)"):
        TrialConfig.from_dict({"model": {"size": "smal"}})
    with pytest.raises(ConfigError, match=r"data.source: got 'shakspeare': no such file or folder \(did you mean 'shakespeare'\?\)"):
        TrialConfig.from_dict({"data": {"source": "shakspeare"}})
    with pytest.raises(ConfigError, match=r"got 'bigram-backcopi': no such file or folder \(did you mean 'bigram-backcopy'\?\)"):
        TrialConfig.from_dict({"data": {"source": "bigram-backcopi"}})


def test_max_concurrent_0_means_the_same_on_the_command_line_and_in_the_file():
    """0 is "as many as the cluster fits" in `resources.max_concurrent` and in --max-concurrent;
    the flag, when given, wins over the file (its 0 too); the flag's range is the field's."""
    from orchestrator.cli.run import check_max_concurrent
    from orchestrator.core.errors import UserError
    from orchestrator.ray.cluster import trials_at_once
    from orchestrator.spec.search import ResourcesConfig

    cluster = {"CPU": 8.0}
    auto, three = ResourcesConfig(cpus_per_worker=2), ResourcesConfig(cpus_per_worker=2, max_concurrent=3)
    assert trials_at_once(None, auto, cluster) == 4 and trials_at_once(0, auto, cluster) == 4
    assert trials_at_once(None, three, cluster) == 3 and trials_at_once(0, three, cluster) == 4 and trials_at_once(1, three, cluster) == 1
    assert trials_at_once(0, ResourcesConfig(cpus_per_worker=16), cluster) == 1
    gpu = ResourcesConfig(cpus_per_worker=1, gpus_per_worker=1)
    assert trials_at_once(0, gpu, {"CPU": 8.0, "GPU": 2.0}) == 2
    check_max_concurrent(0)
    check_max_concurrent(10_000)
    for bad in (-1, 10_001):
        with pytest.raises(UserError, match=rf"--max-concurrent: got {bad}; allowed: 0..10,000 \(0: as many as the cluster fits\)"):
            check_max_concurrent(bad)


def test_launch_checks_are_reported_with_the_cells_problems():
    """The scheduler's settings against the valid trials' steps come in the same round as a
    wrong grid value."""
    from gatedmodels.typedconfig import ConfigError

    with pytest.raises(ConfigError) as caught:
        spec(
            grid={"model.gate.position": ["G1", "G7"]},
            base={"model": {"size": "tiny"}, "train": {"steps": 10, "eval_every": 5}},
            scheduler={"type": "asha", "grace_period": 50},
        )
    text = caught.value.render()
    assert "model.gate.position: got 'G7'" in text and "scheduler.grace_period: got 50; allowed: <= train.steps of every trial (10" in text
