"""The task-specific functions themselves: projected attention, adapters, the PAL mask."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from pal_by_hand import attention_by_hand

from pal_lightning.modeling import AdapterConfig
from pal_lightning.modeling.methods.pals import (
    MASK_VALUE,
    ProjectedAttention,
    TaskAdapter,
    additive_mask,
    pff_inner_size,
)


def _task_adapter(config: AdapterConfig, hidden_size: int, size: int, layers: list[int]) -> torch.nn.Module:
    """The module ``config``'s method builds for an encoder of width ``hidden_size``."""
    return config.adapter_method.build(config, SimpleNamespace(hidden_size=hidden_size), size, tuple(layers))


def _manual_attention(module: ProjectedAttention, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return attention_by_hand(*module.qkv(x).split(x.shape[-1], dim=-1), module.num_heads, keep=keep)


def test_projected_attention_is_multi_head_attention_without_output_projection():
    torch.manual_seed(0)
    module = ProjectedAttention(12, 3)
    assert [n for n, _ in module.named_parameters()] == ["qkv.weight", "qkv.bias"]  # no output projection
    x = torch.randn(2, 5, 12)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    got = module(x, additive_mask(keep.long(), x.dtype))
    torch.testing.assert_close(got, _manual_attention(module, x, keep), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"^size 10 is not divisible by num_heads 4$"):
        ProjectedAttention(10, 4)


def test_a_mask_of_another_dtype_reaches_the_attention_in_the_scores_dtype(monkeypatch):
    """Fused GPU kernels need the additive mask in the dtype of the scores: a float32 mask given to a
    float64 attention is cast before SDPA sees it (the CPU kernel would accept it uncast)."""
    torch.manual_seed(0)
    module = ProjectedAttention(12, 3).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    keep = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kwargs):
        seen.append((q.dtype, None if attn_mask is None else attn_mask.dtype))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    got = module(x, additive_mask(keep.long(), torch.float32))
    assert seen == [(torch.float64, torch.float64)]
    torch.testing.assert_close(got, _manual_attention(module, x, keep))


def test_additive_mask():
    assert additive_mask(None, torch.float32) is None
    # no padding: zeros, not None (deciding that would wait for the device)
    assert additive_mask(torch.ones(2, 3, dtype=torch.long), torch.float32).flatten().tolist() == [0.0] * 6
    mask = additive_mask(torch.tensor([[1, 1, 0]]), torch.float32)
    assert mask.shape == (1, 1, 1, 3)
    assert mask.flatten().tolist() == [0.0, 0.0, MASK_VALUE]
    # an all-padding row stays finite
    module = ProjectedAttention(4, 2)
    out = module(torch.randn(1, 3, 4), additive_mask(torch.zeros(1, 3, dtype=torch.long), torch.float32))
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="2-D"):
        additive_mask(torch.ones(1, 1, 3), torch.float32)
    # built on the padding mask's device (meta: no memory, but a device of its own)
    assert (
        additive_mask(torch.ones(2, 3, dtype=torch.long, device="meta"), torch.float16).device.type == "meta"
    )


def test_pff_inner_size_holds_the_weights_of_a_fused_qkv():
    # two d_s x 3 d_s / 2 matrices = 3 d_s^2 (the fused Q, K, V), rounded down, at least 1
    assert [pff_inner_size(s) for s in (1, 2, 3, 9, 204)] == [1, 3, 4, 13, 306]


def test_low_rank_is_up_of_down():
    adapter = _task_adapter(AdapterConfig(method="low_rank", init="random"), 16, 4, [0, 1])
    h = torch.randn(2, 3, 16)
    torch.testing.assert_close(adapter(1, h, None), adapter.up["1"](adapter.down["1"](h)))
    assert adapter.attention is None
    assert not isinstance(
        _task_adapter(AdapterConfig(method="pa_on_top", num_heads=2), 16, 4, []), TaskAdapter
    )


def test_pals_share_projections_across_layers():
    adapter = _task_adapter(AdapterConfig(init="random", size=4, num_heads=2), 16, 4, [0, 1, 2])
    h = torch.randn(2, 3, 16)
    expected = adapter.up(adapter.attention["2"](adapter.down(h), None))
    torch.testing.assert_close(adapter(2, h, None), expected)
    assert isinstance(adapter.down, torch.nn.Linear)


@pytest.mark.parametrize("init", ["zero", "random"])
def test_initialisation(init):
    torch.manual_seed(0)
    adapter = _task_adapter(AdapterConfig(init=init, size=60, num_heads=6), 96, 60, [0])
    assert adapter.down.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert adapter.attention["0"].qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert adapter.down.bias.abs().sum() == 0
    if init == "zero":
        assert adapter.up.weight.abs().sum() == 0 and adapter.up.bias.abs().sum() == 0
        assert adapter(0, torch.randn(1, 2, 96), None).abs().sum() == 0
    else:
        assert adapter.up.weight.std().item() == pytest.approx(0.02, rel=0.1)
