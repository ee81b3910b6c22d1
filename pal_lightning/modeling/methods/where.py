"""Where a method's per-task module acts: a :class:`Placement` object that places the hooks and fills the
task's call, and a Protocol for the module of each kind::

    BESIDE   inside each selected layer l, a term added to the residual sum before the output LayerNorm
             (after the layer in a pre-LN family): h^{l+1} = LN2(h_att + FFN(h_att) + A_t(l, h^l))  (PALs)
    INSIDE   on named sites of each selected layer: a site's output y = f(x) becomes y + A_t(l, s, x, y)
                                                                                   (LoRA, bottleneck)
    TOP      once, after the last layer: h_out = A_t(h^L)                    (pa_on_top, bert_layer_on_top)
    NOWHERE  no module: only the heads are task-specific                                      (none)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from pal_lightning.modeling.families.base import EncoderFamily
from pal_lightning.modeling.families.wiring import (
    JoinNormHook,
    LayerHook,
    LayerPreHook,
    LayerRunner,
    SiteHook,
    TaskCall,
    Wiring,
)


@runtime_checkable
class BesideModule(Protocol):
    """A task's module beside the layers: ``module(layer, hidden [B, T, d], attention_bias) -> [B, T, d]``."""

    layers: tuple[int, ...]

    def __call__(self, layer: int, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor: ...


@runtime_checkable
class InsideModule(Protocol):
    """A task's module on the sites of the layers: ``delta(layer, site, x, y)``, shaped like ``y``."""

    layers: tuple[int, ...]
    sites: tuple[str, ...]

    def delta(self, layer: int, site: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class MergeableModule(InsideModule, Protocol):
    """An :class:`InsideModule` linear in x: ``weight_delta(layer, site)`` is the ``[out, in]`` matrix that
    ``MultiTaskEncoder.merge`` adds to the site's weight."""

    def weight_delta(self, layer: int, site: str) -> torch.Tensor: ...


class TopModule(Protocol):
    """A task's block after the last layer: ``module(hidden, run_layer, attention_bias) -> [B, T, d]``;
    ``run_layer(layer, h)`` runs an encoder layer with the arguments the last layer received."""

    def __call__(
        self, hidden: torch.Tensor, run_layer: LayerRunner, attention_bias: torch.Tensor | None
    ) -> torch.Tensor: ...


def _wrap_layer(layer: nn.Module, index: int, wiring: Wiring) -> None:
    """Hooks on a layer's entry (its arguments kept) and exit (its output rewritten)."""
    layer.register_forward_pre_hook(LayerPreHook(wiring, index), with_kwargs=True)
    layer.register_forward_hook(LayerHook(wiring, index), with_kwargs=True)


class Placement:
    """Where a per-task module acts: the hooks it needs on a layer and the call the hooks read."""

    in_layers: bool = False
    """Whether the module acts in selected layers (``placement`` and ``num_layers`` apply)."""

    reads_mask: bool = False
    """Whether the module reads the PAL attention mask (built once per forward)."""

    slot: str | None = None
    """The :class:`~pal_lightning.modeling.families.wiring.TaskCall` field that holds the module."""

    protocol: type | None = None
    """The Protocol a task's module follows (checked when the encoder builds it)."""

    def place(
        self, layer: nn.Module, index: int, family: EncoderFamily, wiring: Wiring, sites: Iterable[str]
    ) -> None:
        """Put on ``layer`` (layer ``index``) the hooks this placement needs; ``sites``: the modules' sites."""

    def call(
        self,
        module: nn.Module | None,
        layers: Iterable[int],
        num_layers: int,
        mask: torch.Tensor | None,
        individual: nn.ModuleDict | None,
    ) -> TaskCall:
        """The call of one task whose ``module`` acts in ``layers``; ``individual``: its I-layer copies."""
        call = TaskCall(layers=frozenset(layers), mask=mask, last=num_layers - 1, individual=individual)
        if self.slot is not None:
            setattr(call, self.slot, module)
        return call

    def __repr__(self) -> str:
        return f"Where.{type(self).__name__.upper()}"


class Beside(Placement):
    """A :class:`BesideModule`: its term is computed on the layer's entry and joins the residual sum."""

    in_layers = reads_mask = True
    slot = "beside"
    protocol = BesideModule

    def place(
        self, layer: nn.Module, index: int, family: EncoderFamily, wiring: Wiring, sites: Iterable[str]
    ) -> None:
        if family.join_norm is None:
            _wrap_layer(layer, index, wiring)
        else:
            layer.register_forward_pre_hook(LayerPreHook(wiring, index), with_kwargs=True)
            layer.get_submodule(family.join_norm).register_forward_pre_hook(JoinNormHook(wiring, index))


class Inside(Placement):
    """An :class:`InsideModule`: hooks on the site Linears add its deltas."""

    in_layers = True
    slot = "inside"
    protocol = InsideModule

    def place(
        self, layer: nn.Module, index: int, family: EncoderFamily, wiring: Wiring, sites: Iterable[str]
    ) -> None:
        by_linear: dict[str, list[tuple[str, tuple[int, int] | None]]] = {}
        for site in sites:
            path, chunk = family.sites[site]
            by_linear.setdefault(path, []).append((site, chunk))
        for path, linear_sites in by_linear.items():
            layer.get_submodule(path).register_forward_hook(SiteHook(wiring, index, linear_sites))


class Top(Placement):
    """A :class:`TopModule`: the last layer's arguments are kept on entry, its output goes through it."""

    reads_mask = True
    slot = "top"
    protocol = None  # TopModule is a call signature, which isinstance cannot check: typing alone holds it

    def place(
        self, layer: nn.Module, index: int, family: EncoderFamily, wiring: Wiring, sites: Iterable[str]
    ) -> None:
        _wrap_layer(layer, index, wiring)


class Nowhere(Placement):
    """No module (``none``): no hook; individual layers' slots read the call themselves."""


class Where:
    """The placements a method may name (``where = Where.BESIDE``)."""

    BESIDE: Placement = Beside()
    INSIDE: Placement = Inside()
    TOP: Placement = Top()
    NOWHERE: Placement = Nowhere()
