"""Task-specific functions TS_t: Projected Attention Layers and their variants.

For task t and layer l (Stickland & Murray, ICML 2019; docs/design.md §2)::

    TS_{l,t}(h) = V^D_t · g_{l,t}( V^E_t · h )          h: [B, T, d]

* ``V^E`` ("down", d -> d_s) and ``V^D`` ("up", d_s -> d) are linear maps with bias.
* ``g`` is a multi-head self-attention in d_s with its own fused Q, K, V per layer and task and **no
  output projection** (``pals``, ``pals_no_sharing``), a small feed-forward network
  ``W_2 GELU(W_1 x)`` in d_s (``pff``, the "projected feed-forward" variant), or the identity (``low_rank``).
* ``pals`` and ``pff`` share V^E/V^D across all layers of a task; ``pals_no_sharing`` and ``low_rank`` keep
  one pair per layer.

Activation: the reference code applies a GELU after V^D. By default we implement the equation as stated
(no activation after V^D, no dropout on TS): TS is an additive correction to the residual stream, and a
GELU would bound it below by about -0.17 for no stated reason. ``AdapterConfig.activation="gelu"`` restores the
reference's GELU so that its effect can be measured. With the default zero-initialised V^D both choices
start at TS = 0 (GELU(0) = 0); the difference only matters during training.

The four methods (:class:`Pals`, :class:`PalsNoSharing`, :class:`LowRank`, :class:`ProjectedFFN`) differ
only in those two choices and in their default size; they are registered in
:mod:`pal_lightning.modeling.methods`.

All modules of a task live in one :class:`TaskAdapter`, stored once in the encoder's ``adapters``
ModuleDict keyed by task; the BERT layers receive the adapter at forward time and never register it, so
no tensor is shared between modules (safetensors refuses to save shared tensors).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from pal_lightning.modeling.attention import attention, upcast_on_cpu
from pal_lightning.modeling.methods.base import AdapterMethod

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pal_lightning.modeling.methods.config import AdapterConfig

InnerKind = Literal["attention", "ffn", "identity"]

INIT_STD = 0.02
"""Standard deviation of the N(0, 0.02) initialisation (BERT's initializer_range, used by the reference)."""


@torch.no_grad()
def init_like_bert(root: nn.Module, std: float = INIT_STD) -> None:
    """BERT's initialisation of new weights: every ``nn.Linear`` below ``root`` N(0, ``std``) with a zero
    bias, every ``nn.LayerNorm`` weight 1 and bias 0."""
    for module in root.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:  # ModernBERT's LayerNorms have none
                nn.init.zeros_(module.bias)


@torch.no_grad()
def zero_linears(root: nn.Module) -> None:
    """Zero the weight and bias of every ``nn.Linear`` below ``root`` (a V^D that starts TS_t at 0)."""
    for module in root.modules():
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


class ProjectedAttention(nn.Module):
    """g_{l,t}: multi-head self-attention in d_s without output projection.

    ``g(x) = concat_i softmax(Q_i K_i^T / sqrt(d_s / heads) + mask) V_i`` with ``[Q, K, V] = x W_qkv + b``.
    Q, K and V are one fused ``Linear(d_s, 3 d_s)`` so the projection is a single matmul; the attention
    itself is :func:`torch.nn.functional.scaled_dot_product_attention` (through
    :func:`~pal_lightning.modeling.attention.attention`: in fp32 on a CPU under autocast, where it is faster).

    Args:
        size: d_s.
        num_heads: number of heads; must divide ``size``.
    """

    def __init__(self, size: int, num_heads: int) -> None:
        super().__init__()
        if size % num_heads:
            raise ValueError(f"size {size} is not divisible by num_heads {num_heads}")
        self.size = size
        self.num_heads = num_heads
        self.qkv = nn.Linear(size, 3 * size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Attend over the sequence.

        Args:
            x: ``[B, T, d_s]``.
            mask: additive float mask broadcastable to ``[B, heads, T, T]`` (0 keep, large negative drop),
                or ``None`` when every position is real.

        Returns:
            ``[B, T, d_s]``.
        """
        b, t, _ = x.shape
        return self.attend_rows(x.reshape(b * t, self.size), b, t, mask).view(b, t, self.size)

    def attend_rows(self, x: torch.Tensor, b: int, t: int, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`forward` on the ``B x T`` positions as rows, ``[B T, d_s] -> [B T, d_s]``.

        A PAL keeps its positions as rows from V^E to V^D: a linear map of a 3-D tensor dispatches a view
        before and after its matmul, one more pair of operators per projection on the host.
        """
        head_dim = self.size // self.num_heads
        qkv = self.qkv(x)
        dtype = qkv.dtype
        upcast = upcast_on_cpu(qkv)
        if upcast:  # one cast of Q, K and V together, where attention() would cast each of them
            qkv = qkv.float()
        # [B T, 3 d_s] -> [B, T, 3, H, hd] -> 3 x [B, H, T, hd]
        q, k, v = qkv.view(b, t, 3, self.num_heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if upcast:  # the product in fp32 on a CPU under autocast (modeling/attention.py says why)
            if mask is not None and mask.is_floating_point():
                mask = mask.float()  # a no-op for the mask scores_dtype gives on the CPU
            with torch.autocast("cpu", enabled=False):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # the mask is in the scores' dtype already (additive_mask, scores_dtype)
            out = attention(q, k, v, attn_mask=mask)
        # [B, H, T, hd] -> [B T, d_s]; a view where the kernel wrote the heads side by side (the CPU's)
        return out.transpose(1, 2).reshape(b * t, self.size).to(dtype)


def pff_inner_size(size: int) -> int:
    """Inner width of the projected feed-forward g of ``pff``: ``3 d_s / 2`` (rounded down).

    Two ``d_s x 3 d_s / 2`` matrices hold 3 d_s^2 weights, what the PAL attention's fused Q, K, V hold, so
    ``pff`` and ``pals`` of one d_s cost the same and compare attention against a feed-forward g at equal
    size.
    """
    return max(1, (3 * size) // 2)


class ProjectedFeedForward(nn.Module):
    """g_{l,t} of ``pff``: ``W_2 GELU(W_1 x + b_1) + b_2`` in d_s (inner width :func:`pff_inner_size`).

    Args:
        size: d_s.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        inner = pff_inner_size(size)
        self.fc1 = nn.Linear(size, inner)
        self.fc2 = nn.Linear(inner, size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, d_s] -> [B, T, d_s]``, position by position (``mask`` is unused: no mixing over T)."""
        return self.fc2(F.gelu(self.fc1(x)))


class TaskAdapter(nn.Module):
    """All task-specific parameters of one task t, for every selected layer.

    Parameter layout (names are what ``state_dict`` and the task-weights files contain)::

        pals:             down (V^E), up (V^D), attention.<layer>.qkv
        pals_no_sharing:  down.<layer>, up.<layer>, attention.<layer>.qkv
        low_rank:         down.<layer>, up.<layer>
        pff:              down (V^E), up (V^D), ffn.<layer>.fc1, ffn.<layer>.fc2

    Args:
        hidden_size: d, the encoder width.
        size: d_s, already resolved (:meth:`~pal_lightning.modeling.methods.config.AdapterConfig.resolved_size`).
        layers: indices of the layers that get TS_t.
        shared: one V^E/V^D pair for all layers (``pals``, ``pff``) rather than one per layer.
        inner: g: ``"attention"`` (:class:`ProjectedAttention`), ``"ffn"`` (:class:`ProjectedFeedForward`)
            or ``"identity"``.
        num_heads: heads of the attention g.
        init: ``"zero"`` (V^D starts at 0) or ``"random"``.
        gelu_after_up: a GELU after V^D (the reference code's choice).
    """

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
        init_like_bert(self)
        if init == "zero":
            zero_linears(self.up)  # the shared Linear, or each layer's

    def _proj(self, which: nn.Module, layer: int) -> nn.Module:
        return which[str(layer)] if isinstance(which, nn.ModuleDict) else which  # per layer unless shared

    def forward(self, layer: int, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """TS_{l,t}(h) = V^D g_l(V^E h) for layer ``layer``.

        Args:
            layer: index of the BERT layer (must be one of ``self.layers``).
            hidden: the layer input h, ``[B, T, d]``.
            mask: the PAL attention mask (see :func:`additive_mask`), or ``None``.

        Returns:
            ``[B, T, d]``, to be added into the residual sum before the layer's output LayerNorm.
        """
        b, t, d = hidden.shape
        x = self._proj(self.down, layer)(hidden.reshape(b * t, d))  # positions as rows until V^D
        if self.attention is not None:
            g = cast("ProjectedAttention", self.attention[str(layer)])
            x = g.attend_rows(x, b, t, mask)
        if self.ffn is not None:
            x = self.ffn[str(layer)](x)
        out = self._proj(self.up, layer)(x)
        return (F.gelu(out) if self.gelu_after_up else out).view(b, t, d)


MASK_VALUE = -10000.0
"""Added to the scores of padded keys: exp(-1e4) is exactly 0 in float32, and unlike the dtype's minimum
the value stays finite in float16/bfloat16 after an autocast cast, so all-padding rows never give NaN."""


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The PAL attention mask, built once per forward from the 2-D padding mask.

    The PAL attention builds its own mask instead of reusing BERT's, whose format depends on the attention
    implementation (sdpa, eager, flash) in transformers 5.x.

    Args:
        attention_mask: ``[B, T]`` with 1 for real tokens and 0 for padding, or ``None``.
        dtype: dtype of the attention scores (under autocast the autocast dtype, so that no layer casts
            the mask again: :func:`scores_dtype`).

    Returns:
        ``[B, 1, 1, T]`` with 0 where a key may be attended and :data:`MASK_VALUE` where not, or ``None``
        when no padding mask is given. A mask without padding is still returned as zeros: asking the
        device whether every token is real would wait for it (one host synchronisation per forward) and
        break a ``torch.compile`` graph, for a faster SDPA kernel in the rare batch without padding. An
        additive mask (not a boolean one) keeps rows that are entirely padding finite instead of NaN.
    """
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


# ---------------------------------------------------------------------------------------- the methods
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


class Pals(_BesideLayers):
    """``pals``: V^E/V^D shared by a task's layers, a multi-head attention g per layer.

    Weights per task: ``2 d d_s + k 3 d_s^2`` (1,811,520 at BERT-base with d_s = 204, k = 12)."""

    name = "pals"
    size_at_768 = 204
    headed = True
    uses_heads = True

    def size_at_768_for(self, config: AdapterConfig) -> int:
        # the paper widens d_s to 276 when only half of the layers get PALs (about the same budget)
        return 204 if config.placement == "all" else 276

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 2 * d * size + k * 3 * size**2


class PalsNoSharing(Pals):
    """``pals_no_sharing``: PALs with V^E/V^D per layer. Weights: ``k (2 d d_s + 3 d_s^2)``."""

    name = "pals_no_sharing"
    size_at_768 = 84
    shared = False

    def size_at_768_for(self, config: AdapterConfig) -> int:
        return 84

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
