"""What belongs to one task in a :class:`MultiTaskEncoder` (or a module holding ``.encoder`` and ``.heads``):
its adapter, its (group's) individual layers and its head."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.encoder import MultiTaskEncoder
from pal_lightning.modeling.encoder_state import ADAPTERS_PREFIX, INDIVIDUAL_PREFIX

HEADS_PREFIX = "heads"
"""State-dict prefix of the task heads of a module holding ``.encoder`` and ``.heads``."""


def encoder_and_heads(obj: nn.Module) -> tuple[MultiTaskEncoder, nn.ModuleDict | None]:
    """The encoder of ``obj`` (itself or its ``.encoder``) and its ``.heads`` (or ``None``). Raises
    ``PalUserError`` when ``obj`` neither is nor holds a :class:`MultiTaskEncoder`."""
    if isinstance(obj, MultiTaskEncoder):
        return obj, None
    encoder = getattr(obj, "encoder", None)
    if not isinstance(encoder, MultiTaskEncoder):
        raise PalUserError(
            f"Expected a MultiTaskEncoder or a module with an `.encoder` MultiTaskEncoder, got {type(obj).__name__}."
        )
    heads = getattr(obj, "heads", None)
    return encoder, heads if isinstance(heads, nn.ModuleDict) else None


def model_tasks(encoder: MultiTaskEncoder, heads: nn.ModuleDict | None) -> list[str]:
    """The encoder's tasks in order, then any task that only has a head."""
    tasks = list(encoder.task_names)
    if heads is not None:
        tasks += [t for t in heads if t not in tasks]
    return tasks


def choose_tasks(tasks: str | Sequence[str] | None, available: Sequence[str], where: str) -> list[str]:
    """``tasks`` as a list (``None``: all of ``available``); :class:`PalUserError` for one not in ``where``."""
    if tasks is None:
        return list(available)
    chosen = [tasks] if isinstance(tasks, str) else list(tasks)
    unknown = [t for t in chosen if t not in available]
    if unknown:
        raise PalUserError(
            f"Task(s) {unknown} are not in {where}. Available: {', '.join(available) or 'none'}."
        )
    return chosen


def task_prefixes(encoder: MultiTaskEncoder, task: str) -> tuple[str, str, str]:
    """The state-dict prefixes of ``task``'s adapter, group's individual layers and head."""
    group = encoder.task_group.get(task, task)
    return f"{ADAPTERS_PREFIX}.{task}.", f"{INDIVIDUAL_PREFIX}.{group}.", f"{HEADS_PREFIX}.{task}."


def task_state(encoder: MultiTaskEncoder, heads: nn.ModuleDict | None, task: str) -> dict[str, torch.Tensor]:
    """The live tensors of ``task``'s adapter, individual layers and head."""
    adapter, individual, head = task_prefixes(encoder, task)
    group = encoder.task_group.get(task, task)
    state: dict[str, torch.Tensor] = {}
    if task in encoder.adapters:
        state.update(encoder.adapters[task].state_dict(prefix=adapter))
    if group in encoder.individual:
        state.update(encoder.individual[group].state_dict(prefix=individual))
    if heads is not None and task in heads:
        state.update(heads[task].state_dict(prefix=head))
    return state


def adapter_signature(encoder: MultiTaskEncoder) -> dict[str, object]:
    """The shape-relevant adapter options and individual layers: equal signatures mean task weights fit."""
    cfg = encoder.adapter_config
    signature: dict[str, object] = cfg.adapter_method.signature(
        cfg, encoder.adapter_size, encoder.adapter_layers
    )
    if encoder.individual_layers:
        signature["individual_layers"] = list(encoder.individual_layers)
        groups = sorted({g for t, g in encoder.task_group.items() if g != t})
        if groups:
            signature["task_groups"] = groups
    return signature


def encoder_source(encoder: MultiTaskEncoder) -> str:
    """The name or path the encoder was loaded from (``""`` for a random one)."""
    return str(getattr(encoder.config, "name_or_path", "") or "")
