"""AdamW parameter groups: a peak rate per kind (encoder ``lr``, ``adapter_lr``, ``head_lr``), layer-wise
decay of the encoder's (``lr * decay**(L - l)``, embeddings ``L + 1``), and no weight decay for biases
and LayerNorm gains; a parameter may be placed into a kind's group or into a group of its own
(:class:`OwnGroup`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeAlias

from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families import FAMILIES

_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")
#: The kinds a parameter can be placed into by name, with their group names (``<kind>_no_decay`` beside).
KINDS = ("pretrained", "adapters", "heads")


@functools.cache
def _layer_pattern(paths: frozenset[str]) -> re.Pattern[str]:
    # every family's path to its layers (encoder.layer, transformer.layer, layers), and the I-layer copies;
    # compiled once per set of registered families, not per parameter
    either = "|".join(sorted(re.escape(p) for p in paths))
    return re.compile(rf"(?:^|\.)(?:{either}|individual\.[^.]+)\.(\d+)\.")


def encoder_depth(name: str, num_layers: int) -> int:
    """Decay steps below the top: ``L - l`` for layer ``l``, ``L + 1`` for the embeddings, else 0."""
    match = _layer_pattern(frozenset(family.layers for family in FAMILIES.values())).search(name)
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


@dataclass(frozen=True)
class OwnGroup:
    """An AdamW group of its own for parameters a subclass adds (``MultiTaskModule.parameter_group_of``)."""

    name: str
    """The group's name (in the fit-start table and ``optimizer.param_groups``); not a kind's group name."""
    lr: float
    """Its peak learning rate (warmup and decay scale it as every group's)."""
    weight_decay: float = 0.0
    """Its AdamW weight decay, on every parameter of the group (biases too)."""


#: Where ``parameter_group_of`` puts a parameter: ``None`` (by where it sits), a kind of :data:`KINDS`,
#: or a group of its own (an :class:`OwnGroup`, or a mapping of its fields).
Placement: TypeAlias = str | OwnGroup | Mapping[str, Any] | None


def as_placement(name: str, where: Any) -> str | OwnGroup | None:
    """``where`` checked for parameter ``name``: ``None``, a kind, or an :class:`OwnGroup`."""
    if where is None or where in KINDS:
        return where
    if isinstance(where, Mapping):
        unknown = sorted(set(where) - {f.name for f in fields(OwnGroup)})
        if unknown or "name" not in where or "lr" not in where:
            raise PalUserError(
                f"parameter_group_of({name!r}) returned {dict(where)}: a group of its own needs 'name' and "
                f"'lr' (and optionally 'weight_decay'){f', not {unknown}' if unknown else ''}."
            )
        where = OwnGroup(**where)
    if isinstance(where, OwnGroup):
        if where.name.removesuffix("_no_decay") in KINDS or where.name.startswith("encoder_depth"):
            raise PalUserError(
                f"parameter_group_of({name!r}) returned a group of its own named {where.name!r}, a name of the "
                f"library's groups: return the string {where.name.removesuffix('_no_decay')!r} to join "
                "that group, or choose another name."
            )
        return where
    raise PalUserError(
        f"parameter_group_of({name!r}) returned {where!r}: return None (the default group), one of "
        f"{', '.join(map(repr, KINDS))}, or OwnGroup(name, lr, weight_decay) for a group of its own."
    )


def build_parameter_groups(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    pretrained: set[int],
    adapters: set[int],
    no_decay: set[int],
    rates: GroupRates,
    placed: Mapping[int, str | OwnGroup] | None = None,
) -> list[dict[str, object]]:
    """Non-empty AdamW groups of the trainable ``named_parameters`` (``pretrained``, ``adapters``,
    ``no_decay``: parameter ids): the encoder top layer first, then adapters, then heads, then the groups
    of their own of ``placed`` (parameter id -> kind or :class:`OwnGroup`; a kind overrides where the
    parameter sits), in the order first met."""
    groups: dict[tuple[int, int, bool], dict[str, Any]] = {}
    own: dict[str, dict[str, Any]] = {}
    for name, p in named_parameters:
        if not p.requires_grad:
            continue
        where = (placed or {}).get(id(p))
        if isinstance(where, OwnGroup):
            _add_to_own_group(own, where, p)
            continue
        decay = not (name.endswith("bias") or id(p) in no_decay or "LayerNorm" in name)
        is_pretrained, is_adapter = (
            (id(p) in pretrained, id(p) in adapters)
            if where is None
            else (where == KINDS[0], where == KINDS[1])
        )
        kind, depth, label, lr = _kind_of(name, is_pretrained, is_adapter, rates)
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
    return [*(groups[k] for k in sorted(groups, key=_group_order)), *own.values()]


def _add_to_own_group(own: dict[str, dict[str, Any]], where: OwnGroup, p: nn.Parameter) -> None:
    group = own.setdefault(
        where.name, {"name": where.name, "params": [], "lr": where.lr, "weight_decay": where.weight_decay}
    )
    if (group["lr"], group["weight_decay"]) != (where.lr, where.weight_decay):
        raise PalUserError(
            f"parameter_group_of placed parameters into group {where.name!r} with two settings (lr "
            f"{group['lr']} and {where.lr}, weight_decay {group['weight_decay']} and {where.weight_decay}): "
            "give one group one lr and weight_decay."
        )
    group["params"].append(p)


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
