"""A PAL's term in few operators (issue 32): the same numbers as a straightforward implementation, and a
bound on what one PAL dispatches to the host.

The reference below applies the modules as one would write them first: every projection on the 3-D
hidden states through ``nn.Linear``, Q, K and V split with ``chunk``, the heads attended one by one with
an explicit softmax. The library's path keeps the positions as rows from V^E to V^D and casts Q, K and V
once; it must agree to 1e-6 in float32, forward and gradients.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pal_by_hand import Dispatched, attention_by_hand
from torch import nn

from pal_lightning.modeling.methods.pals import ProjectedAttention, TaskAdapter, additive_mask

D, SIZE, HEADS, LAYERS = 16, 8, 2, (0, 1)


def _reference_attention(module: ProjectedAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return attention_by_hand(*module.qkv(x).chunk(3, dim=-1), module.num_heads, mask=mask)


def _reference(adapter: TaskAdapter, layer: int, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    def pick(which: nn.Module) -> nn.Module:
        return which[str(layer)] if isinstance(which, nn.ModuleDict) else which

    x = pick(adapter.down)(h)
    if adapter.attention is not None:
        x = _reference_attention(adapter.attention[str(layer)], x, mask)
    if adapter.ffn is not None:
        ffn = adapter.ffn[str(layer)]
        x = ffn.fc2(F.gelu(ffn.fc1(x)))
    out = pick(adapter.up)(x)
    return F.gelu(out) if adapter.gelu_after_up else out


def _adapter(inner: str, shared: bool, gelu: bool = False) -> TaskAdapter:
    torch.manual_seed(0)
    return TaskAdapter(
        D, SIZE, LAYERS, shared=shared, inner=inner, num_heads=HEADS, init="random", gelu_after_up=gelu
    )


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    h = torch.randn(3, 5, D)
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    return h, additive_mask(padding, torch.float32)


@pytest.mark.parametrize(
    ("inner", "shared", "gelu"),
    [
        ("attention", True, False),
        ("attention", False, True),
        ("identity", False, False),
        ("ffn", True, False),
    ],
    ids=["pals", "pals_no_sharing_gelu", "low_rank", "pff"],
)
def test_the_rows_path_equals_the_straightforward_one_forward_and_backward(
    inner: str, shared: bool, gelu: bool
) -> None:
    adapter = _adapter(inner, shared, gelu)
    h, mask = _inputs()
    for layer in LAYERS:
        got_h, ref_h = h.clone().requires_grad_(), h.clone().requires_grad_()
        got, expected = adapter(layer, got_h, mask), _reference(adapter, layer, ref_h, mask)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
        weights = torch.randn_like(got)
        params = [p for p in adapter.parameters()]
        got_grads = torch.autograd.grad((got * weights).sum(), [got_h, *params], allow_unused=True)
        ref_grads = torch.autograd.grad((expected * weights).sum(), [ref_h, *params], allow_unused=True)
        for a, b in zip(got_grads, ref_grads, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_projected_attention_on_its_own_equals_the_reference_on_a_non_contiguous_input() -> None:
    """``ProjectedAttention.forward`` (the blocks on top call it) reshapes whatever it is given."""
    torch.manual_seed(0)
    module = ProjectedAttention(SIZE, HEADS)
    _, mask = _inputs()
    x = torch.randn(5, 3, SIZE).transpose(0, 1)  # [3, 5, d_s], not contiguous
    torch.testing.assert_close(module(x, mask), _reference_attention(module, x, mask), atol=1e-6, rtol=1e-6)


def test_one_pal_layer_dispatches_few_operators_forward_and_backward() -> None:
    """One PAL (V^E, fused Q/K/V, one attention, V^D) with the positions as rows: 4 views in the forward
    (rows in, heads split, heads joined, rows out) where the 3-D projections took 8, and nothing cast in
    float32. The bounds are today's counts on this CPU (the 3-D projections: 19 forward, 48 backward): a
    change that adds operators fails here."""
    adapter = _adapter("attention", shared=True)
    h, mask = _inputs()
    h.requires_grad_()
    with Dispatched() as forward:
        out = adapter(0, h, mask)
    with Dispatched() as backward:
        out.sum().backward()
    assert forward.names["view"] <= 4 and forward.names["addmm"] == 3, forward.names
    assert forward.names["_to_copy"] == 0
    assert sum(forward.names.values()) <= 15, forward.names
    assert sum(backward.names.values()) <= 44, backward.names


def test_under_cpu_autocast_q_k_and_v_are_cast_to_float32_once() -> None:
    """On the CPU under bf16 autocast the attention product runs in float32 (``modeling/attention.py``):
    Q, K and V go up in one cast of the fused projection (it took three), the heads come down in one."""
    adapter = _adapter("attention", shared=True)
    h, mask = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        adapter(0, h, mask)  # the shared weights' casts are cached from here on (autocast's weight cache)
        with Dispatched() as ops:
            out = adapter(1, h, mask)
    # h to bf16, layer 1's qkv weight and bias, Q/K/V up together, the heads down
    assert ops.names["_to_copy"] == 5, ops.names
    assert out.dtype == torch.bfloat16
    # the outputs are ~4e-4 and the padding moves them by ~3e-4: a tolerance at their scale (bf16's three
    # digits) sees a mask left out of the fp32 product
    torch.testing.assert_close(out.float(), _reference(adapter, 1, h, mask), atol=2e-5, rtol=2e-2)
