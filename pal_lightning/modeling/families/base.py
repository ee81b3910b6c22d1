"""What the library needs to know of an encoder architecture: one :class:`EncoderFamily` per family, data
of submodule paths (docs/families.md; adding one: docs/extending.md)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

#: A site's place in a layer: the Linear's path and, for a fused Linear, (which chunk, of how many).
Site = tuple[str, tuple[int, int] | None]


def whole_linears(*paths: str) -> dict[str, Site]:
    """The sites of a layer without fused Linears: the paths of query, key, value, attention_output,
    ffn_input and ffn_output, in that order."""
    names = ("query", "key", "value", "attention_output", "ffn_input", "ffn_output")
    return {name: (path, None) for name, path in zip(names, paths, strict=True)}


@dataclass(frozen=True)
class EncoderFamily:
    """One encoder architecture as the library wires it."""

    name: str
    """The family's name (``"bert"``, ``"modernbert"``, ...)."""
    model_types: tuple[str, ...]
    """The ``model_type`` values of ``config.json`` that belong to this family."""
    layers: str
    """Path from the base model to its ``nn.ModuleList`` of layers (``"encoder.layer"``)."""
    layer_class: str
    """``module:Class`` of one layer, to build a fresh one."""
    join_norm: str | None
    """Path, inside a post-LN layer, of the LayerNorm whose input a PAL term joins; ``None``: pre-LN (the
    term joins the layer's output)."""
    sites: Mapping[str, Site] = field(default_factory=dict)
    """The Linears of :data:`~pal_lightning.modeling.methods.base.SITES` inside a layer."""
    token_types: bool = True
    """Whether the model's forward takes ``token_type_ids`` (segment ids of pair encodings)."""
    pooler_option: bool = False
    """Whether the model class takes ``add_pooling_layer`` (set to ``False``)."""
    layer_index_keyword: str | None = "layer_idx"
    """The layer constructor's keyword for its index (``None``: it takes the config alone)."""
    row_shared_sites: tuple[str, ...] = ()
    """Sites whose Linear also projects a tensor shared by the rows (DeBERTa's relative embeddings): a
    mixed-task batch acting there runs one forward per task."""

    def layer_list(self, model: nn.Module) -> nn.ModuleList:
        """The model's layers."""
        found = model.get_submodule(self.layers)
        assert isinstance(found, nn.ModuleList), f"{self.name}: {self.layers} is not a ModuleList"
        return found

    def new_layer(self, config: Any, index: int) -> nn.Module:
        """A freshly initialised layer of this family."""
        module_name, class_name = self.layer_class.split(":")
        cls: type[nn.Module] = getattr(importlib.import_module(module_name), class_name)
        if self.layer_index_keyword is None:
            return cls(config)
        return cls(config, **{self.layer_index_keyword: index})

    def site_linear(self, layer: nn.Module, site: str) -> tuple[nn.Linear, tuple[int, int] | None]:
        """The Linear holding ``site`` in ``layer`` and its fused chunk (``None``: the whole output)."""
        path, chunk = self.sites[site]
        linear = layer.get_submodule(path)
        assert isinstance(linear, nn.Linear), f"{self.name}: {path} is not a Linear"
        return linear, chunk
