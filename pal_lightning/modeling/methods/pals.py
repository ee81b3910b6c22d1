"""Projected Attention Layers and their variants: ``TS_{l,t}(h) = V^D_t g_{l,t}(V^E_t h)`` (Stickland &
Murray, ICML 2019; docs/design.md §2). g: attention in d_s without output projection (``pals``,
``pals_no_sharing``), a feed-forward network (``pff``) or the identity (``low_rank``). A task's modules
live in one :class:`TaskAdapter` that the layers never register (safetensors refuses shared tensors).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from pal_lightning.modeling.attention import attention, upcast_on_cpu
from pal_lightning.modeling.methods.base import AdapterMethod
from pal_lightning.modeling.methods.batched import BatchedModules, RowWeights, batch_exactly

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pal_lightning.modeling.methods.config import AdapterConfig

InnerKind = Literal["attention", "ffn", "identity"]

INIT_STD = 0.02
"""Standard deviation of the N(0, 0.02) initialisation (BERT's initializer_range, used by the reference)."""


@torch.no_grad()
def init_like_bert(root: nn.Module, std: float = INIT_STD, zero: nn.Module | None = None) -> None:
    """BERT's initialisation of new weights: every ``nn.Linear`` below ``root`` N(0, ``std``) with a zero
    bias, every ``nn.LayerNorm`` weight 1 and bias 0; then every ``nn.Linear`` below ``zero`` (a V^D that
    starts at 0) all zeros."""
    for module in root.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:  # ModernBERT's LayerNorms have none
                nn.init.zeros_(module.bias)
    for module in () if zero is None else zero.modules():
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


class ProjectedAttention(nn.Module):
    """g_{l,t}: multi-head self-attention in d_s (``size``, ``num_heads`` dividing it) with a fused
    ``Linear(d_s, 3 d_s)`` for Q, K, V and no output projection."""

    def __init__(self, size: int, num_heads: int) -> None:
        super().__init__()
        if size % num_heads:
            raise ValueError(f"size {size} is not divisible by num_heads {num_heads}")
        self.size = size
        self.num_heads = num_heads
        self.qkv = nn.Linear(size, 3 * size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``[B, T, d_s] -> [B, T, d_s]``; ``mask``: additive, broadcastable to ``[B, heads, T, T]``."""
        b, t, _ = x.shape
        return self.attend_rows(x.reshape(b * t, self.size), b, t, mask).view(b, t, self.size)

    def attend_rows(self, x: torch.Tensor, b: int, t: int, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` on the positions as rows, ``[B T, d_s] -> [B T, d_s]`` (a 3-D Linear would
        dispatch two more views on the host)."""
        return attend(self.qkv(x), b, t, self.num_heads, mask)


def attend(qkv: torch.Tensor, b: int, t: int, num_heads: int, mask: torch.Tensor | None) -> torch.Tensor:
    """The attention of :class:`ProjectedAttention` from its fused projection ``qkv`` (``[B T, 3 d_s]``, or
    ``[B, T, 3 d_s]``) to ``[B T, d_s]``."""
    size = qkv.shape[-1] // 3
    head_dim = size // num_heads
    dtype = qkv.dtype
    upcast = upcast_on_cpu(qkv)
    if upcast:  # one cast of Q, K and V together, where attention() would cast each of them
        qkv = qkv.float()
    # [B T, 3 d_s] -> [B, T, 3, H, hd] -> 3 x [B, H, T, hd]
    q, k, v = qkv.view(b, t, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    if upcast:  # the product in fp32 on a CPU under autocast (modeling/attention.py says why)
        if mask is not None and mask.is_floating_point():
            mask = mask.float()  # a no-op for the mask scores_dtype gives on the CPU
        with torch.autocast("cpu", enabled=False):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:  # the mask is in the scores' dtype already (additive_mask, scores_dtype)
        out = attention(q, k, v, attn_mask=mask)
    # [B, H, T, hd] -> [B T, d_s]; a view where the kernel wrote the heads side by side (the CPU's)
    return out.transpose(1, 2).reshape(b * t, size).to(dtype)


def pff_inner_size(size: int) -> int:
    """Inner width of ``pff``'s g, ``floor(3 d_s / 2)``: its two matrices then cost what the PAL attention's
    fused Q, K, V cost."""
    return max(1, (3 * size) // 2)


class ProjectedFeedForward(nn.Module):
    """g_{l,t} of ``pff``: ``W_2 GELU(W_1 x + b_1) + b_2`` in d_s (``size``; inner :func:`pff_inner_size`)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        inner = pff_inner_size(size)
        self.fc1 = nn.Linear(size, inner)
        self.fc2 = nn.Linear(inner, size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, d_s] -> [B, T, d_s]``, position by position (``mask`` is unused: no mixing over T)."""
        return self.fc2(F.gelu(self.fc1(x)))


class TaskAdapter(nn.Module):
    """One task's PALs in ``layers`` (a :class:`~pal_lightning.modeling.methods.where.BesideModule`):
    ``down`` (V^E) and ``up`` (V^D), one pair or, unless ``shared``, one per layer (``down.<layer>``), and
    g per layer, ``attention.<layer>.qkv`` or ``ffn.<layer>.fc1/fc2`` (``inner``). ``init="zero"`` starts
    V^D at zero; ``gelu_after_up`` is the reference code's GELU after V^D."""

    def __init__(
        self,
        hidden_size: int,
        size: int,
        layers: Iterable[int],
        *,
        shared: bool,
        inner: InnerKind,
        num_heads: int = 6,
        init: str = "zero",
        gelu_after_up: bool = False,
    ) -> None:
        super().__init__()
        self.layers: tuple[int, ...] = tuple(layers)
        self.gelu_after_up = gelu_after_up
        self.shared = shared
        self.down: nn.Module
        self.up: nn.Module
        if self.shared:
            self.down = nn.Linear(hidden_size, size)
            self.up = nn.Linear(size, hidden_size)
        else:
            self.down = nn.ModuleDict({str(i): nn.Linear(hidden_size, size) for i in self.layers})
            self.up = nn.ModuleDict({str(i): nn.Linear(size, hidden_size) for i in self.layers})
        self.attention: nn.ModuleDict | None = None
        if inner == "attention":
            self.attention = nn.ModuleDict({str(i): ProjectedAttention(size, num_heads) for i in self.layers})
        self.ffn: nn.ModuleDict | None = None
        if inner == "ffn":
            self.ffn = nn.ModuleDict({str(i): ProjectedFeedForward(size) for i in self.layers})
        self.reset_parameters(init)

    @torch.no_grad()
    def reset_parameters(self, init: str = "zero") -> None:
        """Weights N(0, 0.02), biases 0; with ``init="zero"`` V^D (weight and bias) is 0 so TS_t = 0."""
        init_like_bert(self, zero=self.up if init == "zero" else None)  # the shared Linear, or each layer's

    def _proj(self, which: nn.Module, layer: int) -> nn.Module:
        return which[str(layer)] if isinstance(which, nn.ModuleDict) else which  # per layer unless shared

    def linear(self, part: str, layer: int) -> nn.Linear:
        """The Linear ``part`` of ``layer``: ``down``, ``up``, ``qkv`` (attention g) or ``fc1``/``fc2`` (ffn g)."""
        if part in ("down", "up"):
            return cast(nn.Linear, self._proj(getattr(self, part), layer))
        inner = self.attention if part == "qkv" else self.ffn
        assert inner is not None, f"{part} of a TaskAdapter without that g"
        return cast(nn.Linear, getattr(inner[str(layer)], part))

    def forward(self, layer: int, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """TS_{l,t}(h) = V^D g_l(V^E h), ``[B, T, d]``, for the input h of layer ``layer``."""
        b, t, d = hidden.shape
        x = self._proj(self.down, layer)(hidden.reshape(b * t, d))  # positions as rows until V^D
        if self.attention is not None:
            g = cast("ProjectedAttention", self.attention[str(layer)])
            x = g.attend_rows(x, b, t, mask)
        if self.ffn is not None:
            x = self.ffn[str(layer)](x)
        out = self._proj(self.up, layer)(x)
        return (F.gelu(out) if self.gelu_after_up else out).view(b, t, d)


class BatchedTaskAdapters(BatchedModules):
    """Every present task's :class:`TaskAdapter` at once on a mixed batch's rows (:class:`~pal_lightning.
    modeling.methods.batched.BatchedModules`; a task without PALs: its rows' term zero): each Linear is one
    batched product over the rows, the attention g already runs row by row."""

    def _linear(self, part: str, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self._rows.linear([None if a is None else a.linear(part, layer) for a in self._tasks], x)

    def forward(self, layer: int, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Each row's TS_{l,t}(h), ``[B, T, d]``, as its task's :meth:`TaskAdapter.forward` gives it."""
        self._rows.check(hidden, f"layer {layer}")
        b, t, _ = hidden.shape
        x = self._linear("down", layer, hidden)
        template = self._template
        if template.attention is not None:
            heads = cast(ProjectedAttention, template.attention[str(layer)]).num_heads
            x = attend(self._linear("qkv", layer, x), b, t, heads, mask).view(b, t, -1)
        if template.ffn is not None:
            x = self._linear("fc2", layer, F.gelu(self._linear("fc1", layer, x)))
        out = self._linear("up", layer, x)
        return F.gelu(out) if template.gelu_after_up else out


MASK_VALUE = -10000.0
"""Added to the scores of padded keys: exp(-1e4) is exactly 0 in float32, and unlike the dtype's minimum
the value stays finite in float16/bfloat16 after an autocast cast, so all-padding rows never give NaN."""


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The PAL attention mask ``[B, 1, 1, T]`` of ``dtype`` from the ``[B, T]`` padding mask: 0 for a real
    key, :data:`MASK_VALUE` for padding; ``None`` without a mask. Zeros without padding: a check would wait
    for the device and break a compiled graph."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise ValueError(f"expected a 2-D attention mask [B, T], got shape {tuple(attention_mask.shape)}")
    drop = attention_mask[:, None, None, :] == 0
    return torch.zeros(drop.shape, dtype=dtype, device=attention_mask.device).masked_fill_(drop, MASK_VALUE)


def scores_dtype(weight_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype of the PAL attention scores: the autocast dtype of ``device`` where autocast is on (the
    projections then run in it), else ``weight_dtype``; but fp32 under a half autocast dtype on the CPU,
    where the attention product runs in fp32 (:func:`~pal_lightning.modeling.attention.upcast_on_cpu`)."""
    if torch.is_autocast_enabled(device.type):
        dtype = torch.get_autocast_dtype(device.type)
        return torch.float32 if device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) else dtype
    return weight_dtype


class _BesideLayers(AdapterMethod):
    """The PAL family: a :class:`TaskAdapter` beside the selected layers, V^E/V^D around an inner g."""

    has_up_projection = True
    shared: bool = True
    inner: InnerKind = "attention"

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        return TaskAdapter(
            int(encoder_config.hidden_size),
            size,
            layers,
            shared=self.shared,
            inner=self.inner,
            num_heads=config.num_heads,
            init=config.init,
            gelu_after_up=config.activation == "gelu",
        )

    def batch_rows(self, modules: Sequence[nn.Module | None], rows: RowWeights) -> nn.Module | None:
        return batch_exactly(TaskAdapter, BatchedTaskAdapters, modules, rows)


class Pals(_BesideLayers):
    """``pals``: V^E/V^D shared by a task's layers, an attention g per layer: ``2 d d_s + k 3 d_s^2``."""

    name = "pals"
    size_at_768 = 204
    headed = True

    def size_at_768_for(self, config: AdapterConfig) -> int:
        # the paper widens shared PALs' d_s to 276 when only half of the layers get them (the same budget)
        return super().size_at_768_for(config) if config.placement == "all" or not self.shared else 276

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 2 * d * size + k * 3 * size**2


class PalsNoSharing(Pals):
    """``pals_no_sharing``: PALs with V^E/V^D per layer. Weights: ``k (2 d d_s + 3 d_s^2)``."""

    name = "pals_no_sharing"
    size_at_768 = 84
    shared = False

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return k * (2 * d * size + 3 * size**2)


class LowRank(_BesideLayers):
    """``low_rank``: g the identity, V^E/V^D per layer. Weights: ``k 2 d d_s``."""

    name = "low_rank"
    size_at_768 = 100
    shared = False
    inner = "identity"

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return k * 2 * d * size


class ProjectedFFN(_BesideLayers):
    """``pff``: as ``pals`` with g a feed-forward network in d_s. Weights: ``2 d d_s + k 2 d_s m`` with
    m = floor(3 d_s / 2) (:func:`pff_inner_size`), so ``3 d_s^2`` per layer for even d_s."""

    name = "pff"
    size_at_768 = 204
    inner = "ffn"

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 2 * d * size + k * 2 * size * pff_inner_size(size)
