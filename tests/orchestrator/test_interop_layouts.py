"""Weight layouts against transformers itself (a test dependency): tiny random models of every
supported layout, HF -> gatesweep -> HF and gatesweep -> HF -> gatesweep, fp32 and bf16, tied and
untied, with YaRN; the paper's gated layout against a re-implementation of its attention; the
MoE load-balancing conversion; safetensors files against the `safetensors` package."""

from __future__ import annotations

import json
import math

import pytest
import torch
import transformers  # a test dependency (pyproject dev extras): these tests must not skip quietly

from orchestrator.interop import InteropError, hf_layouts
from orchestrator.interop.export import export
from orchestrator.interop.import_ import import_model
from orchestrator.interop.locate import build_model, load_hf, locate
from orchestrator.interop.tokenizer_files import byte_hf_tokenizer
from orchestrator.interop.weights_files import load_file, load_folder, save_file
from tests.support.interop import (
    CROSS_FP32,
    GS_CASES,
    MOE,
    TOL,
    V,
    assert_same_function,
    byte_tokenizer_file,
    gs_config,
    gs_logits,
    gs_model,
    hf_folder,
    hf_logits,
    max_diff,
    randomize_norms,
    tokens,
    trial_folder,
)
from tests.support.models import tiny_config


# ---- gatesweep -> HF -> gatesweep ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("case", [c for c in GS_CASES if GS_CASES[c][1] != "official"])
def test_gatesweep_to_hf_to_gatesweep(tmp_path, case, tied, dtype):
    cfg = gs_config(case, tied=tied, yarn=case == "qwen3")
    model = gs_model(cfg, dtype)
    loaded = locate(str(trial_folder(tmp_path / "trial", model)))
    done = export(loaded, tmp_path / "hf", "hf", tokenizer=False)
    assert done.layout == GS_CASES[case][1]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == [hf_layouts.LAYOUTS[done.layout].architecture]
    assert config["tie_word_embeddings"] is tied and config["dtype"] == str(dtype).removeprefix("torch.")
    x = tokens(T=48)  # longer than YaRN's original 16 positions
    ours = gs_logits(model, x)
    theirs = hf_logits(tmp_path / "hf", x, dtype)
    assert ours.abs().max() > 1.0, "logits too small for the comparison to mean anything"
    assert_same_function(ours, theirs, dtype)
    back = build_model(load_hf(tmp_path / "hf"))
    assert next(back.parameters()).dtype == dtype
    assert max_diff(gs_logits(back, x), ours) <= TOL
    imported = import_model(load_hf(tmp_path / "hf"), tmp_path / "imported", tokenizer_file=str(byte_tokenizer_file(tmp_path)))
    again = build_model(locate(str(imported.out)))
    assert max_diff(gs_logits(again, x), ours) <= TOL
    assert again.cfg == cfg.replace(max_seq_len=again.cfg.max_seq_len)  # the exact config, through the record in config.json


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("layout", ["qwen3", "qwen3_moe", "qwen3_next", "qwen3_next_moe"])
def test_hf_to_gatesweep_to_hf(tmp_path, layout, tied, dtype):
    hf_folder(tmp_path / "hf0", layout, dtype, tied=tied, yarn=layout == "qwen3_moe", legacy_rope=tied and layout == "qwen3_moe")
    x = tokens(T=48)
    theirs = hf_logits(tmp_path / "hf0", x, dtype)
    assert theirs.abs().max() > 1.0
    imported = import_model(locate(str(tmp_path / "hf0")), tmp_path / "gs", data_source="shakespeare", seq_len=32)
    loaded = locate(str(imported.out))
    model = build_model(loaded)
    assert next(model.parameters()).dtype == dtype
    assert_same_function(gs_logits(model, x), theirs, dtype)
    if layout.startswith("qwen3_next"):
        assert model.cfg.gate.label == "G1-elementwise"
    if layout == "qwen3_moe":
        assert model.cfg.rope.scaling == "yarn" and model.cfg.rope.factor == 4.0 and model.cfg.rope.original_max_len == 16
        assert math.isclose(model.cfg.moe.aux_loss_coef, 0.02 * 2 / 2)
    export(loaded, tmp_path / "hf1", "hf", tokenizer=True)
    again = hf_logits(tmp_path / "hf1", x, dtype)
    assert max_diff(again, theirs) <= TOL
    # the tokenizer went through too, BOS first (Qwen's has none: <|endoftext|>)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf1")
    gs_tok = loaded.tokenizer()
    assert gs_tok.hf.id_to_token(gs_tok.bos_id) == "<|endoftext|>"
    text = "the sink closes"
    assert tok(text)["input_ids"] == [gs_tok.bos_id, *gs_tok.encode([text])[0].tolist()]


