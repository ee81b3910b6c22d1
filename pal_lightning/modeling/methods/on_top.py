"""Per-task blocks on top of the shared encoder (Stickland & Murray 2019, section 3).

* ``pa_on_top``: ``h_out = h + V^D_t B_t(V^E_t h)``, B_t six blocks ``x -> LN(x + W_O Attn(x))`` in d_s.
  The reference replaces h by ``V^D B(V^E h)``; the residual here makes a zero V^D start at the
  pretrained encoder and lets the heads read the full-width output.
* ``bert_layer_on_top``: a whole encoder layer per task, ``h_out = Layer_t(h)``; ``init="zero"`` starts it
  as a copy of the last pretrained layer, ``init="random"`` as a fresh one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig

from pal_lightning.modeling.families import family_of
from pal_lightning.modeling.methods.base import AdapterMethod
from pal_lightning.modeling.methods.pals import INIT_STD, ProjectedAttention, init_like_bert
from pal_lightning.modeling.methods.where import LayerRunner, Where

if TYPE_CHECKING:
    from pal_lightning.modeling.methods.config import AdapterConfig

TOP_ATTENTION_BLOCKS = 6
"""K, the projected attention blocks stacked by ``pa_on_top`` (the reference code uses 6)."""


class ProjectedAttentionBlock(nn.Module):
    """One block of ``pa_on_top``: ``x -> LN(x + W_O Attn(x))`` in width d_s (``size``)."""

    def __init__(self, size: int, num_heads: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.attention = ProjectedAttention(size, num_heads)
        self.out = nn.Linear(size, size)
        self.norm = nn.LayerNorm(size, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``[B, T, d_s] -> [B, T, d_s]``; ``mask`` as for :class:`ProjectedAttention`."""
        return self.norm(x + self.out(self.attention(x, mask)))


class ProjectedAttentionOnTop(nn.Module):
    """``pa_on_top`` for one task (a :class:`~pal_lightning.modeling.methods.where.TopModule`):
    ``h + act(V^D B(V^E h))``; ``down`` (V^E), ``up`` (V^D) and ``blocks.<k>``."""

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
        init_like_bert(self, zero=self.up if init == "zero" else None)

    def forward(
        self, hidden: torch.Tensor, run_layer: LayerRunner, attention_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The task's output from the last layer's ``hidden`` (``run_layer`` is unused)."""
        x = self.down(hidden)
        for block in self.blocks:
            x = block(x, attention_bias)
        x = self.up(x)
        return hidden + (F.gelu(x) if self.gelu_after_up else x)


class BertLayerOnTop(nn.Module):
    """``bert_layer_on_top`` for one task (a :class:`~pal_lightning.modeling.methods.where.TopModule`): a
    ``layer`` of the encoder's family (``encoder_config``) after the last one (``layer_index``)."""

    def __init__(self, config: AdapterConfig, encoder_config: PretrainedConfig, layer_index: int) -> None:
        super().__init__()
        # a pre-LN family's layer index picks its attention kind (ModernBERT); the last layer's kind
        self.layer = family_of(encoder_config).new_layer(encoder_config, layer_index - 1)
        self.init = config.init
        self.initializer_range = float(getattr(encoder_config, "initializer_range", INIT_STD))
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
        self, hidden: torch.Tensor, run_layer: LayerRunner, attention_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """``Layer_t(hidden)``, with the arguments the encoder's last layer received."""
        return run_layer(self.layer, hidden)


class ProjectedAttentionOnTopMethod(AdapterMethod):
    """``pa_on_top``: :class:`ProjectedAttentionOnTop` after the last layer (``2 d d_s + 6 * 4 d_s^2``)."""

    name = "pa_on_top"
    where = Where.TOP
    size_at_768 = 204
    headed = True
    has_up_projection = True

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        eps = float(getattr(encoder_config, "layer_norm_eps", 1e-12))
        return ProjectedAttentionOnTop(config, int(encoder_config.hidden_size), size, eps)

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 2 * d * size + TOP_ATTENTION_BLOCKS * 4 * size**2


class BertLayerOnTopMethod(AdapterMethod):
    """``bert_layer_on_top``: :class:`BertLayerOnTop` after the last layer (``4 d^2 + 2 d d_ff`` weights)."""

    name = "bert_layer_on_top"
    where = Where.TOP
    size_at_768 = None
    starts_as_encoder = False  # a copy of the last layer, applied once more

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        return BertLayerOnTop(config, encoder_config, int(encoder_config.num_hidden_layers))

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 4 * d * d + 2 * d * d_ff
