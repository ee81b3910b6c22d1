"""What the library needs to know of an encoder architecture: one :class:`EncoderFamily` per family.

A family says, for the ``transformers`` model its checkpoint's ``model_type`` names, where the per-task
methods plug in. Everything is a *path* of submodule names, read off the model once when the encoder is
built, so a family is data, not a subclass of the model::

    post-LayerNorm layer (BERT, RoBERTa, ELECTRA, MPNet, DeBERTa, DistilBERT)

        h ──> attention(query, key, value ─> attention_output) ─> + h ─> LN1 ─> h_att
        h_att ──> ffn_input ─> act ─> ffn_output ─> + h_att  (+ TS_t(h)) ─> join_norm (LN2) ─> h'
                                                               ^^^^^^^^ PALs join the residual here

    pre-LayerNorm layer (ModernBERT)

        h ──> norm ─> attention ─> + h ─> a ;  a ──> norm ─> ffn ─> + a ─> h'  (+ TS_t(h))
                                                                            ^^^^^^^^ the residual stream

``sites`` maps the method-neutral names of :data:`~pal_lightning.modeling.methods.base.SITES` to each
layer's Linears; a fused query/key/value Linear is one path with a ``(chunk, of)`` slice. Adding a
family: ``docs/extending.md`` ("Adding an encoder family").
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

#: A site's place in a layer: the Linear's path and, for a fused Linear, (which chunk, of how many).
Site = tuple[str, tuple[int, int] | None]


@dataclass(frozen=True)
class EncoderFamily:
    """One encoder architecture as the library wires it."""

    name: str
    """The family's name in messages and docs (``"bert"``, ``"modernbert"``, ...)."""

    model_types: tuple[str, ...]
    """The ``model_type`` values of ``config.json`` that belong to this family."""

    layers: str
    """Path from the base model to its ``nn.ModuleList`` of layers (``"encoder.layer"``)."""

    layer_class: str
    """``module:Class`` of one layer, to build a fresh one (``bert_layer_on_top``)."""

    join_norm: str | None
    """Path, inside a layer, of the LayerNorm where the FFN's residual sum is normalised (post-LN
    families): a PAL term is added to its input. ``None`` for a pre-LN family, where the term is added to
    the layer's output (the residual stream)."""

    sites: Mapping[str, Site] = field(default_factory=dict)
    """The Linears of :data:`~pal_lightning.modeling.methods.base.SITES` inside a layer."""

    token_types: bool = True
    """Whether the model's forward takes ``token_type_ids`` (segment ids of pair encodings)."""

    pooler_option: bool = False
    """Whether the model class takes ``add_pooling_layer`` (the library never builds the pooler)."""

    layer_index_keyword: str | None = "layer_idx"
    """The layer constructor's keyword for its index (``None``: it takes the config alone)."""

    row_shared_sites: tuple[str, ...] = ()
    """Sites whose Linear also projects a tensor shared by every row of the batch (DeBERTa's relative
    position embeddings pass through its query and key projections). A per-task delta there makes that
    tensor per task, which one pass cannot route: a mixed-task batch whose method acts on one of these sites
    runs one forward per task present instead (:meth:`MultiTaskBert.forward`, ``tasks=``)."""

    # ------------------------------------------------------------------ reading a model
    def layer_list(self, model: nn.Module) -> nn.ModuleList:
        """The model's layers."""
        found = model.get_submodule(self.layers)
        assert isinstance(found, nn.ModuleList), f"{self.name}: {self.layers} is not a ModuleList"
        return found

    def new_layer(self, config: Any, index: int) -> nn.Module:
        """A freshly initialised layer of this family (weights as the layer class makes them)."""
        module_name, class_name = self.layer_class.split(":")
        cls: type[nn.Module] = getattr(importlib.import_module(module_name), class_name)
        if self.layer_index_keyword is None:
            return cls(config)
        return cls(config, **{self.layer_index_keyword: index})

    def site_linear(self, layer: nn.Module, site: str) -> tuple[nn.Linear, tuple[int, int] | None]:
        """The Linear that holds ``site`` in ``layer`` and its fused chunk (``None``: the whole output)."""
        path, chunk = self.sites[site]
        linear = layer.get_submodule(path)
        assert isinstance(linear, nn.Linear), f"{self.name}: {path} is not a Linear"
        return linear, chunk

    def site_shape(self, layer: nn.Module, site: str) -> tuple[int, int]:
        """``(in, out)`` of ``site`` in ``layer`` (out is one chunk's width for a fused Linear)."""
        linear, chunk = self.site_linear(layer, site)
        out = linear.out_features if chunk is None else linear.out_features // chunk[1]
        return linear.in_features, out
