"""Tiny models of every interop layout: gatesweep ones, transformers ones, the finished-trial
folder the trainer writes; shared by the interop tests (transformers is a test dependency)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers

from gatedmodels import GatedTransformer, ModelConfig
from orchestrator.interop.tokenizer_files import byte_hf_tokenizer
from orchestrator.spec.trial import TrialConfig
from tests.support.models import V, tiny_config

MOE = {"n_experts": 4, "top_k": 2, "expert_dim": 16, "aux_loss_coef": 0.01}
GS_CASES = {  # gatesweep config -> the layout --format hf must pick
    "qwen3": ({}, "qwen3"),
    "qwen3_moe": ({"moe": MOE}, "qwen3_moe"),
    "qwen3_next": ({"gate": {"position": "G1"}}, "qwen3_next"),
    "qwen3_next_moe": ({"gate": {"position": "G1"}, "moe": MOE}, "qwen3_next"),
    "official_headwise": ({"gate": {"position": "G1", "granularity": "headwise"}}, "official"),
}
TOL = 1e-5
"""Round trips (the same implementation before and after): logits equal to 1e-5 (measured: 0)."""
CROSS_FP32 = 1e-5
"""gatesweep vs transformers on the same weights in fp32: max |Δ logits| (measured <= 5e-6 at |logits| ~ 5)."""
CROSS_BF16 = 0.1
"""... in bf16: mean |Δ| / mean |logits|. transformers' norms compute in float32 and cast back,
gatesweep's stay in bf16, and an MoE router may pick another expert for a token after such a
rounding, so bf16 logits differ by a few percent (measured: 0.9-3.9%); a layout mapped wrongly
gives ~100%."""


def assert_same_function(ours: torch.Tensor, theirs: torch.Tensor, dtype: torch.dtype) -> None:
    if dtype == torch.float32:
        assert max_diff(ours, theirs) <= CROSS_FP32
    else:
        assert float((ours - theirs).abs().mean() / ours.abs().mean()) <= CROSS_BF16


def gs_config(case: str, *, tied: bool = True, yarn: bool = False) -> ModelConfig:
    over, _ = GS_CASES[case]
    return tiny_config(**over, tie_embeddings=tied, yarn=yarn)


def randomize_norms(model: torch.nn.Module, zero_centred: bool = False, seed: int = 1) -> None:
    """Norm weights away from their init, so a norm mapped wrongly (or not zero-centred) shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_((0.0 if zero_centred else 1.0) + 0.2 * torch.randn(p.shape, generator=g))


def gs_model(cfg: ModelConfig, dtype: torch.dtype, seed: int = 0) -> GatedTransformer:
    torch.manual_seed(seed)
    model = GatedTransformer(cfg)
    randomize_norms(model)
    return model.to(dtype).eval()


def trial_folder(folder: Path, model: GatedTransformer) -> Path:
    """A finished trial's folder (model.pt with its trial config), as the trainer writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    trial = TrialConfig.from_dict({"model": model.cfg.to_dict(), "data": {"source": "bigram-backcopy", "seq_len": 32}})
    torch.save({"model": {k: v.clone() for k, v in model.state_dict().items()}, "config": trial.to_dict()}, folder / "model.pt")
    return folder


def tokens(n: int = 3, T: int = 40, seed: int = 5) -> torch.Tensor:
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(seed))


def hf_logits(folder: Path, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    with torch.no_grad():
        return model(x).logits.float()


def gs_logits(model, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x).float()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def byte_tokenizer_file(tmp_path: Path) -> Path:
    path = tmp_path / "byte-tokenizer.json"
    byte_hf_tokenizer().save(str(path))
    return path


# ---- HF -> gatesweep -> HF -------------------------------------------------------------------------
def hf_config(layout: str, *, tied: bool, yarn: bool = False, legacy_rope: bool = False):
    common = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=tied,
        initializer_range=0.2,
        max_position_embeddings=64,
    )
    if yarn:
        rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 500.0}
        common.update({"rope_scaling": rope} if legacy_rope else {"rope_parameters": rope})
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True, router_aux_loss_coef=0.02)
    if layout == "qwen3":
        return transformers.Qwen3Config(**common)
    if layout == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**common, **moe)
    if layout == "qwen3_next":
        return transformers.Qwen3NextConfig(**common, layer_types=["full_attention"] * 2, partial_rotary_factor=1.0, num_experts=0)
    if layout == "qwen3_next_moe":
        return transformers.Qwen3NextConfig(
            **common, layer_types=["full_attention"] * 2, partial_rotary_factor=1.0, shared_expert_intermediate_size=0, **moe
        )
    raise AssertionError(layout)


def hf_folder(folder: Path, layout: str, dtype: torch.dtype, *, tied: bool, yarn: bool = False, legacy_rope: bool = False, seed: int = 0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(layout, tied=tied, yarn=yarn, legacy_rope=legacy_rope))
    randomize_norms(model, zero_centred=layout.startswith("qwen3_next"))
    model.to(dtype).eval().save_pretrained(folder)
    if legacy_rope:  # a transformers 4.x config.json: rope_theta + rope_scaling
        config = json.loads((folder / "config.json").read_text())
        config.pop("rope_parameters", None)
        config.update(rope_theta=500.0, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})
        (folder / "config.json").write_text(json.dumps(config))
    qwen_like_tokenizer().save(str(folder / "tokenizer.json"))
    return model


def qwen_like_tokenizer():
    """A byte-level BPE with `<|endoftext|>` and no BOS token, as Qwen's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(["the gate closes where the sink was " * 20, "attention on the first token " * 20], trainer=trainer)
    return tok
