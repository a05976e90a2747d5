"""An independent reference decoder for parity tests.

Written from the equations, not from gatedmodels' code: RMSNorm by its formula, RoPE through
complex multiplication of (x_i, x_{i+d/2}) pairs, attention as an explicit loop over heads with
a causal mask, SwiGLU by its formula. It reads the weights of a `GatedTransformer` and supports
the ungated model and the multiplicative, head-specific G1 gate (elementwise or headwise; sigmoid,
softplus or 2·sigmoid), which is all the parity tests need.
"""

from __future__ import annotations

import math

import torch


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_complex(x_THd, base):
    T, H, d = x_THd.shape
    half = d // 2
    freqs = 1.0 / base ** (torch.arange(half, dtype=torch.float64) * 2 / d)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * freqs[None, :]  # (T, half)
    rot = torch.polar(torch.ones_like(angles), angles)  # e^{i t f}
    z = torch.complex(x_THd[..., :half].double(), x_THd[..., half:].double()) * rot[:, None, :]
    return torch.cat([z.real, z.imag], dim=-1).to(x_THd.dtype)


def reference_logits(model, ids_T: torch.Tensor) -> torch.Tensor:
    """Logits (T, V) for one sequence, computed the slow, obvious way."""
    cfg = model.cfg
    H, K, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    x = model.embed.weight[ids_T]
    T = x.shape[0]
    for block in model.blocks:
        a = block.attn
        h = rms(x, block.attn_norm.weight, cfg.norm_eps)
        W = a.wqkv.weight
        q = (h @ W[: H * d].T).view(T, H, d)
        k = (h @ W[H * d : H * d + K * d].T).view(T, K, d)
        v = (h @ W[H * d + K * d : H * d + 2 * K * d].T).view(T, K, d)
        if cfg.qk_norm:
            q = rms(q, a.q_norm.weight, cfg.norm_eps)
            k = rms(k, a.k_norm.weight, cfg.norm_eps)
        q, k = rope_complex(q, cfg.rope.base), rope_complex(k, cfg.rope.base)
        heads = []
        for head in range(H):
            kv = head // (H // K)
            out = torch.zeros(T, d)
            for i in range(T):
                scores = torch.stack([q[i, head] @ k[j, kv] for j in range(i + 1)]) / math.sqrt(d)
                p = torch.softmax(scores, dim=0)
                out[i] = (p[:, None] * v[: i + 1, kv]).sum(0)
            heads.append(out)
        y = torch.stack(heads, dim=1)  # (T, H, d)
        if cfg.gate.position == "G1":
            assert cfg.gate.sharing == "head_specific" and cfg.gate.mode == "multiplicative"
            act = {
                "sigmoid": lambda s: 1.0 / (1.0 + torch.exp(-s)),
                "softplus": lambda s: torch.log1p(torch.exp(s)),
                "2sigmoid": lambda s: 2.0 / (1.0 + torch.exp(-s)),
            }[cfg.gate.activation]
            g = act(h @ W[H * d + 2 * K * d :].T).view(T, H, -1)  # (T, H, d) elementwise, (T, H, 1) headwise
            y = y * g
        x = x + y.reshape(T, H * d) @ a.wo.weight.T
        h = rms(x, block.ffn_norm.weight, cfg.norm_eps)
        F_ = block.ffn.w2.weight.shape[1]
        up = h @ block.ffn.w13.weight.T
        x = x + (torch.nn.functional.silu(up[:, :F_]) * up[:, F_:]) @ block.ffn.w2.weight.T
    x = rms(x, model.norm.weight, cfg.norm_eps)
    return x @ model.embed.weight.T
