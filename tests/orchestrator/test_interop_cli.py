"""`gatesweep export`, `import` and `probe` end to end: a real trained trial (DeepSpeed, MLflow)
exported by run id and loaded by transformers, imported back and evaluated, probed with its
numbers checked against the trial's own evaluation code; and the hostile cases, each one line on
stderr and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers  # a test dependency (pyproject dev extras): these tests must not skip quietly
from mlflow.tracking import MlflowClient

from orchestrator.interop.locate import build_model, locate
from tests.support.cli import run_cli

WORDS = "the gate closes where the sink was and attention on the first token falls to the uniform level".split()


def text_file(path: Path, lines: int = 900) -> Path:
    """A small English-like corpus (deterministic); its held-out piece is its last ~16k characters."""
    import random

    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(lines)) + "\n")
    return path


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One real trial: G1 elementwise on a local text file, byte tokenizer, a few DeepSpeed steps."""
    from orchestrator.spec.trial import TrialConfig
    from orchestrator.trial.run import TrialContext, run_trial

    root = tmp_path_factory.mktemp("trained")
    corpus = text_file(root / "corpus.txt")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = TrialConfig.from_dict(
        {
            "model": {"size": "tiny", "gate": {"position": "G1"}, "n_layers": 2, "tie_embeddings": False},
            "data": {"source": str(corpus), "tokenizer": "byte", "seq_len": 64},
            "train": {"steps": 4, "batch_size": 4, "warmup_steps": 1, "eval_every": 4, "log_every": 2, "checkpoint_every": 0, "lr": 3e-3},
            "eval": {"batches": 1, "batch_size": 4, "probe_sequences": 4},
        }
    )
    result = run_trial(cfg, TrialContext(run_dir=root / "run", tracking_uri=uri, experiment="interop"))
    return {"root": root, "corpus": corpus, "uri": uri, "run_id": result.run_id, "run_dir": root / "run"}


