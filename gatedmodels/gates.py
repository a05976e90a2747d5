"""Gate modules and the one registry that maps a `GateConfig` to a module.

The attention layer calls a gate slot at each of the five positions of Qiu et al. 2025 (Fig. 1):

    G4 query, G3 key, G2 value   (after projection and QK-norm, before RoPE)
    G1 SDPA output               (per head, before concatenation and o_proj)
    G5 dense output              (after o_proj)

Every slot holds `NoGate` except the configured position, so `forward` stays straight-line.
Gate scores come from the block's normalised input X: input-dependent gates read their slice of
the attention layer's fused projection `X [Wq | Wk | Wv | Wg]`, as the official code packs the
gate into q_proj (REFERENCE §1). The gate at G2/G3 is computed from X at the key/value token,
at G1/G4/G5 from X at the query token; in self-attention both are the token's own X.

G2/G3/G4 sit after QK-norm (an improvement over gating the raw projection: a headwise gate
placed before a per-head RMSNorm would be cancelled by it).

Shape legend: B batch, T time, S score features of the gate, h score heads (H or 1 when shared),
w score width (site width, or 1 headwise), H site heads, W site width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import GateConfig, ModelConfig
from .costs import Site, gate_sites, score_shape
from .layers import RMSNorm
from .probes import LayerProbe

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
    "ns_sigmoid": lambda s: 0.5 + 0.5 * torch.sigmoid(s),  # non-sparse control (§4.2)
    "softplus": F.softplus,  # Laguna (transformers LagunaAttention): ln(1 + e^x), unbounded above
    "2sigmoid": lambda s: 2.0 * torch.sigmoid(s),  # Marin: 1 at a zero score, so init-neutral with zero rows
}
"""The registry of gate activations (`GateConfig.activation`); their FLOPs per score are in
`gatedmodels.costs.ACTIVATION_FLOPS`."""


class NoGate(nn.Module):
    """The default slot: returns its input unchanged."""

    score_features = 0

    def forward(self, y: torch.Tensor, scores: torch.Tensor, rec: LayerProbe | None) -> torch.Tensor:
        return y


class InputGate(nn.Module):
    """`Y * act(XW)` or `Y + SiLU(XW)`, W being this gate's rows of the fused projection."""

    def __init__(self, gate: GateConfig, site: Site):
        super().__init__()
        self.shape = score_shape(gate, site)
        self.score_features = self.shape[0] * self.shape[1]
        self.act = ACTIVATIONS[gate.activation]
        self.additive = gate.mode == "additive"

    def forward(self, y_BTHW: torch.Tensor, scores_BTS: torch.Tensor, rec: LayerProbe | None) -> torch.Tensor:
        g_BThw = self.act(scores_BTS.unflatten(-1, self.shape))
        if rec is not None:
            rec.gate = g_BThw.detach()
        return y_BTHW + g_BThw if self.additive else y_BTHW * g_BThw


class ConstantGate(nn.Module):
    """Input-independent gate: a learned (h, w) parameter, zero-initialised (starts at act(0))."""

    score_features = 0

    def __init__(self, gate: GateConfig, site: Site):
        super().__init__()
        self.logits_hw = nn.Parameter(torch.zeros(score_shape(gate, site)))
        self.act = ACTIVATIONS[gate.activation]

    def forward(self, y_BTHW: torch.Tensor, scores_BTS: torch.Tensor, rec: LayerProbe | None) -> torch.Tensor:
        g_hw = self.act(self.logits_hw).to(y_BTHW.dtype)
        if rec is not None:
            rec.gate = g_hw.detach().expand(*y_BTHW.shape[:2], *g_hw.shape)
        return y_BTHW * g_hw


class HeadNorm(nn.Module):
    """Control: per-head RMSNorm of the SDPA output (non-linearity, no gate)."""

    score_features = 0

    def __init__(self, gate: GateConfig, site: Site, eps: float = 1e-6):
        super().__init__()
        self.norm = RMSNorm(site.width, eps)

    def forward(self, y_BTHW: torch.Tensor, scores_BTS: torch.Tensor, rec: LayerProbe | None) -> torch.Tensor:
        return self.norm(y_BTHW)


class SiLUOnly(nn.Module):
    """Control: SiLU(Y) on the SDPA output (non-linearity, no gate)."""

    score_features = 0

    def __init__(self, gate: GateConfig, site: Site):
        super().__init__()

    def forward(self, y_BTHW: torch.Tensor, scores_BTS: torch.Tensor, rec: LayerProbe | None) -> torch.Tensor:
        return F.silu(y_BTHW)


def _learned(gate: GateConfig, site: Site) -> nn.Module:
    return InputGate(gate, site) if gate.input_dependent else ConstantGate(gate, site)


#: the registry: gate kind -> module factory
GATE_KINDS: dict[str, Callable[[GateConfig, Site], nn.Module]] = {
    "gate": _learned,
    "rmsnorm": HeadNorm,
    "silu": SiLUOnly,
}


def build_gate_slots(cfg: ModelConfig) -> nn.ModuleDict:
    """One module per position: the configured gate at its position, `NoGate` elsewhere."""
    slots: dict[str, nn.Module] = {pos: NoGate() for pos in gate_sites(cfg)}
    if cfg.gate.position != "none":
        slots[cfg.gate.position] = GATE_KINDS[cfg.gate.kind](cfg.gate, gate_sites(cfg)[cfg.gate.position])
    return nn.ModuleDict(slots)
