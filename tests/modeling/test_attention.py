"""modeling/attention.py: SDPA in fp32 on a CPU under autocast, unchanged elsewhere."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pal_lightning.modeling import attention as A
from pal_lightning.modeling.encoder import MultiTaskEncoder
from pal_lightning.testing import TINY_BERT


def _by_hand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) + mask) V in float64."""
    q, k, v, mask = (t.double() for t in (q, k, v, mask))
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, dim=-1) @ v


class _Spy:
    """Records the dtypes and autocast state each call of F.scaled_dot_product_attention saw."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[torch.dtype, torch.dtype | None, bool]] = []
        real = F.scaled_dot_product_attention

        def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None, **kw: Any) -> Any:
            mask_dtype = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else None
            self.calls.append((q.dtype, mask_dtype, torch.is_autocast_enabled("cpu")))
            return real(q, k, v, attn_mask=attn_mask, **kw)

        monkeypatch.setattr(F, "scaled_dot_product_attention", spy)


def test_fp32_is_torchs_sdpa_and_half_on_the_cpu_runs_in_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 5)
    mask[0, ..., 3:] = -1e4  # the first example's last two positions are padding
    expected = _by_hand(q, k, v, mask)
    out = A.attention(q, k, v, attn_mask=mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=0, atol=0)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-6)

    spy = _Spy(monkeypatch)
    half = [t.bfloat16() for t in (q, k, v)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = A.attention(*half, attn_mask=mask.bfloat16())
    assert out.dtype == torch.bfloat16  # back in the autocast dtype for the next projection
    assert spy.calls == [(torch.float32, torch.float32, False)]  # fp32, autocast off around it
    # the only rounding left is the inputs' and the output's bf16 (8 bits of mantissa)
    torch.testing.assert_close(out.double(), _by_hand(*half, mask), rtol=1e-2, atol=1e-2)
    boolean = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    A.attention(*half, attn_mask=boolean)
    assert spy.calls[-1] == (torch.float32, torch.bool, False)  # a boolean mask stays boolean
    assert not A.upcast_on_cpu(torch.zeros(1, dtype=torch.float64))


def test_the_encoder_uses_it_for_berts_attention_and_the_pals(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(TINY_BERT, ["a"], adapter="pals", size=8, num_heads=2, init="random")
    model.eval()
    assert model.config._attn_implementation == A.NAME
    ids = torch.randint(5, 90, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, 4:] = 0
    with torch.no_grad():
        reference = model(ids, mask, task="a")
        spy = _Spy(monkeypatch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, mask, task="a")
    layers = TINY_BERT["num_hidden_layers"]
    # one BERT attention and one PAL attention per layer, every one in fp32 with autocast off
    assert len(spy.calls) == 2 * layers
    assert {(q, on) for q, _, on in spy.calls} == {(torch.float32, False)}
    assert all(m in (None, torch.float32, torch.bool) for _, m, _ in spy.calls)
    torch.testing.assert_close(out.float(), reference, rtol=0.05, atol=0.05)  # bf16 projections only
    explicit = MultiTaskEncoder.from_config(TINY_BERT, ["a"], attn_implementation="eager")
    assert explicit.config._attn_implementation == "eager"  # a named other kernel is kept
