"""What a model costs, from its config alone (torch-free): parameters and training FLOPs per token.

`model_costs(cfg)` counts every parameter the modules of `gatedmodels.model` create (a test checks
the counts against the built model for every preset, gate and attention kind), split the way
scaling laws need them:

- `params`: every parameter; `params_non_embedding`: without the token embedding and learned
  positions (Kaplan et al. 2020's N; an untied output head counts, a tied one is the embedding);
- `matmul_params`: the weights one token is multiplied through in a forward pass: every linear
  layer of the blocks (an MoE's router and only its `top_k` experts), the output head (tied or
  not), and the gate's rows of the fused projection (`gate_matmul_params`, counted apart);
- `forward_flops(seq_len)`: 2 x matmul_params (a multiply and an add per weight) plus the
  attention scores and the weighted sum, 2 x 2 x H x d per (query, key) pair and layer, over the
  (T + 1) / 2 keys a causal query sees on average (one more for a sink slot); norms, RoPE,
  softmax and the gate's activation are left out (a few FLOPs per activation, not per weight);
- `train_flops(seq_len)`: 3 x forward (the backward pass costs two forwards), per token.

So a G1 elementwise gate adds d_model x (H x d) weights per layer and 6 x d_model x H x d training
FLOPs per token per layer (REFERENCE §8: "count the gate's FLOPs"), whatever its activation
(sigmoid, SiLU, softplus, 2·sigmoid); `gate_flop_share` says what share of a token's training
FLOPs that is. The activation and the multiply themselves are `gate_pointwise_flops` (a few FLOPs
per score, `ACTIVATION_FLOPS`), reported apart. Multi-head latent attention (`attention.kind:
mla`) is counted from its own projections: the fused down projection (query latent or full-rank
query, KV latent, RoPE key, gate rows), the query and KV up projections and o_proj, and scores
over head_dim + mla_rope_dim.

The gate's score shapes (`Site`, `gate_sites`, `score_shape`, `gate_score_features`) live here too,
so counting needs no torch; `gatedmodels.gates` builds its modules from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .config import GateConfig, ModelConfig


class Site(NamedTuple):
    """Shape of the tensor gated at one position: (B, T, heads, width)."""

    heads: int
    width: int


def gate_sites(cfg: ModelConfig) -> dict[str, Site]:
    """The tensor each position gates. MLA (`gatedmodels.mla`) has a key and a value per query
    head, and its queries and keys are head_dim + mla_rope_dim wide (the decoupled RoPE part)."""
    kv_heads, qk = cfg.n_kv_heads, cfg.head_dim
    if cfg.attention.kind == "mla":
        kv_heads, qk = cfg.n_heads, cfg.head_dim + cfg.attention.mla_rope_dim
    return {
        "G1": Site(cfg.n_heads, cfg.head_dim),
        "G2": Site(kv_heads, cfg.head_dim),
        "G3": Site(kv_heads, qk),
        "G4": Site(cfg.n_heads, qk),
        "G5": Site(1, cfg.d_model),
    }


def score_shape(gate: GateConfig, site: Site) -> tuple[int, int]:
    """(heads, width) of the gate scores at a site; they broadcast against (heads, width)."""
    heads = site.heads if gate.sharing == "head_specific" else 1
    width = site.width if gate.granularity == "elementwise" else 1
    return heads, width


def gate_score_features(cfg: ModelConfig) -> int:
    """Rows the gate adds to each layer's fused projection (0 for none / constant / controls)."""
    gate = cfg.gate
    if gate.position == "none" or gate.kind != "gate" or not gate.input_dependent:
        return 0
    heads, width = score_shape(gate, gate_sites(cfg)[gate.position])
    return heads * width


def gate_module_params(cfg: ModelConfig) -> int:
    """Parameters of one layer's gate module itself (not its projection rows): an
    input-independent gate's score table, the RMSNorm control's weight."""
    gate = cfg.gate
    if gate.position == "none":
        return 0
    site = gate_sites(cfg)[gate.position]
    if gate.kind == "rmsnorm":
        return site.width
    if gate.kind == "gate" and not gate.input_dependent:
        heads, width = score_shape(gate, site)
        return heads * width
    return 0


def attention_kind_params(cfg: ModelConfig) -> int:
    """Parameters one layer's attention kind adds: learned_sink H, key_bias K * d, the others 0."""
    return {"learned_sink": cfg.n_heads, "key_bias": cfg.n_kv_heads * cfg.head_dim}.get(cfg.attention.kind, 0)


SINK_SLOT_KINDS = ("softmax1", "learned_sink", "key_bias")
"""Attention kinds with one extra key (a sink slot) every query sees."""

ACTIVATION_FLOPS = {"sigmoid": 4, "silu": 5, "ns_sigmoid": 6, "softplus": 4, "2sigmoid": 5}
"""FLOPs per gate score of each activation, by the usual convention of one per arithmetic
operation and per exp/log: sigmoid 1/(1 + e^-x) is 4 (negate, exp, add, divide), SiLU one more
(the multiply by x), NS-sigmoid and 2·sigmoid one or two more (the scale and shift), softplus
ln(1 + e^x) 4 as computed stably (max(x, 0) + log1p(e^-|x|)). They are pointwise: next to a
score's projection row (2·d_model FLOPs) they are a rounding error, counted in
`gate_pointwise_flops` and not in `forward_flops` (which, like Kaplan et al.'s 6N, counts matmuls
and attention; norms, RoPE and softmax are left out alike)."""


