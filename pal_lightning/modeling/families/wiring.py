"""The layers of :class:`~pal_lightning.modeling.encoder.MultiTaskBert`: BERT layers that add the active task's
TS_t term, and the empty slot of an individual (I) layer.

What one forward of one task hands every layer travels as a :class:`TaskCall` in the ``task_call=`` keyword that
transformers threads from ``BertModel.forward`` down to each layer (see the encoder's module docstring for
why it is passed per call instead of stored on the layers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertLayer
from transformers.pytorch_utils import apply_chunking_to_forward


@dataclass(frozen=True)
class TaskCall:
    """What a layer needs for one forward of one task: the adapter and the PAL mask built once."""

    adapter: nn.Module | None
    """The task's module beside the layers (``forward(layer, hidden, mask)``), or ``None``."""
    layers: frozenset[int]
    mask: torch.Tensor | None
    top: nn.Module | None = None
    """The task's block after the last layer (variants on top), called by layer ``last``."""
    last: int = -1
    individual: nn.ModuleDict | None = None
    """The task's copies of the individual layers, keyed by layer index (``None``: no I layer)."""


def task_call(
    adapter: nn.Module | None,
    on_top: bool,
    layers: Iterable[int],
    num_layers: int,
    mask: torch.Tensor | None,
    individual: nn.ModuleDict | None,
) -> TaskCall:
    """The call of a task whose ``adapter`` works beside ``layers`` or, with ``on_top``, after the last of
    the encoder's ``num_layers`` layers; ``individual``: its copies of the individual layers."""
    return TaskCall(
        None if on_top else adapter,
        frozenset(layers),
        mask,
        top=adapter if on_top else None,
        last=num_layers - 1,
        individual=individual,
    )


class IndividualLayerSlot(nn.Module):
    """The place of an individual (I) layer in ``bert.encoder.layer``: no parameters, it runs the active
    task's own copy of the layer (handed over in ``task_call=``)."""

    def __init__(self, layer_index: int) -> None:
        super().__init__()
        self.layer_index = layer_index

    def forward(self, *args: Any, task_call: TaskCall | None = None, **kwargs: Any) -> torch.Tensor:
        """The active task's copy of layer ``layer_index`` applied to the arguments the encoder passes a
        layer (hidden states, masks, ...), handed on unchanged."""
        if task_call is None or task_call.individual is None:
            raise RuntimeError(f"layer {self.layer_index} is individual: call MultiTaskBert with task=...")
        layer = task_call.individual[str(self.layer_index)]
        return layer(*args, task_call=task_call, **kwargs)


class PALBertLayer(BertLayer):
    """A ``BertLayer`` that adds TS_t(h) before its output LayerNorm when given ``task_call=``.

    Same submodules and parameter names as ``BertLayer``; without ``task_call`` (or for a layer outside the
    placement) it is exactly ``BertLayer``.
    """

    def __init__(self, config: BertConfig, layer_idx: int | None = None) -> None:
        super().__init__(config, layer_idx=layer_idx)
        self.layer_index = layer_idx

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        task_call: TaskCall | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """``LN2(h_att + FFN(h_att) + TS_t(h))`` with ``TS_t`` from ``task_call``; plain BERT layer otherwise.

        The last layer then applies the task's block on top, if the variant has one.
        """
        if task_call is None or task_call.adapter is None or self.layer_index not in task_call.layers:
            out = super().forward(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        else:
            task_term = task_call.adapter(self.layer_index, hidden_states, task_call.mask)
            attention_output, _ = self.attention(hidden_states, attention_mask, cache=cache, **kwargs)
            # chunking splits both tensors along the sequence the same way
            out = apply_chunking_to_forward(
                self._feed_forward_with_task_term,
                self.chunk_size_feed_forward,
                self.seq_len_dim,
                attention_output,
                task_term,
            )
        if task_call is not None and task_call.top is not None and self.layer_index == task_call.last:
            # BERT's own mask (its format depends on the attention implementation) for a BERT layer on
            # top; the PAL mask for projected attention on top
            out = task_call.top(out, attention_mask, task_call.mask)
        return out

    def _feed_forward_with_task_term(
        self, attention_output: torch.Tensor, task_term: torch.Tensor
    ) -> torch.Tensor:
        # BertOutput computes LayerNorm(dropout(dense(x)) + input_tensor): the TS term joins the residual.
        return self.output(self.intermediate(attention_output), attention_output + task_term)
