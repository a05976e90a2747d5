"""Model and gate configuration (Qiu et al. 2025, §2.2 and Fig. 1).

`GateConfig` describes one gate variant of the paper; `ModelConfig` a Qwen3-style decoder.
Both are strict typed dataclasses (see `gatedmodels.typedconfig`): a config object that exists is valid, and
combinations the paper does not define raise `ConfigError` (a `ValueError`) naming the field and
the allowed values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .typedconfig import Config, ConfigError, Issue, deep_merge, did_you_mean

POSITIONS = ("G1", "G2", "G3", "G4", "G5")
ATTENTION_KINDS = ("softmax", "softmax1", "learned_sink", "softpick", "sigmoid", "key_bias", "mla")
"""The kinds of `AttentionConfig.kind` (modules in `gatedmodels.attention_kinds`): softmax, the
attention-sink remedies, and multi-head latent attention (`mla`, `gatedmodels.mla`)."""
KV_CACHE_KINDS = ("softmax", "softmax1", "learned_sink", "key_bias", "softpick", "sigmoid")
"""Kinds with a KV-cache path (`AttentionKind.attend`, see `gatedmodels.kv_cache`), which greedy
generation needs. A kind missing here is refused, by name, for a trial that generates (a
`generate_until` task such as gsm8k, RULER); a test checks this tuple against the modules."""
SINK_KINDS = ("softmax1", "learned_sink", "key_bias")
"""Kinds that add one extra softmax slot (a sink logit or a learned key with a zero value)."""
MLA_FIELDS = ("mla_q_rank", "mla_kv_rank", "mla_rope_dim")
"""The fields of `AttentionConfig` that only `kind: mla` uses."""
INIT_NEUTRAL = ("2sigmoid",)
"""Gate activations whose projection starts at zero so that the gate starts at exactly 1 (Marin's
2·sigmoid: the layer computes the ungated attention at initialisation); their `init_std` does not apply."""
PRESETS: dict[str, Callable[[], ModelConfig]] = {}
"""Size presets by name, registered by `gatedmodels.presets` (imported with the package)."""
Position = Literal["none", "G1", "G2", "G3", "G4", "G5"]


@dataclass(kw_only=True, frozen=True)
class GateConfig(Config):
    """One gating variant: `Y' = g(Y, act(X W))` at one position of the attention layer."""

    position: Position = "none"
    """Where the gate sits. G1: SDPA output per head (the paper's best); G2: value; G3: key;
    G4: query; G5: output of the dense projection o_proj. `none`: no gate (the baseline)."""
    kind: Literal["gate", "rmsnorm", "silu"] = "gate"
    """`gate`: a learned gate. The non-linearity controls of §4.1 (G1 only): `rmsnorm` applies a
    per-head RMSNorm to the SDPA output, `silu` applies SiLU(Y); neither is a gate."""
    granularity: Literal["elementwise", "headwise"] = "elementwise"
    """`elementwise`: one score per element of the gated tensor; `headwise`: one per head."""
    sharing: Literal["head_specific", "head_shared"] = "head_specific"
    """`head_specific`: every head has its own scores; `head_shared`: one score vector for all heads."""
    mode: Literal["multiplicative", "additive"] = "multiplicative"
    """`multiplicative`: Y * act(XW); `additive`: Y + SiLU(XW) (requires activation `silu`)."""
    activation: Literal["sigmoid", "silu", "ns_sigmoid", "softplus", "2sigmoid"] = "sigmoid"
    """`sigmoid` (sparse, bounded), `silu` (unbounded), `ns_sigmoid`: 0.5 + 0.5*sigmoid (non-sparse
    control), `softplus`: ln(1 + e^x), unbounded above (Poolside's Laguna), `2sigmoid`: 2*sigmoid in
    (0, 2), init-neutral: its projection starts at zero, so the gate starts at exactly 1 (Marin)."""
    input_dependent: bool = True
    """False: the scores are a learned, zero-initialised parameter, not a function of X (§4.2)."""
    init_std: float = 0.02
    """Std of the normal init of the gate projection (the official code initialises gate rows like
    q_proj). Does not apply to `2sigmoid`, whose projection starts at zero."""

    def problems(self) -> list[Issue]:
        out: list[Issue] = []
        if self.position == "none":
            return out
        if self.kind != "gate" and self.position != "G1":
            out.append(Issue("position", f"kind {self.kind!r} is a G1 control; got position {self.position!r}; allowed: G1"))
        if self.mode == "additive" and self.activation != "silu":
            out.append(
                Issue("activation", f"the additive gate is Y + SiLU(XW); got {self.activation!r} with mode 'additive'; allowed: silu")
            )
        if self.mode == "additive" and not self.input_dependent:
            out.append(Issue("mode", "an input-independent gate is multiplicative; got 'additive'; allowed: multiplicative"))
        if self.position == "G5" and self.granularity != "elementwise":
            out.append(
                Issue(
                    "granularity",
                    f"G5 gates the n x d_model dense output, which has no heads; got {self.granularity!r}; allowed: elementwise",
                )
            )
        if self.position == "G5" and self.sharing != "head_specific":
            out.append(
                Issue("sharing", f"G5 gates the n x d_model dense output, which has no heads; got {self.sharing!r}; allowed: head_specific")
            )
        if self.init_std < 0:
            out.append(Issue("init_std", f"got {self.init_std}; allowed: >= 0"))
        return out

    def normalized(self) -> GateConfig:
        """The canonical form: fields that do not apply are reset to their defaults, so two
        configs that build the same model compare equal (used to drop duplicate sweep trials)."""
        default = GateConfig()
        if self.position == "none":
            return default
        if self.kind != "gate":
            return GateConfig(position=self.position, kind=self.kind)
        activation = "silu" if self.mode == "additive" else self.activation
        return GateConfig(
            position=self.position,
            granularity=self.granularity,
            sharing=self.sharing,
            mode=self.mode,
            activation=activation,
            input_dependent=self.input_dependent,
            init_std=self.init_std if self.uses_init_std else default.init_std,
        )

    @property
    def uses_init_std(self) -> bool:
        """Whether `init_std` initialises anything: an input-dependent gate whose activation is
        not init-neutral (those start at zero, as the input-independent gate's table does)."""
        return self.input_dependent and self.activation not in INIT_NEUTRAL

    def unused_fields(self) -> list[str]:
        """Fields that do not apply to this gate (what `normalized()` resets): all but `position`
        for no gate, all but `position` and `kind` for a G1 control, the head fields of G5, the
        init of an input-independent gate. Run params leave them out."""
        names = [f for f in self.__dataclass_fields__ if f != "position"]
        if self.position == "none":
            return names
        if self.kind != "gate":
            return [f for f in names if f != "kind"]
        unused = ["granularity", "sharing"] if self.position == "G5" else []
        return unused + ([] if self.uses_init_std else ["init_std"])

    @staticmethod
    def normalize_dict(gate: dict) -> dict:
        """`normalized()` on a raw dict, before strict validation: a sweep grid may pair
        `position: none` with a granularity, or `mode: additive` with the default sigmoid;
        those fields do not apply and are reset, so the cell validates and dedupes."""
        if not isinstance(gate, dict):
            return gate
        position = gate.get("position", "none")
        if position == "none":
            return {"position": "none"}
        if gate.get("kind", "gate") != "gate":
            return {k: v for k, v in gate.items() if k in ("position", "kind")}
        out = dict(gate)
        if out.get("mode") == "additive":
            out["activation"] = "silu"
        if out.get("input_dependent") is False or out.get("activation") in INIT_NEUTRAL:
            out.pop("init_std", None)
        return out

    @property
    def label(self) -> str:
        """Short human name, e.g. `none`, `G1-elementwise`, `G1-headwise-shared`, `G1-rmsnorm`."""
        if self.position == "none":
            return "none"
        if self.kind != "gate":
            return f"{self.position}-{self.kind}"
        parts: list[str] = [self.position]
        if self.position != "G5":
            parts.append(self.granularity)
        if self.sharing == "head_shared":
            parts.append("shared")
        if self.mode == "additive":
            parts.append("additive")
        elif self.activation != "sigmoid":
            parts.append(self.activation.replace("_", "-"))
        if not self.input_dependent:
            parts.append("const")
        return "-".join(parts)


@dataclass(kw_only=True, frozen=True)
class AttentionConfig(Config):
    """The attention normalisation: plain softmax, or one of the attention-sink remedies.

    Every kind keeps the layer's projections, QK-norm, RoPE and gates; it changes only how the
    scores q k^T / sqrt(d) of the causal keys become weights (see `gatedmodels.attention_kinds`).
    """

    kind: Literal["softmax", "softmax1", "learned_sink", "softpick", "sigmoid", "key_bias", "mla"] = "softmax"
    """`softmax`: the baseline (fused SDPA). `softmax1`: softmax with an extra zero logit
    (off-by-one). `learned_sink`: an extra learned logit s_h per query head (gpt-oss's attention
    sinks). `key_bias`: an extra learned key k*_h per KV head with a zero value (Gu et al. 2024).
    `softpick`: ReLU(e^x - 1) / sum |e^x - 1| (Zuhri et al. 2025). `sigmoid`: sigmoid(x + b), not
    normalised (Gu et al. 2024). softpick and sigmoid materialise the (T x T) scores. `mla`:
    DeepSeek-V3's multi-head latent attention (softmax over low-rank query and key-value
    latents with a decoupled RoPE key; `mla_*` fields), Kimi-K3's with a G1 gate."""
    sink_init: float = 0.0
    """`learned_sink`: the initial value of every sink logit s_h."""
    sigmoid_bias: float = 0.0
    """`sigmoid`: the fixed bias b added to every score (Gu et al. use 0; Ramapuram et al. -log T)."""
    softpick_eps: float = 1e-6
    """`softpick`: epsilon of the denominator."""
    mla_q_rank: int = 0
    """`mla`: rank of the query latent (DeepSeek-V3's q_lora_rank, 1536 at d_model 7168); 0 projects
    the queries at full rank (DeepSeek-V2-Lite). At most d_model."""
    mla_kv_rank: int = 32
    """`mla`: rank of the key-value latent c_KV, the only per-token state besides the RoPE key
    (DeepSeek-V3's kv_lora_rank, 512). 1..d_model. Each head's key (no RoPE part) and value are
    `head_dim` wide (DeepSeek-V3's qk_nope_head_dim = v_head_dim)."""
    mla_rope_dim: int = 16
    """`mla`: width of the decoupled RoPE key, one shared by all heads, and of each head's RoPE
    query part (DeepSeek-V3's qk_rope_head_dim, 64); even with RoPE. A head's query-key width is
    head_dim + mla_rope_dim."""

    def problems(self) -> list[Issue]:
        out: list[Issue] = []
        if self.softpick_eps <= 0:
            out.append(Issue("softpick_eps", f"got {self.softpick_eps}; allowed: > 0"))
        if self.kind == "mla":
            for name, low in (("mla_q_rank", 0), ("mla_kv_rank", 1), ("mla_rope_dim", 0)):
                if getattr(self, name) < low:
                    out.append(Issue(name, f"got {getattr(self, name)}; allowed: >= {low}"))
        return out

    def normalized(self) -> AttentionConfig:
        """Fields that do not apply to `kind` reset to their defaults (two configs that build the
        same model compare equal, so sweep cells dedupe)."""
        default = AttentionConfig()
        return AttentionConfig(
            kind=self.kind,
            sink_init=self.sink_init if self.kind == "learned_sink" else default.sink_init,
            sigmoid_bias=self.sigmoid_bias if self.kind == "sigmoid" else default.sigmoid_bias,
            softpick_eps=self.softpick_eps if self.kind == "softpick" else default.softpick_eps,
            **({k: getattr(self, k) for k in MLA_FIELDS} if self.kind == "mla" else {}),
        )

    @property
    def label(self) -> str:
        return self.kind


@dataclass(kw_only=True, frozen=True)
class RopeConfig(Config):
    """Rotary position embedding, with optional YaRN scaling for contexts beyond training length."""

    base: float = 10000.0
    """RoPE base (theta). The paper extends context by raising it from 10k to 1M."""
    scaling: Literal["none", "yarn"] = "none"
    """`yarn`: NTK-by-parts interpolation (Peng et al. 2023) with attention temperature."""
    factor: float = 1.0
    """YaRN: context extension factor (new length / original length)."""
    original_max_len: int = 4096
    """YaRN: the context length the model was trained at."""
    beta_fast: float = 32.0
    """YaRN: rotations above which dimensions are extrapolated (kept as is)."""
    beta_slow: float = 1.0
    """YaRN: rotations below which dimensions are fully interpolated."""

    def problems(self) -> list[Issue]:
        out = []
        if self.base <= 1:
            out.append(Issue("base", f"got {self.base}; allowed: > 1"))
        if self.scaling == "yarn" and self.factor < 1:
            out.append(Issue("factor", f"got {self.factor}; allowed: >= 1 with scaling 'yarn'"))
        if self.original_max_len < 1:
            out.append(Issue("original_max_len", f"got {self.original_max_len}; allowed: >= 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class MoEConfig(Config):
    """Mixture-of-experts FFN (Qwen3-MoE style: softmax routing, top-k, load-balancing loss)."""

    n_experts: int = 0
    """Number of routed experts; 0 means a dense SwiGLU FFN."""
    top_k: int = 2
    """Experts per token."""
    expert_dim: int = 256
    """Hidden width of each SwiGLU expert."""
    norm_topk_prob: bool = True
    """Renormalise the top-k routing probabilities to sum to 1."""
    aux_loss_coef: float = 0.01
    """Weight of the Switch-style load-balancing loss added to the training loss."""
    impl: Literal["auto", "grouped", "loop"] = "auto"
    """`grouped`: tokens sorted by expert, all experts in two grouped matmuls (`torch._grouped_mm`
    on CUDA, padded `bmm` elsewhere); `loop`: one matmul per expert (the reference; the same
    outputs to fp32 rounding); `auto`: `grouped` where `torch._grouped_mm` runs, `loop` on CPU,
    where the per-expert matmuls are already most of the time and the padded path is slower."""

    def problems(self) -> list[Issue]:
        out = []
        if self.n_experts < 0:
            out.append(Issue("n_experts", f"got {self.n_experts}; allowed: >= 0"))
        if self.n_experts and not 1 <= self.top_k <= self.n_experts:
            out.append(Issue("top_k", f"got {self.top_k}; allowed: 1..n_experts ({self.n_experts})"))
        if self.n_experts and self.expert_dim < 1:
            out.append(Issue("expert_dim", f"got {self.expert_dim}; allowed: >= 1"))
        return out


@dataclass(kw_only=True, frozen=True)
class ModelConfig(Config):
    """A Qwen3-style decoder: pre-norm RMSNorm blocks, GQA with optional QK-norm, SwiGLU or MoE FFN.

    Build from a preset with `ModelConfig.preset("tiny", n_layers=3)` or, in YAML,
    `model: {size: tiny, n_layers: 3, gate: {position: G1}}`.
    """

    size: str = "custom"
    """Preset this config starts from (see `gatedmodels.presets`); `custom` when built by hand."""
    vocab_size: int = 512
    """Vocabulary size. Trials set it from the tokenizer."""
    d_model: int = 64
    """Width of the residual stream."""
    n_layers: int = 2
    """Number of decoder blocks."""
    n_heads: int = 4
    """Query heads."""
    n_kv_heads: int = 4
    """Key/value heads (grouped-query attention); must divide n_heads."""
    head_dim: int = 16
    """Width of each attention head."""
    ffn_dim: int = 192
    """Hidden width of the SwiGLU FFN (ignored by MoE layers, which use moe.expert_dim)."""
    max_seq_len: int = 256
    """Longest sequence for learned positions; RoPE tables grow on demand."""
    position_encoding: Literal["rope", "learned", "nope"] = "rope"
    """`rope` (Qwen3), `learned` absolute positions, or `nope` (no positional signal)."""
    rope: RopeConfig = field(default_factory=RopeConfig)
    """RoPE settings (base, YaRN)."""
    qk_norm: bool = True
    """RMSNorm on each query and key head before RoPE (Qwen3)."""
    tie_embeddings: bool = True
    """Share the token embedding with the LM head."""
    norm_eps: float = 1e-6
    """RMSNorm epsilon."""
    init_std: float = 0.02
    """Std of the normal init of linear and embedding weights."""
    moe: MoEConfig = field(default_factory=MoEConfig)
    """Mixture-of-experts settings; `moe.n_experts: 0` keeps the FFN dense."""
    gate: GateConfig = field(default_factory=GateConfig)
    """The gated-attention variant."""
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    """The attention normalisation (softmax, or an attention-sink remedy); composes with `gate`."""

    def problems(self) -> list[Issue]:
        out = []
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq_len"):
            if getattr(self, name) < 1:
                out.append(Issue(name, f"got {getattr(self, name)}; allowed: >= 1"))
        if out:
            return out
        if self.n_heads % self.n_kv_heads:
            out.append(Issue("n_kv_heads", f"got {self.n_kv_heads}; must divide n_heads ({self.n_heads})"))
        if self.position_encoding == "rope" and self.head_dim % 2:
            out.append(Issue("head_dim", f"got {self.head_dim}; RoPE needs an even head_dim"))
        gate = self.gate
        if self.attention.kind in SINK_KINDS and gate.position == "G1" and gate.kind == "rmsnorm":
            out.append(
                Issue(
                    "attention.kind",
                    f"{self.attention.kind!r} scales each head's output by (1 - its sink share), and the per-head RMSNorm "
                    "of gate.kind 'rmsnorm' at G1 divides that scale out: the model would be softmax + rmsnorm; "
                    f"allowed with gate.kind 'rmsnorm': {', '.join(k for k in ATTENTION_KINDS if k not in SINK_KINDS)}",
                )
            )
        if self.attention.kind == "mla":
            out += self._mla_problems()
        if self.size != "custom" and self.size not in PRESETS:
            out.append(Issue("size", f"got {self.size!r}{did_you_mean(self.size, list(PRESETS))}; allowed: custom, {', '.join(PRESETS)}"))
        return out

    def _mla_problems(self) -> list[Issue]:
        """What multi-head latent attention needs of the rest of the model."""
        a, D, H, mla = self.attention, self.d_model, self.n_heads, "allowed with attention.kind 'mla'"
        wide = [n for n in ("mla_q_rank", "mla_kv_rank") if getattr(a, n) > D]
        out = [
            Issue(f"attention.{n}", f"got {getattr(a, n)}: a latent wider than d_model compresses nothing; allowed: <= {D}") for n in wide
        ]
        if self.position_encoding == "rope" and (a.mla_rope_dim < 2 or a.mla_rope_dim % 2):
            out.append(Issue("attention.mla_rope_dim", f"got {a.mla_rope_dim}; the decoupled RoPE key needs an even width >= 2"))
        if self.n_kv_heads != H:
            out.append(
                Issue("n_kv_heads", f"got {self.n_kv_heads}; MLA expands its latent into a key and value per query head; {mla}: {H}")
            )
        if self.qk_norm:
            out.append(Issue("qk_norm", f"got true; MLA normalises its query and key-value latents instead (as DeepSeek-V3); {mla}: false"))
        return out

    @classmethod
    def prepare(cls, data: dict, path: str) -> dict:
        """`size: NAME` starts from that preset; the other keys override it."""
        size = data.get("size")
        if size is None or size == "custom":
            return data
        if not isinstance(size, str) or size not in PRESETS:
            where = f"{path}.size" if path else "size"
            raise ConfigError([Issue(where, f"got {size!r}{did_you_mean(size, list(PRESETS))}; allowed: custom, {', '.join(PRESETS)}")])
        return deep_merge(PRESETS[size]().to_dict(), data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """A named size preset with field overrides: `ModelConfig.preset("tiny", gate={"position": "G1"})`."""
        return cls.from_dict({"size": name, **{k: (v.to_dict() if isinstance(v, Config) else v) for k, v in overrides.items()}})

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim
