"""Weight layouts: gatesweep's `GatedTransformer` <-> the Hugging Face layouts it computes exactly.

The layouts differ only in how rows are arranged (REFERENCE §7):

| layout       | what                                    | attention rows                                        | norms     |
|--------------|-----------------------------------------|-------------------------------------------------------|-----------|
| gatesweep    | `wqkv` = [Wq | Wk | Wv | Wg], `w13` = [W1 | W3] | q head-major, then the gate rows head-major (G1) | w         |
| `qwen3`      | Qwen3ForCausalLM (ungated, dense)       | q_proj, k_proj, v_proj                                | w         |
| `qwen3_moe`  | Qwen3MoeForCausalLM (ungated, MoE)      | as qwen3; the router is `mlp.gate`                    | w         |
| `qwen3_next` | Qwen3NextForCausalLM, every layer full attention, partial rotary 1.0 (G1 elementwise, dense or MoE) | q_proj interleaved per head: [q_h | g_h] | 1 + w (stored zero-centred) |
| `laguna`     | LagunaForCausalLM (G1 softplus, headwise or elementwise; dense or MoE with top-1) | q_proj, and the gate rows as their own g_proj | w |
| `official`   | the paper's modeling_qwen3.py (qiuzh20/gated_attention), flags `headwise_attn_output_gate` / `elementwise_attn_output_gate` (dense) | q_proj grouped per KV head: [q of its G query heads | their gate rows] | w |

`to_hf` maps a `ModelConfig` and its state dict to a config.json dict (`hf_config`) and
HF-named tensors (`hf_tensors`); `from_hf` maps back and refuses, in one line naming the
field, anything gatesweep cannot compute (linear-attention layers, partial rotary, shared experts, sliding windows, other RoPE types,
biases, other activations). MoE: the router's load-balancing loss is converted between the two
conventions (`aux_coef_to_hf`). What each layout does its own way (where q and the gate rows
go, zero-centred norms, MoE tensors beyond gatesweep's, its config.json fields) is one entry of
`mappings.MAPPINGS`; `choice` says which layout a model takes, `fields` reads config.json
fields, `laguna` holds Laguna's own rules. Shape legend: H query heads, K KV heads, G = H / K, d head width,
D d_model, F FFN width, E experts, S gate rows.
"""

from .choice import FORMATS, LAYOUTS, OFFICIAL_NOTE, Layout, formats_for, hf_layout_for, layout_for_format, layout_problem, variant
from .from_hf import HF_DEFAULTS, architecture_key, config_from_hf, detect_layout, ignorable, state_from_hf
from .mappings import MAPPINGS, LayoutMapping
from .to_hf import aux_coef_from_hf, aux_coef_to_hf, hf_config, hf_tensors, to_hf

__all__ = [
    "FORMATS",
    "HF_DEFAULTS",
    "LAYOUTS",
    "MAPPINGS",
    "OFFICIAL_NOTE",
    "Layout",
    "LayoutMapping",
    "architecture_key",
    "aux_coef_from_hf",
    "aux_coef_to_hf",
    "config_from_hf",
    "detect_layout",
    "formats_for",
    "hf_config",
    "hf_layout_for",
    "hf_tensors",
    "ignorable",
    "layout_for_format",
    "layout_problem",
    "state_from_hf",
    "to_hf",
    "variant",
]
