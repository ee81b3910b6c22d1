"""Task-specific functions on top of the shared encoder (Stickland & Murray 2019, section 3).

Instead of adding TS_t beside every layer, these variants leave the shared layers alone and apply one
task-specific block to the output h of the last layer:

* ``pa_on_top`` (:class:`ProjectedAttentionOnTop`): projected attention on top::

      h_out = h + V^D_t B_t(V^E_t h),     B_t = K blocks  x -> LN(x + W_O Attn(x))  in width d_s

  V^E/V^D project to and from d_s as in PALs; each block is a multi-head self-attention in d_s with an
  output projection and a LayerNorm, as the reference code's top attention (K = 6 blocks, d_s = 204 at
  width 768; 12 heads there, ``num_heads`` here so that d_s scales with the width). With N(0, 0.02)
  weights a block costs ``4 d_s^2`` weights, so a task costs ``2 d d_s + 6 * 4 d_s^2`` = 1,312,128 at
  BERT-base: eight tasks make 1.10x one BERT-base, the paper's figure.

  One difference from the reference, on purpose: the reference *replaces* h by ``V^D B(V^E h)``; we add it
  to h (a residual). The heads then read the full-width encoder output, and with the default zero V^D
  step 0 is exactly the pretrained encoder, as with PALs (``init="random"`` draws V^D too).
* ``bert_layer_on_top`` (:class:`BertLayerOnTop`): a whole BERT layer per task, ``h_out = Layer_t(h)``
  (d^2-sized: about 7.1M weights per task at BERT-base). ``init="zero"`` starts it as a copy of the
  encoder's last pretrained layer (see :class:`~pal_lightning.modeling.methods.config.AdapterConfig` ``init``);
  ``init="random"`` as a fresh BERT layer like the reference. No start makes it the identity.

Both live in the encoder's ``adapters`` ModuleDict under the task's name, like PALs, so every tool that
handles "a task's own parameters" (accounting, task-only weights, export, parameter groups) handles them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig

from pal_lightning.modeling.families import family_of
from pal_lightning.modeling.methods.base import AdapterMethod
from pal_lightning.modeling.methods.pals import INIT_STD, ProjectedAttention, init_like_bert, zero_linears
from pal_lightning.modeling.methods.where import LayerRunner, Where

if TYPE_CHECKING:
    from pal_lightning.modeling.methods.config import AdapterConfig

TOP_ATTENTION_BLOCKS = 6
"""K, the projected attention blocks stacked by ``pa_on_top`` (the reference code uses 6)."""


class ProjectedAttentionBlock(nn.Module):
    """One block of ``pa_on_top``: ``x -> LN(x + W_O Attn(x))`` in width d_s (no feed-forward).

    Args:
        size: d_s.
        num_heads: heads of the attention; must divide ``size``.
        eps: LayerNorm epsilon (the encoder's ``layer_norm_eps``).
    """

    def __init__(self, size: int, num_heads: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.attention = ProjectedAttention(size, num_heads)
        self.out = nn.Linear(size, size)
        self.norm = nn.LayerNorm(size, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``[B, T, d_s] -> [B, T, d_s]``; ``mask`` as for :class:`ProjectedAttention`."""
        return self.norm(x + self.out(self.attention(x, mask)))


class ProjectedAttentionOnTop(nn.Module):
    """``pa_on_top`` for one task: ``h + act(V^D B(V^E h))`` after the last layer.

    Parameter names: ``down`` (V^E), ``up`` (V^D), ``blocks.<k>.attention.qkv``, ``blocks.<k>.out``,
    ``blocks.<k>.norm``.

    Args:
        config: the PAL configuration (``adapter="pa_on_top"``).
        hidden_size: d.
        size: d_s, resolved.
        eps: LayerNorm epsilon of the blocks.
    """

    def __init__(self, config: AdapterConfig, hidden_size: int, size: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, size)
        self.up = nn.Linear(size, hidden_size)
        self.blocks = nn.ModuleList(
            ProjectedAttentionBlock(size, config.num_heads, eps) for _ in range(TOP_ATTENTION_BLOCKS)
        )
        self.gelu_after_up = config.activation == "gelu"
        self.reset_parameters(config.init)

    @torch.no_grad()
    def reset_parameters(self, init: str = "zero") -> None:
        """Weights N(0, 0.02), biases 0, LayerNorms 1/0; with ``init="zero"`` V^D is 0 (h_out = h)."""
        init_like_bert(self)
        if init == "zero":
            zero_linears(self.up)

    def forward(
        self, hidden: torch.Tensor, run_layer: LayerRunner, pal_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The task's encoder output from the last layer's output ``hidden`` (``[B, T, d]``).

        Args:
            hidden: output of the last shared layer.
            run_layer: runs an encoder layer as the last one was run (unused here).
            pal_mask: the additive PAL mask (:func:`~pal_lightning.modeling.methods.pals.additive_mask`).
        """
        x = self.down(hidden)
        for block in self.blocks:
            x = block(x, pal_mask)
        x = self.up(x)
        return hidden + (F.gelu(x) if self.gelu_after_up else x)


class BertLayerOnTop(nn.Module):
    """``bert_layer_on_top`` for one task: a full encoder layer (of the encoder's family) applied to the
    last layer's output.

    Parameter names: ``layer.<the family's layer names>`` (``layer.attention.self.query.weight``, ... for
    BERT).

    Args:
        config: the PAL configuration (``adapter="bert_layer_on_top"``).
        bert_config: the encoder's config (the layer has its family, width, heads, FFN size and attention
            implementation).
        layer_index: index recorded on the layer (``num_hidden_layers``: one above the last).
    """

    def __init__(self, config: AdapterConfig, bert_config: PretrainedConfig, layer_index: int) -> None:
        super().__init__()
        # a pre-LN family's layer index picks its attention kind (ModernBERT); the last layer's kind
        self.layer = family_of(bert_config).new_layer(bert_config, layer_index - 1)
        self.init = config.init
        self.initializer_range = float(getattr(bert_config, "initializer_range", INIT_STD))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """A fresh BERT layer: weights N(0, initializer_range), biases 0, LayerNorms 1/0 (BERT's init)."""
        init_like_bert(self, std=self.initializer_range)

    @torch.no_grad()
    def start_from(self, last_layer: nn.Module) -> None:
        """With ``init="zero"``, copy ``last_layer`` (the encoder's last, pretrained layer); else nothing."""
        if self.init == "zero":
            self.layer.load_state_dict(last_layer.state_dict())

    def forward(
        self, hidden: torch.Tensor, run_layer: LayerRunner, pal_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """``Layer_t(hidden)``, called with the arguments the encoder's last layer received (its mask, and
        position information where the family passes it to every layer)."""
        return run_layer(self.layer, hidden)


class ProjectedAttentionOnTopMethod(AdapterMethod):
    """``pa_on_top``: :class:`ProjectedAttentionOnTop` after the last layer.

    Weights per task: ``2 d d_s + 6 * 4 d_s^2`` (Q, K, V and the output projection of each block)."""

    name = "pa_on_top"
    where = Where.TOP
    size_at_768 = 204
    headed = True
    uses_heads = True
    has_up_projection = True
    placeable = False

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        eps = float(getattr(encoder_config, "layer_norm_eps", 1e-12))
        return ProjectedAttentionOnTop(config, int(encoder_config.hidden_size), size, eps)

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 2 * d * size + TOP_ATTENTION_BLOCKS * 4 * size**2


class BertLayerOnTopMethod(AdapterMethod):
    """``bert_layer_on_top``: :class:`BertLayerOnTop`, a whole encoder layer per task after the last one.

    Weights per task: ``4 d^2 + 2 d d_ff`` (Q, K, V and the attention output; the feed-forward network)."""

    name = "bert_layer_on_top"
    where = Where.TOP
    size_at_768 = None
    placeable = False
    starts_as_encoder = False  # a copy of the last layer, applied once more

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        return BertLayerOnTop(config, encoder_config, int(encoder_config.num_hidden_layers))

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 4 * d * d + 2 * d * d_ff