def test_yarn_settings_travel_in_rope_scaling_both_ways(tmp_path):
    cfg = gs_config("qwen3", yarn=True)
    loaded = locate(str(trial_folder(tmp_path / "t", gs_model(cfg, torch.float32))))
    export(loaded, tmp_path / "hf", tokenizer=False)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    want = {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}
    assert config["rope_scaling"] == {"rope_type": "yarn", "type": "yarn", **want}
    assert config["rope_parameters"] == {"rope_type": "yarn", "rope_theta": 500.0, **want}
    assert config["rope_theta"] == 500.0 and config["max_position_embeddings"] == 64
    hf_cfg = transformers.AutoConfig.from_pretrained(tmp_path / "hf")
    assert hf_cfg.rope_parameters["rope_type"] == "yarn" and hf_cfg.rope_parameters["factor"] == 4.0
    # a 4.x config.json (rope_scaling only) and a 5.x one (rope_parameters only) read alike
    for drop in ("rope_parameters", "rope_scaling"):
        edited = {k: v for k, v in config.items() if k != drop}
        got, _ = hf_layouts.config_from_hf(edited, "config.json", max_len=1 << 20)
        assert got.rope == cfg.rope, drop


def test_defaults_for_fields_a_config_json_leaves_out_are_transformers_own():
    classes = {"qwen3": transformers.Qwen3Config, "qwen3_moe": transformers.Qwen3MoeConfig, "qwen3_next": transformers.Qwen3NextConfig}
    for layout, cls in classes.items():
        hf = cls()
        for key, value in hf_layouts.HF_DEFAULTS[layout].items():
            assert getattr(hf, key) == value, (layout, key)
    assert "head_dim" not in transformers.Qwen3MoeConfig.__dataclass_fields__  # so hidden_size / heads
    assert transformers.Qwen3NextConfig().rope_parameters["partial_rotary_factor"] == 0.25
    minimal = {"model_type": "qwen3_next", "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    full = {**minimal, "full_attention_interval": 1, "partial_rotary_factor": 1.0}
    cfg, _ = hf_layouts.config_from_hf({**full, "shared_expert_intermediate_size": 0}, "c", max_len=1 << 20)
    assert (cfg.head_dim, cfg.n_kv_heads, cfg.moe.n_experts, cfg.moe.top_k) == (256, 2, 512, 10)
    with pytest.raises(InteropError, match="shared_expert_intermediate_size: got 512"):
        hf_layouts.config_from_hf({**full, "num_experts": 4}, "c", max_len=1 << 20)


# ---- the paper's gated layout ------------------------------------------------------------------------
def official_attention_forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_values=None, **kwargs):
    """The attention of the paper's modeling_qwen3.py (qiuzh20/gated_attention, Qwen3Attention.forward),
    re-typed: q_proj's output viewed per KV head and split into [queries of its G heads | their gates]."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb, repeat_kv

    cfg = self.config
    bsz, q_len, _ = hidden_states.size()
    d, K, G = self.head_dim, cfg.num_key_value_heads, self.num_key_value_groups
    query_states = self.q_proj(hidden_states)
    key_states = self.k_proj(hidden_states).view(bsz, q_len, -1, d).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(bsz, q_len, -1, d).transpose(1, 2)
    query_states = query_states.view(bsz, q_len, K, -1)
    if cfg.headwise_attn_output_gate:
        query_states, gate_score = torch.split(query_states, [d * G, G], dim=-1)
        gate_score = gate_score.reshape(bsz, q_len, -1, 1)
    else:
        query_states, gate_score = torch.split(query_states, [d * G, d * G], dim=-1)
        gate_score = gate_score.reshape(bsz, q_len, -1, d)
    query_states = query_states.reshape(bsz, q_len, -1, d).transpose(1, 2)
    if cfg.use_qk_norm:
        query_states, key_states = self.q_norm(query_states), self.k_norm(key_states)
    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
    key_states, value_states = repeat_kv(key_states, G), repeat_kv(value_states, G)
    attn = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(d)
    causal = torch.ones(q_len, q_len, dtype=torch.bool).tril()
    attn = attn.masked_fill(~causal, float("-inf")).softmax(dim=-1, dtype=torch.float32).to(query_states.dtype)
    out = torch.matmul(attn, value_states).transpose(1, 2).contiguous()
    out = out * torch.sigmoid(gate_score)
    return self.o_proj(out.reshape(bsz, q_len, -1)), None


def official_model(config: dict, monkeypatch, tensors: dict | None = None):
    """Qwen3ForCausalLM with the paper's attention: its q_proj widened, its forward the official
    one; with `tensors` (HF names) loaded, else random."""
    from transformers.models.qwen3 import modeling_qwen3

    hf_cfg = transformers.Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "model_type", "gatesweep")})
    for key in ("use_qk_norm", "headwise_attn_output_gate", "elementwise_attn_output_gate"):
        setattr(hf_cfg, key, config[key])
    monkeypatch.setattr(modeling_qwen3.Qwen3Attention, "forward", official_attention_forward)
    torch.manual_seed(3)
    model = transformers.Qwen3ForCausalLM(hf_cfg)
    H, d = config["num_attention_heads"], config["head_dim"]
    rows = H * d + (H if config["headwise_attn_output_gate"] else H * d)
    for layer in model.model.layers:
        layer.self_attn.q_proj = torch.nn.Linear(config["hidden_size"], rows, bias=False)
        if not config["use_qk_norm"]:
            layer.self_attn.q_norm = layer.self_attn.k_norm = torch.nn.Identity()
    if tensors is None:
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.2)
        randomize_norms(model)
    else:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if config["tie_word_embeddings"]:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


OFFICIAL_CASES = [("headwise", True), ("elementwise", True), ("headwise", False), ("none", False)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("gate,qk_norm", OFFICIAL_CASES, ids=["headwise", "elementwise", "headwise-noqk", "none-noqk"])
def test_official_layout_matches_the_papers_attention_and_comes_back(tmp_path, monkeypatch, gate, qk_norm, dtype):
    over = {} if gate == "none" else {"gate": {"position": "G1", "granularity": gate}}
    tied = gate != "elementwise"
    cfg = tiny_config(**over, qk_norm=qk_norm, n_heads=6, n_kv_heads=2, tie_embeddings=tied)  # G = 3
    model = gs_model(cfg, dtype)
    loaded = locate(str(trial_folder(tmp_path / "t", model)))
    done = export(loaded, tmp_path / "off", "official", tokenizer=False)
    assert done.layout == "official" and any("modeling_qwen3.py" in n for n in done.notes)
    config = json.loads((tmp_path / "off" / "config.json").read_text())
    assert config["headwise_attn_output_gate"] is (gate == "headwise")
    assert config["elementwise_attn_output_gate"] is (gate == "elementwise")
    assert config["use_qk_norm"] is qk_norm and config["qkv_bias"] is False
    x = tokens(T=24)
    ours = gs_logits(model, x)
    if gate != "none" and dtype == torch.float32:
        with torch.no_grad():
            reference = official_model(config, monkeypatch, load_file(tmp_path / "off" / "model.safetensors"))(x).logits
        assert max_diff(reference, ours) <= CROSS_FP32
    back = build_model(load_hf(tmp_path / "off"))
    assert max_diff(gs_logits(back, x), ours) <= TOL
    assert back.cfg.gate == cfg.gate and back.cfg.qk_norm is qk_norm


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_a_checkpoint_of_the_papers_code_imports_and_computes_the_same(tmp_path, monkeypatch, gate):
    """The direction of the released checkpoints: weights of the paper's model (random here), as
    its code names and groups them, into gatesweep: the same logits."""
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": V,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 64,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": True,
        "use_qk_norm": True,
        "qkv_bias": False,
        "headwise_attn_output_gate": gate == "headwise",
        "elementwise_attn_output_gate": gate == "elementwise",
    }
    reference = official_model(config, monkeypatch)
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v for k, v in reference.state_dict().items() if k != "lm_head.weight"}, folder / "model.safetensors")
    x = tokens(T=24)
    with torch.no_grad():
        theirs = reference(x).logits
    loaded = load_hf(folder)
    assert loaded.layout == "official" and loaded.model_cfg.gate.label == f"G1-{gate}"
    assert max_diff(gs_logits(build_model(loaded), x), theirs) <= CROSS_FP32
    # and back out in the paper's layout: the same tensors, so the same logits through its code
    (folder / "tokenizer.json").write_text(byte_hf_tokenizer().to_str())
    imported = import_model(load_hf(folder), tmp_path / "gs")
    export(locate(str(imported.out)), tmp_path / "again", "official", tokenizer=False)
    again = load_file(tmp_path / "again" / "model.safetensors")
    original = load_file(folder / "model.safetensors")
    assert set(again) == set(original) and all(torch.equal(again[k], original[k]) for k in original)


def test_a_wrong_row_grouping_would_show(tmp_path, monkeypatch):
    """The official check above can fail: rows grouped head-major (gatesweep's own order) instead
    of per KV head give other logits through the paper's attention."""
    cfg = tiny_config(gate={"position": "G1", "granularity": "headwise"}, n_heads=6, n_kv_heads=2)
    model = gs_model(cfg, torch.float32)
    export(locate(str(trial_folder(tmp_path / "t", model))), tmp_path / "off", "official", tokenizer=False)
    tensors = load_file(tmp_path / "off" / "model.safetensors")
    wqkv = model.state_dict()["blocks.0.attn.wqkv.weight"]
    H, d = 6, 8
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.cat([wqkv[: H * d], wqkv[-H:]])  # not grouped per KV head
    config = json.loads((tmp_path / "off" / "config.json").read_text())
    with torch.no_grad():
        wrong = official_model(config, monkeypatch, tensors)(tokens(T=24)).logits
    assert max_diff(wrong, gs_logits(model, tokens(T=24))) > 1e-3


# ---- what cannot be held ------------------------------------------------------------------------------
def test_every_layout_has_one_mapping_and_every_mapping_a_layout():
    """to_hf and from_hf branch on no layout's name: what a layout does its own way is its
    `MAPPINGS` entry, so a layout without one could be chosen and not written."""
    assert set(hf_layouts.MAPPINGS) == set(hf_layouts.LAYOUTS)
    assert [name for name, m in hf_layouts.MAPPINGS.items() if m.zero_centred] == ["qwen3_next"]


@pytest.mark.parametrize(
    "over,fmt,expected",
    [
        ({"gate": {"position": "G2"}}, "hf", "G2-elementwise: --format hf cannot hold this model"),
        ({"gate": {"position": "G2"}}, "official", "G2-elementwise: --format official cannot hold this model"),
        ({"gate": {"position": "G1", "activation": "silu"}}, "hf", "formats it can take: gatesweep"),
        ({"gate": {"position": "G1", "sharing": "head_shared"}}, "official", "G1-elementwise-shared"),
        ({"gate": {"position": "G1", "kind": "rmsnorm"}}, "hf", "G1-rmsnorm"),
        ({"gate": {"position": "G1", "input_dependent": False}}, "hf", "G1-elementwise-const"),
        ({"gate": {"position": "G1", "granularity": "headwise"}, "moe": MOE}, "hf", "the paper's modeling_qwen3.py is dense"),
        ({"position_encoding": "learned"}, "hf", "model.position_encoding 'learned'"),
        ({"qk_norm": False}, "hf", "formats it can take: official, gatesweep"),
        ({"gate": {"position": "G1"}, "qk_norm": False}, "hf", "model.qk_norm false: Qwen3-Next always applies QK-norm"),
        # an attention kind without parameters was once written as plain Qwen3: a different function that read back "as written"
        ({"attention": {"kind": "softmax1"}}, "hf", "model.attention.kind 'softmax1': the HF layouts' attention is softmax"),
        ({"attention": {"kind": "sigmoid"}, "qk_norm": False}, "official", "model.attention.kind 'sigmoid'"),
        ({"attention": {"kind": "mla"}, "n_kv_heads": 4, "qk_norm": False}, "hf", "model.attention.kind 'mla'"),
    ],
)
def test_variants_a_format_cannot_hold_are_refused_naming_the_formats(over, fmt, expected):
    cfg = tiny_config(**over)
    with pytest.raises(InteropError) as err:
        hf_layouts.layout_for_format(cfg, fmt)
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert hf_layouts.layout_for_format(cfg, "gatesweep") is None  # gatesweep's own format takes every variant


def test_gatesweep_format_round_trips_any_variant(tmp_path):
    cfg = tiny_config(gate={"position": "G2", "granularity": "headwise", "sharing": "head_shared"})
    model = gs_model(cfg, torch.bfloat16)
    done = export(locate(str(trial_folder(tmp_path / "t", model))), tmp_path / "gs", "gatesweep", tokenizer=False)
    assert done.layout is None and {p.name for p in done.files} == {"config.yaml", "model.safetensors"}
    back = build_model(locate(str(tmp_path / "gs")))
    x = tokens(T=20)
    assert max_diff(gs_logits(back, x), gs_logits(model, x)) == 0.0


# ---- MoE load-balancing loss: the two conventions ---------------------------------------------------
def test_aux_loss_coefficient_conversion_is_exact_with_one_layer_and_documented_otherwise(tmp_path):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

    for n_layers in (1, 3):
        cfg = tiny_config(n_layers=n_layers, moe={**MOE, "top_k": 2})
        model = gs_model(cfg, torch.float32)
        x = tokens(n=4, T=32)
        router_logits: list[torch.Tensor] = []
        record = router_logits.append
        hooks = [b.ffn.router.register_forward_hook(lambda m, i, o, record=record: record(o.detach())) for b in model.blocks]
        with torch.no_grad():
            model(x)
        for h in hooks:
            h.remove()
        gs_loss = float(model.aux_loss())  # coef * sum over layers
        hf_raw = float(load_balancing_loss_func(tuple(router_logits), cfg.moe.n_experts, cfg.moe.top_k))
        hf_loss = hf_layouts.aux_coef_to_hf(cfg.moe.aux_loss_coef, cfg) * hf_raw
        per_layer = [float(b.ffn.aux_loss) for b in model.blocks]
        if n_layers == 1:
            assert math.isclose(hf_raw, cfg.moe.top_k * per_layer[0], rel_tol=1e-5)
            assert math.isclose(hf_loss, gs_loss, rel_tol=1e-5)
        else:  # pooled statistics: close when the layers route alike, not equal
            assert 0.5 < hf_loss / gs_loss < 2.0
    assert hf_layouts.aux_coef_from_hf(hf_layouts.aux_coef_to_hf(0.01, cfg), cfg.n_layers, cfg.moe.top_k) == pytest.approx(0.01)


# ---- safetensors ------------------------------------------------------------------------------------------
def test_safetensors_files_agree_with_the_safetensors_package(tmp_path):
    from safetensors.torch import load_file as st_load
    from safetensors.torch import save_file as st_save

    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.randn(7).to(torch.bfloat16),
        "c": torch.arange(6, dtype=torch.int64).view(2, 3),
        "empty": torch.zeros(0, 4),
        "h": torch.randn(2, 2).half(),
    }
    save_file(tensors, tmp_path / "ours.safetensors", metadata={"format": "pt"})
    theirs = st_load(str(tmp_path / "ours.safetensors"))
    st_save(tensors, str(tmp_path / "theirs.safetensors"))
    ours = load_file(tmp_path / "theirs.safetensors")
    for name, t in tensors.items():
        assert torch.equal(theirs[name], t) and theirs[name].dtype == t.dtype, name
        assert torch.equal(ours[name], t) and ours[name].dtype == t.dtype, name


