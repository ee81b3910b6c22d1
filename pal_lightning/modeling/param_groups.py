"""AdamW parameter groups: a peak rate per kind (encoder ``lr``, ``adapter_lr``, ``head_lr``), layer-wise
decay of the encoder's (``lr * decay**(L - l)``, embeddings ``L + 1``), and no weight decay for biases
and LayerNorm gains."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch import nn

_LAYER = re.compile(r"(?:^|\.)(?:encoder\.layer|individual\.[^.]+)\.(\d+)\.")
_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")


def encoder_depth(name: str, num_layers: int) -> int:
    """Decay steps below the top: ``L - l`` for layer ``l``, ``L + 1`` for the embeddings, else 0."""
    match = _LAYER.search(name)
    if match:
        return num_layers - int(match.group(1))
    if _EMBEDDINGS.search(name):
        return num_layers + 1
    return 0


@dataclass(frozen=True)
class GroupRates:
    """Peak learning rates and weight decay of the parameter groups."""

    lr: float
    """Peak rate of the pretrained encoder (its top layer)."""
    adapter_lr: float
    """Peak rate of the adapters (PALs)."""
    head_lr: float
    """Peak rate of the task heads."""
    weight_decay: float
    """AdamW weight decay of the weight matrices (not of biases and LayerNorm gains)."""
    layer_lr_decay: float = 1.0
    """Factor per layer going down the encoder (1.0: one rate)."""
    num_layers: int = 0
    """L, the number of encoder layers."""


def build_parameter_groups(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    pretrained: set[int],
    adapters: set[int],
    no_decay: set[int],
    rates: GroupRates,
) -> list[dict[str, object]]:
    """Non-empty AdamW groups of the trainable ``named_parameters`` (``pretrained``, ``adapters``,
    ``no_decay``: parameter ids): the encoder top layer first, then adapters, then heads."""
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
    # decay before no-decay across all new groups: the gradient-norm sum keeps the order it had when
    # adapters and heads shared one group
    kind, depth, decay = key
    if kind == 0:
        return 0, depth, int(not decay), 0
    return 1, 0, int(not decay), kind


def _kind_of(name: str, pretrained: bool, adapter: bool, rates: GroupRates) -> tuple[int, int, str, float]:
    """(kind: 0 encoder, 1 adapters, 2 heads; depth; group name; peak rate)."""
    if pretrained:
        if rates.layer_lr_decay == 1.0:
            return 0, 0, "pretrained", rates.lr
        depth = encoder_depth(name, rates.num_layers)
        return 0, depth, f"encoder_depth{depth}", rates.lr * rates.layer_lr_decay**depth
    if adapter:
        return 1, 0, "adapters", rates.adapter_lr
    return 2, 0, "heads", rates.head_lr