@dataclass(frozen=True)
class ModelCosts:
    """Parameter counts and per-token FLOPs of one model config (see the module docstring)."""

    params: int
    params_non_embedding: int
    params_embedding: int
    params_gate: int
    """What the gate adds: its projection rows plus its module's own parameters."""
    matmul_params: int
    gate_matmul_params: int
    n_layers: int
    n_heads: int
    head_dim: int
    extra_keys: int
    """Keys beyond the causal window every query sees (1 for a sink slot)."""
    qk_head_dim: int = 0
    """Width of a head's query and key (0: head_dim; MLA: head_dim + mla_rope_dim)."""
    gate_pointwise_flops: float = 0.0
    """Forward FLOPs per token of the gate's activation and of applying it (one multiply or add
    per gated element), over all layers; left out of `forward_flops` (see ACTIVATION_FLOPS)."""

    def attention_flops(self, seq_len: int) -> float:
        """Forward FLOPs per token of the attention scores (2·qk width per key and head) and the
        weighted sum (2·head_dim)."""
        keys = (seq_len + 1) / 2 + self.extra_keys
        return 2.0 * self.n_layers * self.n_heads * ((self.qk_head_dim or self.head_dim) + self.head_dim) * keys

    def forward_flops(self, seq_len: int) -> float:
        return 2.0 * self.matmul_params + self.attention_flops(seq_len)

    def train_flops(self, seq_len: int) -> float:
        """Training FLOPs per token: forward plus backward (two forwards)."""
        return 3.0 * self.forward_flops(seq_len)

    def gate_flop_share(self, seq_len: int) -> float:
        """The share of a token's training FLOPs spent in the gate's projection."""
        return 2.0 * self.gate_matmul_params / self.forward_flops(seq_len)


def _attention_weights(cfg: ModelConfig) -> tuple[int, int]:
    """(matmul weights, other parameters) of one layer's attention, the gate's rows included."""
    d, S, a = cfg.d_model, gate_score_features(cfg), cfg.attention
    if a.kind == "mla":  # the fused down projection [q latent or q | c_KV | RoPE key | gate], then the up projections
        H, qk = cfg.n_heads, cfg.head_dim + a.mla_rope_dim
        q_up = a.mla_q_rank * H * qk
        down = d * ((a.mla_q_rank or H * qk) + a.mla_kv_rank + a.mla_rope_dim + S)
        matmul = down + q_up + a.mla_kv_rank * H * 2 * cfg.head_dim + cfg.q_dim * d
        return matmul, a.mla_q_rank + a.mla_kv_rank + gate_module_params(cfg)
    matmul = d * (cfg.q_dim + 2 * cfg.kv_dim + S) + cfg.q_dim * d
    return matmul, (2 * cfg.head_dim if cfg.qk_norm else 0) + gate_module_params(cfg) + attention_kind_params(cfg)


def gate_pointwise_flops(cfg: ModelConfig) -> float:
    """Forward FLOPs per token and layer of the gate's activation (ACTIVATION_FLOPS per score, for
    input-dependent gates; a constant gate's table is per model, not per token) and of applying
    it (one multiply, or one add, per element of the gated tensor)."""
    gate = cfg.gate
    if gate.position == "none" or gate.kind != "gate":
        return 0.0
    site = gate_sites(cfg)[gate.position]
    return float(ACTIVATION_FLOPS[gate.activation] * gate_score_features(cfg) + site.heads * site.width)


def model_costs(cfg: ModelConfig) -> ModelCosts:
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    norm = d  # one RMSNorm weight
    S = gate_score_features(cfg)
    attn_matmul, attn_other = _attention_weights(cfg)
    attn = attn_matmul + attn_other
    m = cfg.moe
    if m.n_experts:
        expert = 3 * d * m.expert_dim
        ffn, ffn_matmul = d * m.n_experts + m.n_experts * expert, d * m.n_experts + m.top_k * expert
    else:
        ffn = ffn_matmul = 3 * d * cfg.ffn_dim
    block = 2 * norm + attn + ffn
    embedding = V * d + (cfg.max_seq_len * d if cfg.position_encoding == "learned" else 0)
    head = 0 if cfg.tie_embeddings else V * d
    total = embedding + L * block + norm + head
    block_matmul = attn_matmul + ffn_matmul
    return ModelCosts(
        params=total,
        params_non_embedding=total - embedding,
        params_embedding=embedding,
        params_gate=L * (d * S + gate_module_params(cfg)),
        matmul_params=L * block_matmul + V * d,
        gate_matmul_params=L * d * S,
        n_layers=L,
        n_heads=cfg.n_heads,
        head_dim=cfg.head_dim,
        extra_keys=1 if cfg.attention.kind in SINK_SLOT_KINDS else 0,
        qk_head_dim=cfg.head_dim + (cfg.attention.mla_rope_dim if cfg.attention.kind == "mla" else 0),
        gate_pointwise_flops=L * gate_pointwise_flops(cfg),
    )
