"""The token-sorted MoE (all experts in batched matmuls) against the per-expert loop it replaced."""

from __future__ import annotations

import pytest
import torch

from gatedmodels import GatedTransformer
from gatedmodels.config import ModelConfig
from gatedmodels.layers import MoE


def moe_cfg(**moe) -> ModelConfig:
    return ModelConfig.from_dict(
        {
            "d_model": 64,
            "n_layers": 2,
            "n_heads": 4,
            "n_kv_heads": 2,
            "vocab_size": 97,
            "moe": {"n_experts": 8, "top_k": 2, "expert_dim": 32, **moe},
        }
    )


def grads(module: torch.nn.Module, x: torch.Tensor, impl: str):
    module.impl = impl
    module.zero_grad()
    x = x.detach().clone().requires_grad_()
    y = module(x)
    (y.square().sum() + module.aux_loss).backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("top_k, norm", [(1, True), (2, True), (3, False)])
def test_grouped_equals_the_loop_forward_and_backward(top_k, norm):
    torch.manual_seed(0)
    m = MoE(moe_cfg(top_k=top_k, norm_topk_prob=norm))
    x = torch.randn(3, 17, 64)
    y0, gx0, g0 = grads(m, x, "loop")
    y1, gx1, g1 = grads(m, x, "grouped")
    torch.testing.assert_close(y1, y0, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(gx1, gx0, atol=1e-6, rtol=1e-5)
    for name, g in g1.items():
        torch.testing.assert_close(g, g0.get(name, torch.zeros_like(g)), atol=1e-6, rtol=1e-5, msg=name)


def test_experts_that_get_no_token_and_a_single_token():
    torch.manual_seed(1)
    m = MoE(moe_cfg(n_experts=8, top_k=1))
    with torch.no_grad():  # route every token to expert 3, except one to expert 5
        m.router.weight.zero_()
        m.router.weight[3] = 1.0
    x = torch.rand(1, 9, 64) + 0.1
    x[0, 4] = -x[0, 4]
    with torch.no_grad():
        m.router.weight[5] = -1.0
    y0, gx0, g0 = grads(m, x, "loop")
    y1, gx1, g1 = grads(m, x, "grouped")
    torch.testing.assert_close(y1, y0)
    torch.testing.assert_close(gx1, gx0)
    # the loop leaves idle experts without a gradient; the batched path gives them zeros (DeepSpeed
    # flattens gradients into buckets, where a missing gradient is zeros too)
    assert set(g0) < set(g1)
    for name, g in g1.items():
        torch.testing.assert_close(g, g0.get(name, torch.zeros_like(g)), msg=name)
    assert set(g0) == {n for n, g in g1.items() if g.abs().sum() > 0} | {"router.weight"}


def test_a_whole_moe_model_gives_the_same_logits_and_loss_either_way():
    torch.manual_seed(2)
    cfg = moe_cfg()
    model = GatedTransformer(cfg)
    ids = torch.randint(0, 97, (2, 24))
    out = {}
    for impl in ("loop", "grouped"):
        for layer in model.modules():
            if isinstance(layer, MoE):
                layer.impl = impl
        out[impl] = model(ids)
    torch.testing.assert_close(out["grouped"], out["loop"], atol=1e-5, rtol=1e-5)
    assert GatedTransformer(moe_cfg(impl="loop")).state_dict().keys() == model.state_dict().keys(), "the same parameters"


def test_impl_is_validated():
    from gatedmodels.typedconfig import ConfigError

    with pytest.raises(ConfigError, match="moe.impl: got 'fused'"):
        moe_cfg(impl="fused")


def test_auto_runs_grouped_only_where_grouped_mm_runs(monkeypatch):
    """`impl: auto` (the default): the loop on a CPU, where it is the faster one
    (benchmarks/moe_grouped.py), the grouped path where `torch._grouped_mm` can run. There, a
    per-segment matmul standing in for `torch._grouped_mm` checks the CUDA path's segment
    bookkeeping (offsets from the per-expert counts) against the loop."""
    torch.manual_seed(3)
    m = MoE(moe_cfg())
    assert m.impl == "auto"
    x = torch.randn(2, 5, 64)
    calls = []
    real = MoE._grouped

    def spy(self, *args):
        calls.append("grouped")
        return real(self, *args)

    monkeypatch.setattr(MoE, "_grouped", spy)
    y_cpu = m(x)
    assert calls == [], "CPU: the loop"
    monkeypatch.setattr(MoE, "_grouped_mm_ok", lambda self, x: True)
    monkeypatch.setattr(
        torch,
        "_grouped_mm",
        lambda a, b, offs: torch.cat([s @ b[e] for e, s in enumerate(torch.tensor_split(a, offs[:-1].long()))]),
        raising=False,
    )
    y_gpu_path = m(x)
    assert calls == ["grouped"]
    torch.testing.assert_close(y_gpu_path, y_cpu, atol=1e-6, rtol=1e-5)
