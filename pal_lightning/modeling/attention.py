"""Scaled dot-product attention in fp32 for half inputs on the CPU, where torch's bf16 kernel is slower
(benchmarks/RESULTS.md, "bf16 on the CPU"); elsewhere unchanged. :func:`register` adds it to
transformers as ``"pal_sdpa"``."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

#: The transformers attention-interface name of :func:`sdpa_forward`.
NAME = "pal_sdpa"
_HALF = (torch.bfloat16, torch.float16)


def upcast_on_cpu(q: torch.Tensor) -> bool:
    """Whether attention over ``q`` runs in fp32 (half-precision inputs on the CPU)."""
    return q.device.type == "cpu" and q.dtype in _HALF


def _float(mask: torch.Tensor | None) -> torch.Tensor | None:
    return mask.float() if mask is not None and mask.is_floating_point() else mask


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None, **options: Any
) -> torch.Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention`, in fp32 for half inputs on the CPU."""
    if not upcast_on_cpu(q):
        if attn_mask is not None and attn_mask.is_floating_point() and attn_mask.dtype != q.dtype:
            attn_mask = attn_mask.to(q.dtype)  # autocast: the scores are in the lower precision
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **options)
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=_float(attn_mask), **options
        )
    return out.to(q.dtype)


def sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, Any]:
    """transformers' ``sdpa`` attention function, in fp32 for half inputs on the CPU (same signature)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not upcast_on_cpu(query):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    with torch.autocast("cpu", enabled=False):
        out, weights = sdpa_attention_forward(
            module, query.float(), key.float(), value.float(), _float(attention_mask), **kwargs
        )
    return out.to(query.dtype), weights


def register() -> str:
    """Register :func:`sdpa_forward` (and sdpa's mask format) as ``"pal_sdpa"``; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, sdpa_forward)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return NAME
