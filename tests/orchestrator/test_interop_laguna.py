"""The Laguna layout against transformers' own `LagunaForCausalLM` (5.23): gatesweep models with a
G1 softplus gate (headwise and elementwise, dense and MoE with one expert per token) exported,
loaded by transformers with logits equal and the same greedy tokens generated, imported back;
Laguna checkpoints made by transformers imported and exported again; and everything Laguna or
gatesweep cannot express refused in one line, before a file is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers  # a test dependency (pyproject dev extras): these tests must not skip quietly

from gatedmodels import ModelConfig
from orchestrator.cli.main import main
from orchestrator.interop import InteropError, hf_layouts
from orchestrator.interop.export import export
from orchestrator.interop.import_ import import_model
from orchestrator.interop.locate import build_model, load_hf, locate
from tests.support.interop import (
    TOL,
    assert_same_function,
    byte_tokenizer_file,
    gs_logits,
    gs_model,
    hf_logits,
    max_diff,
    qwen_like_tokenizer,
    randomize_norms,
    tokens,
    trial_folder,
)
from tests.support.models import tiny_config

SOFTPLUS = {"position": "G1", "activation": "softplus"}
TOP1 = {"n_experts": 4, "top_k": 1, "expert_dim": 16, "aux_loss_coef": 0.01}
CASES = {
    "headwise": {"gate": {**SOFTPLUS, "granularity": "headwise"}},
    "elementwise": {"gate": SOFTPLUS},
    "moe-headwise": {"gate": {**SOFTPLUS, "granularity": "headwise"}, "moe": TOP1},
    "moe-elementwise": {"gate": SOFTPLUS, "moe": TOP1},
}


def laguna_cfg(case: str, *, tied: bool = True, yarn: bool = False) -> ModelConfig:
    return tiny_config(**CASES[case], tie_embeddings=tied, yarn=yarn)


def greedy(model, x: torch.Tensor, n: int) -> torch.Tensor:
    """gatesweep's greedy continuation: the whole prefix again for every token (no cache)."""
    with torch.no_grad():
        for _ in range(n):
            x = torch.cat([x, model(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("case", list(CASES))
def test_gatesweep_to_laguna_to_gatesweep(tmp_path, case, tied, dtype):
    cfg = laguna_cfg(case, tied=tied, yarn=case == "headwise")
    model = gs_model(cfg, dtype)
    loaded = locate(str(trial_folder(tmp_path / "trial", model)))
    done = export(loaded, tmp_path / "hf", "hf", tokenizer=False)  # --format hf picks Laguna for a softplus G1 gate
    assert done.layout == "laguna"
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["LagunaForCausalLM"] and config["gating"] == hf_layouts.laguna.GATING[cfg.gate.granularity]
    assert config["mlp_layer_types"] == ["sparse" if cfg.moe.n_experts else "dense"] * cfg.n_layers
    x = tokens(T=48)
    ours = gs_logits(model, x)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=dtype).eval()
    assert type(hf).__name__ == "LagunaForCausalLM"
    with torch.no_grad():
        theirs = hf(x).logits.float()
    assert ours.abs().max() > 1.0
    assert_same_function(ours, theirs, dtype)
    back = build_model(load_hf(tmp_path / "hf"))
    assert max_diff(gs_logits(back, x), ours) <= TOL
    imported = import_model(load_hf(tmp_path / "hf"), tmp_path / "imported", tokenizer_file=str(byte_tokenizer_file(tmp_path)))
    again = build_model(locate(str(imported.out)))
    assert max_diff(gs_logits(again, x), ours) <= TOL
    assert again.cfg == cfg.replace(max_seq_len=again.cfg.max_seq_len)


@pytest.mark.parametrize("case", ["headwise", "moe-elementwise"])
def test_transformers_generates_the_same_greedy_tokens(tmp_path, case):
    cfg = laguna_cfg(case, tied=False)
    model = gs_model(cfg, torch.float32, seed=3)
    export(locate(str(trial_folder(tmp_path / "t", model))), tmp_path / "hf", layout="laguna", tokenizer=False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    prompt = tokens(n=2, T=6, seed=11)
    theirs = hf.generate(prompt, max_new_tokens=24, do_sample=False, attention_mask=torch.ones_like(prompt), pad_token_id=0)
    ours = greedy(model, prompt, 24)
    assert theirs.shape == ours.shape == (2, 30)
    assert torch.equal(theirs, ours)
    assert len(set(ours[0, 6:].tolist())) > 3, "a degenerate continuation would prove little"


def test_a_wrong_gate_row_order_would_show(tmp_path):
    from orchestrator.interop.weights_files import load_file, save_file

    model = gs_model(laguna_cfg("elementwise"), torch.float32)
    export(locate(str(trial_folder(tmp_path / "t", model))), tmp_path / "hf", tokenizer=False)
    tensors = dict(load_file(tmp_path / "hf" / "model.safetensors"))
    g = tensors["model.layers.0.self_attn.g_proj.weight"]
    tensors["model.layers.0.self_attn.g_proj.weight"] = g.view(4, 8, -1).transpose(0, 1).reshape(g.shape)  # dim-major, not head-major
    save_file(tensors, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    x = tokens(T=24)
    assert max_diff(hf_logits(tmp_path / "hf", x, torch.float32), gs_logits(model, x)) > 1e-3


# ---- Laguna checkpoints made by transformers ----------------------------------------------------
def laguna_hf_config(gating, *, moe: bool, tied: bool = False, **over) -> transformers.LagunaConfig:
    common = dict(
        vocab_size=320,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=tied,
        initializer_range=0.2,
        max_position_embeddings=64,
        gating=gating,
        layer_types=["full_attention"] * 2,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 1.0}},
        mlp_layer_types=["sparse" if moe else "dense"] * 2,
        num_experts=4,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=0,
    )
    return transformers.LagunaConfig(**{**common, **over})


def laguna_folder(folder: Path, gating, *, moe: bool, tied: bool = False, dtype=torch.float32, **over):
    torch.manual_seed(0)
    model = transformers.LagunaForCausalLM(laguna_hf_config(gating, moe=moe, tied=tied, **over))
    randomize_norms(model)
    model.to(dtype).eval().save_pretrained(folder)
    qwen_like_tokenizer().save(str(folder / "tokenizer.json"))
    return model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(
    "gating,moe,granularity",
    [(True, False, "headwise"), ("per-element", False, "elementwise"), (False, False, "elementwise"), ("per-head", True, "headwise")],
    ids=["true", "per-element", "false", "per-head-moe"],
)
def test_a_laguna_checkpoint_imports_computes_the_same_and_exports_again(tmp_path, gating, moe, granularity, dtype):
    laguna_folder(tmp_path / "hf0", gating, moe=moe, dtype=dtype)
    x = tokens(T=40)
    theirs = hf_logits(tmp_path / "hf0", x, dtype)
    imported = import_model(locate(str(tmp_path / "hf0")), tmp_path / "gs", data_source="shakespeare", seq_len=32)
    loaded = locate(str(imported.out))
    model = build_model(loaded)
    assert model.cfg.gate.label == f"G1-{granularity}-softplus" and bool(model.cfg.moe.n_experts) == moe
    assert next(model.parameters()).dtype == dtype
    assert_same_function(gs_logits(model, x), theirs, dtype)
    export(loaded, tmp_path / "hf1", "hf", tokenizer=True)
    assert max_diff(hf_logits(tmp_path / "hf1", x, dtype), theirs) <= TOL


def test_defaults_a_laguna_config_json_leaves_out_are_transformers_own():
    hf = transformers.LagunaConfig()
    for key, value in hf_layouts.laguna.DEFAULTS.items():
        assert getattr(hf, key) == value if key != "rope_parameters" else hf.rope_parameters == value, key
    assert hf.gating is True and hf.mlp_layer_types[0] == "dense" and set(hf.mlp_layer_types[1:]) == {"sparse"}
    minimal = {"model_type": "laguna", "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    with pytest.raises(InteropError, match=r"partial_rotary_factor: got 0.5"):
        hf_layouts.config_from_hf(minimal, "c", max_len=1 << 20)


# ---- what cannot be held -----------------------------------------------------------------------
def _refused_on_import(tmp_path, capsys, config_over: dict, needles: list[str], *, moe: bool = False, gating=True) -> None:
    laguna_folder(tmp_path / "m", gating, moe=moe)
    path = tmp_path / "m" / "config.json"
    config = json.loads(path.read_text())
    config.update(config_over)
    path.write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["import", str(tmp_path / "m"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    assert all(n in lines[0] for n in needles), lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "over,needles,moe",
    [
        ({"rope_parameters": None}, ["partial_rotary_factor: got 0.5"], False),
        ({"layer_types": ["sliding_attention", "full_attention"]}, ["layer_types", "sliding_attention"], False),
        ({"mlp_layer_types": None}, ["mlp_layer_types", "1 dense and 1 sparse"], True),
        ({"num_experts_per_tok": 2}, ["num_experts_per_tok: got 2", "allowed: 1"], True),
        ({"shared_expert_intermediate_size": 16}, ["shared_expert_intermediate_size: got 16"], True),
        ({"moe_routed_scaling_factor": 2.5}, ["moe_routed_scaling_factor: got 2.5"], True),
        ({"num_attention_heads_per_layer": [4, 2]}, ["num_attention_heads_per_layer"], False),
        ({"gating": "per-channel"}, ["gating: got 'per-channel'"], False),
        ({"attention_bias": True}, ["attention_bias: got True"], False),
    ],
    ids=["default-rope", "sliding", "dense-first-layer", "top2", "shared-expert", "routed-scaling", "heads-per-layer", "gating", "bias"],
)
def test_laguna_checkpoints_gatesweep_cannot_compute_are_refused_in_one_line(tmp_path, capsys, over, needles, moe):
    _refused_on_import(tmp_path, capsys, over, needles, moe=moe)


def test_a_nonzero_score_correction_bias_is_refused(tmp_path, capsys):
    from orchestrator.interop.weights_files import load_file, save_file

    laguna_folder(tmp_path / "m", True, moe=True)
    tensors = dict(load_file(tmp_path / "m" / "model.safetensors"))
    [name] = [k for k in tensors if k.startswith("model.layers.1.") and k.endswith("e_score_correction_bias")]
    tensors[name] = torch.tensor([0.0, 0.5, 0.0, 0.0])
    save_file(tensors, tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    assert main(["import", str(tmp_path / "m"), "--out", str(tmp_path / "o")]) == 2
    assert f"tensor {name} is not zero" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "over,needles",
    [
        ({"gate": {"position": "G2", "activation": "softplus"}}, ["G2-elementwise-softplus", "Laguna's gate is G1 softplus"]),
        ({"gate": {"position": "G5", "activation": "softplus"}}, ["G5-softplus", "Laguna's gate is G1 softplus"]),
        ({"gate": {"position": "G1"}}, ["G1-elementwise: --layout laguna", "layouts it can take: qwen3_next, official"]),
        ({"gate": {**SOFTPLUS, "sharing": "head_shared"}}, ["head-specific"]),
        ({"gate": SOFTPLUS, "qk_norm": False}, ["model.qk_norm false: Laguna always applies QK-norm"]),
        ({"gate": SOFTPLUS, "moe": {**TOP1, "top_k": 2}}, ["model.moe.top_k 2", "agree only with top_k 1"]),
        ({"gate": SOFTPLUS, "attention": {"kind": "softmax1"}}, ["model.attention.kind 'softmax1'"]),
        ({}, ["ungated: --layout laguna", "layouts it can take: qwen3, official"]),
    ],
    ids=["G2", "G5", "sigmoid", "shared", "no-qk-norm", "top2", "softmax1", "ungated"],
)
def test_export_refuses_what_laguna_cannot_express_naming_why(tmp_path, capsys, over, needles):
    model = gs_model(tiny_config(**over), torch.float32)
    folder = trial_folder(tmp_path / "t", model)
    capsys.readouterr()
    code = main(["export", str(folder), "--out", str(tmp_path / "o"), "--layout", "laguna", "--no-tokenizer"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gatesweep: error: "), err
    assert all(n in lines[0] for n in needles), lines[0]
    assert not (tmp_path / "o").exists()


def test_the_layout_option_names_its_values_and_needs_format_hf(tmp_path, capsys):
    folder = trial_folder(tmp_path / "t", gs_model(laguna_cfg("headwise"), torch.float32))
    for extra, needle in (
        (["--layout", "llama"], "--layout: got 'llama'; allowed: qwen3, qwen3_moe, qwen3_next, official, laguna"),
        (["--layout", "laguna", "--format", "gatesweep"], "only with --format hf"),
    ):
        capsys.readouterr()
        assert main(["export", str(folder), "--out", str(tmp_path / "o"), "--no-tokenizer", *extra]) == 2
        assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    capsys.readouterr()
    assert main(["export", str(folder), "--out", str(tmp_path / "o"), "--layout", "laguna", "--no-tokenizer"]) == 0
    out = capsys.readouterr().out
    assert "LagunaForCausalLM (softplus output gate" in out and 'AutoModelForCausalLM.from_pretrained("' in out