@pytest.mark.slow
def test_export_a_trained_trial_by_run_id_then_transformers_loads_it(trained, tmp_path, capsys):
    out = tmp_path / "hf"
    code, stdout, err = run_cli(capsys, "export", trained["run_id"], "--out", out, "--tracking-uri", trained["uri"])
    assert code == 0, err
    assert "exported G1-elementwise" in stdout and "Qwen3NextForCausalLM (full attention, partial rotary 1.0)" in stdout
    assert f"export/hf/ in MLflow run {trained['run_id']}" in stdout and "read back" in stdout
    assert {p.name for p in out.iterdir()} == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    }
    client = MlflowClient(trained["uri"])
    logged = {a.path for a in client.list_artifacts(trained["run_id"], "export/hf")}
    assert {"export/hf/config.json", "export/hf/model.safetensors", "export/hf/tokenizer.json"} <= logged
    assert client.get_run(trained["run_id"]).data.tags["gatesweep.export.hf"] == str(out.resolve())
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "Qwen3NextForCausalLM"
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "the gate closes where the sink was"
    ids = tok(text, return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == [256, *text.encode()]  # the byte tokenizer, BOS first as in training
    ours = build_model(locate(str(trained["run_dir"])))
    with torch.no_grad():
        assert float((hf(ids).logits - ours(ids)).abs().max()) <= 1e-5
    # again into the same folder: refused unless --force
    code, _, err = run_cli(capsys, "export", trained["run_dir"], "--out", out, "--no-log")
    one_line_error(code, err, "is not empty", "--force")
    code, stdout, err = run_cli(capsys, "export", trained["run_dir"], "--out", out, "--no-log", "--force", "--format", "official")
    assert code == 0 and "modeling_qwen3.py" in stdout, err


def test_probe_a_trial_logs_a_run_and_matches_the_imported_copy(trained, tmp_path, capsys):
    probe_out = tmp_path / "probe"
    code, stdout, err = run_cli(
        capsys,
        "probe",
        trained["run_id"],
        "--data",
        trained["corpus"],
        "--sequences",
        4,
        "--seq-len",
        64,
        "--out",
        probe_out,
        "--log",
        "--tracking-uri",
        trained["uri"],
        "--experiment",
        "probes",
    )
    assert code == 0, err
    for needle in (
        "first-token attention",
        "sink ratio (Gu et al., eps 0.3",
        "massive activations: M-Act",
        "gate score mean",
        "layer  F-Attn",
    ):
        assert needle in stdout, needle
    report = json.loads((probe_out / "probe.json").read_text())
    assert len(report["first_token_attn_per_layer_head"]) == 2 and len(report["first_token_attn_per_layer_head"][0]) == 4
    assert {p.name for p in probe_out.iterdir()} == {"probe.json", "attention_map.png", "first_token_attn.png", "gate_hist.png"}
    client = MlflowClient(trained["uri"])
    runs = client.search_runs([client.get_experiment_by_name("probes").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["gatesweep.probe_of"] == trained["run_id"]
    assert runs[0].data.metrics["first_token_attn"] == pytest.approx(report["metrics"]["first_token_attn"])
    assert "gate_score_mean" in runs[0].data.metrics
    # export -> import -> probe: the same numbers (the same weights, the byte tokenizer as an HF file)
    run_cli(capsys, "export", trained["run_dir"], "--out", tmp_path / "hf", "--no-log")
    code, stdout, err = run_cli(capsys, "import", tmp_path / "hf", "--out", tmp_path / "imp", "--data", trained["corpus"], "--seq-len", 64)
    assert code == 0, err
    assert "G1-elementwise, 2 layers" in stdout and "every sequence starts with <bos> (id 256)" in stdout
    code, _, err = run_cli(
        capsys, "probe", tmp_path / "imp", "--data", trained["corpus"], "--sequences", 4, "--seq-len", 64, "--out", tmp_path / "p2"
    )
    assert code == 0, err
    again = json.loads((tmp_path / "p2" / "probe.json").read_text())
    for key in ("first_token_attn", "sink_ratio", "max_activation", "gate_score_mean", "val_loss"):
        assert again["metrics"][key] == pytest.approx(report["metrics"][key], rel=1e-5, abs=1e-7), key
    # gatesweep eval takes the imported folder as a trial
    code, stdout, err = run_cli(capsys, "eval", tmp_path / "imp", "--tasks", "ppl", "--ppl-sets", trained["corpus"], "--no-log")
    assert code == 0, err
    assert "ppl/corpus" in stdout and "bpb/corpus" in stdout


def test_probe_numbers_are_the_trial_evaluations(tmp_path):
    """run_probe reduces one probe pass with the functions heldout.evaluate uses: the same metrics."""
    from types import SimpleNamespace

    from gatedmodels import GatedTransformer, ModelConfig
    from orchestrator.evals.heldout import evaluate
    from orchestrator.interop.probe import run_probe
    from orchestrator.spec.evaluation import EvalConfig

    torch.manual_seed(0)
    model = GatedTransformer(ModelConfig.preset("tiny", gate={"position": "G1", "granularity": "headwise"}, init_std=0.3)).eval()
    seqs = torch.randint(0, 511, (6, 49))
    seqs[:, 0] = 511
    token_bytes = torch.ones(512, dtype=torch.long)
    data = SimpleNamespace(token_bytes=token_bytes, task_metrics=lambda logits, seq: {})
    theirs = evaluate(model, data, [seqs], EvalConfig(probe_sequences=6, batches=1, batch_size=6)).metrics
    ours = run_probe(model, seqs, token_bytes)
    for key in (
        "val_loss",
        "val_bpb",
        "first_token_attn",
        "sink_ratio",
        "max_activation",
        "max_activation/ratio",
        "gate_score_mean",
        "value_norm_bos_ratio",
    ):
        assert ours.metrics[key] == pytest.approx(theirs[key], rel=1e-6), key
    per_layer = [sum(h) / len(h) for h in ours.first_token_heads]
    assert per_layer == pytest.approx([theirs[f"first_token_attn/layer_{i}"] for i in range(2)], rel=1e-6)
    assert [sum(h) / len(h) for h in ours.sink_heads] == pytest.approx([theirs[f"sink_ratio/layer_{i}"] for i in range(2)])


def test_probe_an_hf_folder_directly(tmp_path, capsys):
    from tests.support.interop import hf_folder

    hf_folder(tmp_path / "next", "qwen3_next", torch.float32, tied=True)
    corpus = text_file(tmp_path / "c.txt")
    code, stdout, err = run_cli(
        capsys, "probe", tmp_path / "next", "--data", corpus, "--sequences", 3, "--seq-len", 32, "--out", tmp_path / "p"
    )
    assert code == 0, err
    assert "(qwen3_next: G1-elementwise, 2 layers x 4 heads)" in stdout and "first token <|endoftext|>" in stdout
    assert "gate score mean" in stdout


# ---- hostile cases: one line, exit 2 ---------------------------------------------------------------
def config_folder(path: Path, config: dict, weights: bytes | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if weights is not None:
        (path / "model.safetensors").write_bytes(weights)
    return path


QWEN3 = {
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 320,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "tie_word_embeddings": True,
}


@pytest.mark.parametrize(
    "config,needles",
    [
        (
            {**QWEN3, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
            ["model_type 'llama' (LlamaForCausalLM) is not supported"],
        ),
        ({**QWEN3, "model_type": "qwen3_next", "num_hidden_layers": 4}, ["layer_types", "missing", "linear-attention"]),
        (
            {**QWEN3, "model_type": "qwen3_next", "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"]},
            ["layers 0, 1, 2 are linear_attention (3 of 4)", "Gated DeltaNet"],
        ),
        ({**QWEN3, "model_type": "qwen3_next", "layer_types": ["full_attention"] * 2}, ["partial_rotary_factor: got 0.25"]),
        (
            {
                **QWEN3,
                "model_type": "qwen3_next",
                "layer_types": ["full_attention"] * 2,
                "partial_rotary_factor": 1.0,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 16,
                "shared_expert_intermediate_size": 512,
            },
            ["shared_expert_intermediate_size: got 512", "no shared expert"],
        ),
        ({**QWEN3, "use_sliding_window": True}, ["use_sliding_window: got True"]),
        ({**QWEN3, "hidden_act": "gelu"}, ["hidden_act: got 'gelu'"]),
        ({**QWEN3, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, ["rope_type: got 'dynamic'; allowed: default, yarn"]),
        ({**QWEN3, "num_hidden_layers": "two"}, ["num_hidden_layers: got 'two'"]),
        ({**QWEN3, "headwise_attn_output_gate": True, "elementwise_attn_output_gate": True}, ["both headwise_attn_output_gate"]),
    ],
    ids=[
        "llama",
        "next-default-layers",
        "next-linear",
        "next-partial-rotary",
        "next-shared-expert",
        "sliding",
        "gelu",
        "dynamic-rope",
        "bad-int",
        "both-gates",
    ],
)
def test_unsupported_hf_folders_are_refused_in_one_line(tmp_path, capsys, config, needles):
    folder = config_folder(tmp_path / "m", config)
    code, _, err = run_cli(capsys, "import", folder, "--out", tmp_path / "o")
    one_line_error(code, err, str(folder / "config.json"), *needles)
    code, _, err = run_cli(capsys, "probe", folder, "--data", "shakespeare", "--out", tmp_path / "p")
    one_line_error(code, err, *needles)
    assert not (tmp_path / "o").exists() and not (tmp_path / "p").exists()


def test_missing_corrupt_and_mismatched_weights(tmp_path, capsys):
    from orchestrator.interop.weights_files import save_file

    folder = config_folder(tmp_path / "none", QWEN3)
    one_line_error(*run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "no model.safetensors or model.safetensors.index.json")
    (folder / "pytorch_model.bin").write_bytes(b"x")
    one_line_error(*run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "found pytorch_model.bin: convert them to safetensors")
    folder = config_folder(tmp_path / "corrupt", QWEN3, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    one_line_error(*run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "damaged safetensors file (its header is not JSON")
    folder = config_folder(tmp_path / "empty", QWEN3, b"")
    one_line_error(*run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "not a safetensors file (0 bytes")
    folder = config_folder(tmp_path / "short", QWEN3)
    save_file({"model.embed_tokens.weight": torch.zeros(320, 32)}, folder / "model.safetensors")
    one_line_error(
        *run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "tensor model.norm.weight is missing (expected shape [32]"
    )
    save_file({"model.embed_tokens.weight": torch.zeros(300, 32)}, folder / "model.safetensors")
    one_line_error(*run_cli(capsys, "import", folder, "--out", tmp_path / "o")[::2], "has shape [300, 32]; this config needs [320, 32]")
    assert not (tmp_path / "o").exists()


def test_unsupported_variants_on_export_name_the_variant_and_formats(tmp_path, capsys):
    from tests.support.interop import gs_model, trial_folder
    from tests.support.models import tiny_config

    cfg = tiny_config(gate={"position": "G2", "granularity": "headwise"})
    folder = trial_folder(tmp_path / "t", gs_model(cfg, torch.float32))
    code, _, err = run_cli(capsys, "export", folder, "--out", tmp_path / "o")
    one_line_error(code, err, "G2-headwise: --format hf cannot hold this model", "formats it can take: gatesweep")
    assert not (tmp_path / "o").exists()
    code, stdout, err = run_cli(capsys, "export", folder, "--out", tmp_path / "o", "--format", "gatesweep", "--no-tokenizer")
    assert code == 0 and "gatesweep's own format" in stdout, err


def test_sources_that_do_not_hold_weights(tmp_path, capsys, tracking_uri):
    from orchestrator.tracking import RunLogger, names

    logger = RunLogger.create(tracking_uri, "gone", run_name="trained-elsewhere", tags={names.RUN_DIR_TAG: "/nowhere/run"})
    for command in ("export", "probe"):
        extra = ["--out", tmp_path / "o"] if command == "export" else ["--data", "shakespeare", "--log", "--out", tmp_path / "p"]
        code, _, err = run_cli(capsys, command, logger.run_id, "--tracking-uri", tracking_uri, *extra)
        one_line_error(code, err, f"run {logger.run_id}: its weights are not on this machine", "/nowhere/run")
    code, _, err = run_cli(capsys, "export", "0" * 32, "--out", tmp_path / "o", "--tracking-uri", tracking_uri)
    one_line_error(code, err, f"run {'0' * 32}: not found")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.pt").write_bytes(b"\x80\x04 not a pickle")
    one_line_error(*run_cli(capsys, "export", tmp_path / "bad", "--out", tmp_path / "o")[::2], "model.pt: cannot be loaded")
    one_line_error(*run_cli(capsys, "import", "someone/some-model", "--out", tmp_path / "o")[::2], "a Hub name needs GATESWEEP_ONLINE=1")
    one_line_error(*run_cli(capsys, "import", tmp_path, "--out", tmp_path / "o")[::2], "no model.pt (a trial folder), config.json")
    assert not (tmp_path / "o").exists()


def test_probe_refusals(trained, tmp_path, capsys):
    one_line_error(*run_cli(capsys, "probe", trained["run_dir"], "--data", tmp_path / "missing.txt")[::2], "--data: got", "no such file")
    one_line_error(*run_cli(capsys, "probe", trained["run_dir"], "--data", "bigram-backcopy")[::2], "was not trained on bigram-backcopy")
    one_line_error(*run_cli(capsys, "probe", trained["run_dir"], "--data", "shakespeare", "--sequences", 0)[::2], "--sequences: got 0")


@pytest.mark.slow
def test_commands_on_a_trial_find_its_store_from_its_record_and_never_create_one(trained, tmp_path, capsys, monkeypatch):
    """Issue 35: `export`/`eval`/`probe` on a trial folder log into the store its run.json names
    (no --tracking-uri), and when they cannot log (a record from before it named its store, and no
    store here) they warn once with the command that logs later, exit 0, and create no store."""
    import shutil

    monkeypatch.chdir(tmp_path)  # no mlflow.db here: the default store does not exist
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    record = json.loads((trained["run_dir"] / "run.json").read_text())
    assert record["tracking_uri"] == trained["uri"]
    code, out, err = run_cli(capsys, "export", trained["run_dir"], "--out", tmp_path / "hf", "--format", "gatesweep")
    assert code == 0 and f"export/gatesweep/ in MLflow run {trained['run_id']}" in out and "warning" not in err, err
    code, out, err = run_cli(capsys, "eval", trained["run_dir"], "--tasks", "ppl", "--ppl-sets", trained["corpus"])
    assert code == 0 and f"into MLflow run {trained['run_id']}" in out, err
    assert "ppl/corpus" in MlflowClient(trained["uri"]).get_run(trained["run_id"]).data.metrics
    # a trial folder whose record names no store: nothing to log into here, so a warning and exit 0
    old = tmp_path / "old-trial"
    old.mkdir()
    shutil.copy(trained["run_dir"] / "model.pt", old / "model.pt")
    (old / "run.json").write_text(json.dumps({k: v for k, v in record.items() if k != "tracking_uri"}))
    runs = [
        ("export", old, "--out", tmp_path / "hf2"),
        ("eval", old, "--tasks", "ppl", "--ppl-sets", trained["corpus"]),
        ("probe", old, "--data", trained["corpus"], "--sequences", 2, "--seq-len", 32, "--out", tmp_path / "p", "--log"),
    ]
    for argv in runs:
        code, out, err = run_cli(capsys, *argv)
        warnings = [line for line in err.splitlines() if line.startswith("gatesweep: warning:")]
        assert code == 0 and len(warnings) == 1, (argv[0], err)
        assert f"no store at {tmp_path / 'mlflow.db'}" in warnings[0] and "to log it later: gatesweep " + argv[0] in warnings[0]
        assert "--tracking-uri URI" in warnings[0] and "Traceback" not in err
    assert (tmp_path / "hf2" / "config.json").is_file() and (tmp_path / "p" / "probe.json").is_file()
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()  # no store from nowhere
    # a run id with no store here: refused before anything is written, nothing created
    code, _, err = run_cli(capsys, "export", trained["run_id"], "--out", tmp_path / "hf3")
    one_line_error(code, err, f"no store at {tmp_path / 'mlflow.db'}", "--tracking-uri")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "hf3").exists()


@pytest.mark.slow
def test_the_entry_point_exits_2_without_a_traceback(tmp_path):
    folder = config_folder(tmp_path / "llama", {**QWEN3, "model_type": "llama"})
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "import", str(folder), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "model_type 'llama'" in out.stderr and "is not supported" in out.stderr


def test_a_trial_whose_data_is_on_another_machine_still_exports(tmp_path, capsys):
    """Weights travel, data paths need not: the model section is enough, the tokenizer is asked for."""
    from tests.support.interop import gs_model
    from tests.support.models import tiny_config

    model = gs_model(tiny_config(vocab_size=257), torch.float32)
    trial = {"model": model.cfg.to_dict(), "data": {"source": "/elsewhere/corpus.txt", "tokenizer": "byte"}}
    (tmp_path / "t").mkdir()
    torch.save({"model": model.state_dict(), "config": trial}, tmp_path / "t" / "model.pt")
    code, _, err = run_cli(capsys, "export", tmp_path / "t", "--out", tmp_path / "o")
    one_line_error(code, err, "its trial config does not validate here", "pass --tokenizer FILE")
    from orchestrator.interop.tokenizer_files import byte_hf_tokenizer

    byte_hf_tokenizer().save(str(tmp_path / "byte.json"))
    code, stdout, err = run_cli(capsys, "export", tmp_path / "t", "--out", tmp_path / "o", "--tokenizer", tmp_path / "byte.json")
    assert code == 0 and "Qwen3ForCausalLM" in stdout and "only its model section is used" in stdout, err
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "o")("ab")["input_ids"] == [256, 97, 98]


def test_probe_a_bigram_backcopy_trial_on_its_own_task(tmp_path, capsys):
    from tests.support.interop import gs_model, trial_folder
    from tests.support.models import tiny_config

    folder = trial_folder(tmp_path / "t", gs_model(tiny_config(vocab_size=65, n_layers=1), torch.float32))
    code, stdout, err = run_cli(
        capsys, "probe", folder, "--data", "bigram-backcopy", "--sequences", 4, "--seq-len", 32, "--out", tmp_path / "p"
    )
    assert code == 0, err
    assert "1 layer x 4 heads" in stdout and "gate scores: - (no gate)" in stdout and "first token BOS" in stdout
    report = json.loads((tmp_path / "p" / "probe.json").read_text())
    assert report["sequences"] == 4 and report["seq_len"] == 32 and report["gate_histogram"] is None
    folder = trial_folder(tmp_path / "t2", gs_model(tiny_config(vocab_size=70), torch.float32))
    code, _, err = run_cli(capsys, "probe", folder, "--data", "bigram-backcopy")
    one_line_error(code, err, "its 65 tokens do not match the model's vocabulary (70)")
    code, _, err = run_cli(capsys, "probe", folder, "--data", "shakespeare")
    one_line_error(code, err, "trained on bigram-backcopy, which has no text tokenizer")