def test_damaged_safetensors_files_are_one_line_errors(tmp_path):
    save_file({"w": torch.randn(64, 64)}, tmp_path / "good.safetensors")
    raw = (tmp_path / "good.safetensors").read_bytes()
    cases = {
        "truncated": raw[: len(raw) - 100],
        "tiny": raw[:5],
        "garbage": b"\x00" * 8 + b"not json at all" * 10,
        "huge_header": (10**12).to_bytes(8, "little") + b"{}",
        "text": b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n",
    }
    for name, blob in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(blob)
        with pytest.raises(InteropError) as err:
            load_file(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value), name


def test_sharded_folders_are_read_through_their_index(tmp_path):
    save_file({"a": torch.ones(2)}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({"b": torch.zeros(3)}, tmp_path / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    got = load_folder(tmp_path)
    assert torch.equal(got["a"], torch.ones(2)) and torch.equal(got["b"], torch.zeros(3))
    index["weight_map"]["c"] = "model-00003-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InteropError, match="names the shard"):
        load_folder(tmp_path)


# ---- tokenizers --------------------------------------------------------------------------------------------
def test_byte_tokenizer_export_reproduces_gatesweeps_ids_with_bos(tmp_path):
    from orchestrator.data.tokenizers import byte_tokenizer
    from orchestrator.interop.tokenizer_files import write_for_hf

    tok = byte_tokenizer()
    ids = write_for_hf(tok, tmp_path, 256)
    assert ids == {"bos": 256, "eos": 256, "pad": None}
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ("héllo wörld", "tabs\tand\nnewlines", "\x00\x7f emoji 🙂", ""):
        assert hf(text)["input_ids"] == [256, *text.encode("utf-8")], text
        assert hf.decode(hf(text)["input_ids"], skip_special_tokens=True) == text
    assert len(hf) == 257 and hf.bos_token == "<bos>"


def test_bpe_tokenizers_export_with_their_bos_first(tmp_path):
    from orchestrator.data.tokenizers import gpt2_tokenizer, train_bpe
    from orchestrator.interop.tokenizer_files import write_for_hf

    text = "The gate closes; the sink was here.\n  Indented, <|endoftext|> and ünïcödé 🙂"
    bpe = train_bpe(["the gate closes where the sink was " * 50, "attention on the first token " * 50], 300, key="interop-test")
    for tok in (gpt2_tokenizer(), bpe):
        folder = tmp_path / tok.name.replace(":", "-")
        ids = write_for_hf(tok, folder, 1024)
        hf = transformers.AutoTokenizer.from_pretrained(folder)
        assert hf(text)["input_ids"] == [tok.bos_id, *tok.encode([text])[0].tolist()], tok.name
        assert ids["bos"] == tok.bos_id and hf.bos_token_id == tok.bos_id
    assert gpt2_tokenizer().bos_id == 50256  # <|endoftext|>: GPT-2 has no other BOS
