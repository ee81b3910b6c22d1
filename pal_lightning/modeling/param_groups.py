"""AdamW parameter groups: a peak learning rate per kind of parameter, and layer-wise decay.

Three kinds of trainable parameters, each with its own peak rate:

* ``encoder``: the pretrained BERT weights, at ``lr``; with layer-wise learning-rate decay
  (``decay < 1``) layer ``l`` (0-based) of ``L`` gets ``lr * decay**(L - l)`` and the embeddings
  ``lr * decay**(L + 1)``, so the lowest, most general layers move least (as in ELECTRA and ULMFiT);
* ``adapters``: the task-specific functions (PALs), at ``adapter_lr``;
* ``heads``: everything else that is new (the task heads), at ``head_lr``.

Each kind splits again into weights with weight decay and biases/LayerNorm gains without.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch import nn

# a shared layer (encoder.layer.<l>) or a task's copy of an individual layer (individual.<task>.<l>)
_LAYER = re.compile(r"(?:^|\.)(?:encoder\.layer|individual\.[^.]+)\.(\d+)\.")
_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")


def encoder_depth(name: str, num_layers: int) -> int:
    """How many decay steps below the top a pretrained parameter sits: ``L - l`` for layer ``l``,
    ``L + 1`` for the embeddings, 0 for anything else (e.g. a pooler above the layers)."""
    match = _LAYER.search(name)
    if match:
        return num_layers - int(match.group(1))
    if _EMBEDDINGS.search(name):
        return num_layers + 1
    return 0


def layerwise_lr(lr: float, decay: float, depth: int) -> float:
    """``lr * decay**depth``: the peak rate of a pretrained parameter ``depth`` steps below the top."""
    return lr * decay**depth


@dataclass(frozen=True)
class GroupRates:
    """Peak learning rates and weight decay of the parameter groups."""

    lr: float
    """Peak rate of the pretrained encoder (its top layer when ``layer_lr_decay < 1``)."""
    adapter_lr: float
    """Peak rate of the adapters (PALs)."""
    head_lr: float
    """Peak rate of the task heads."""
    weight_decay: float
    """AdamW decoupled weight decay of the weight matrices (never of biases and LayerNorm gains)."""
    layer_lr_decay: float = 1.0
    """Factor per layer going down the encoder; 1.0 = one rate for the whole encoder."""
    num_layers: int = 0
    """L, the number of encoder layers (only read when ``layer_lr_decay != 1``)."""


def build_parameter_groups(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    pretrained: set[int],
    adapters: set[int],
    no_decay: set[int],
    rates: GroupRates,
) -> list[dict[str, object]]:
    """AdamW groups of the trainable ``named_parameters``.

    Args:
        named_parameters: the module's ``named_parameters()``.
        pretrained: ``id``\\s of the pretrained encoder's parameters.
        adapters: ``id``\\s of the adapters' parameters.
        no_decay: ``id``\\s of LayerNorm gains (biases are recognised by name).
        rates: the rates and decay.

    Returns:
        Groups with ``name``, ``params``, ``lr``, ``weight_decay``; empty groups are left out.
        Order: encoder from the top layer down to the embeddings, then adapters, then heads.
    """
    groups: dict[tuple[int, int, bool], dict[str, Any]] = {}
    for name, p in named_parameters:
        if not p.requires_grad:
            continue
        decay = not (name.endswith("bias") or id(p) in no_decay or "LayerNorm" in name)
        kind, depth, label, lr = _kind_of(name, id(p) in pretrained, id(p) in adapters, rates)
        group = groups.setdefault(
            (kind, depth, decay),
            {
                "name": label + ("" if decay else "_no_decay"),
                "params": [],
                "lr": lr,
                "weight_decay": rates.weight_decay if decay else 0.0,
            },
        )
        group["params"].append(p)
    return [groups[k] for k in sorted(groups, key=_group_order)]


def _group_order(key: tuple[int, int, bool]) -> tuple[int, int, int, int]:
    """The groups' order: the encoder by depth (decay before no-decay); then the new parameters with every
    decay group before every no-decay group, adapters before heads. That is the order of the parameters the
    sums over all gradients see (the norm that gradient clipping scales by), and it is the order the new
    parameters had when adapters and heads shared one group: a run's arithmetic does not depend on whether
    the adapters have a rate of their own."""
    kind, depth, decay = key
    if kind == 0:
        return 0, depth, int(not decay), 0
    return 1, 0, int(not decay), kind


def _kind_of(name: str, pretrained: bool, adapter: bool, rates: GroupRates) -> tuple[int, int, str, float]:
    """(kind: 0 encoder, 1 adapters, 2 heads; depth below the top; group name; peak rate) of a parameter."""
    if pretrained:
        if rates.layer_lr_decay == 1.0:
            return 0, 0, "pretrained", rates.lr
        depth = encoder_depth(name, rates.num_layers)
        return 0, depth, f"encoder_depth{depth}", layerwise_lr(rates.lr, rates.layer_lr_decay, depth)
    if adapter:
        return 1, 0, "adapters", rates.adapter_lr
    return 2, 0, "heads", rates.head_lr
