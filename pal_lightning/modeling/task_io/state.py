"""What belongs to one task in a model: its adapter, its (group's) individual layers and its head.

Parameter accounting, task-only weight files and task folders all take "a :class:`MultiTaskBert`, or a
module holding one as ``.encoder`` beside ``.heads``" and ask the same questions of it: which tasks it
has, which tensors a task owns, how its adapters are shaped. They answer them here, once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.encoder import ADAPTERS_PREFIX, INDIVIDUAL_PREFIX, MultiTaskBert

HEADS_PREFIX = "heads"
"""State-dict prefix of the task heads of a module holding ``.encoder`` and ``.heads``."""


def encoder_and_heads(obj: nn.Module) -> tuple[MultiTaskBert, nn.ModuleDict | None]:
    """The encoder of ``obj`` (``obj`` itself or its ``.encoder``) and its ``.heads`` (``None`` without).

    Raises:
        PalUserError: when ``obj`` neither is nor holds a :class:`MultiTaskBert`.
    """
    if isinstance(obj, MultiTaskBert):
        return obj, None
    encoder = getattr(obj, "encoder", None)
    if not isinstance(encoder, MultiTaskBert):
        raise PalUserError(
            f"Expected a MultiTaskBert or a module with an `.encoder` MultiTaskBert, got {type(obj).__name__}."
        )
    heads = getattr(obj, "heads", None)
    return encoder, heads if isinstance(heads, nn.ModuleDict) else None


def model_tasks(encoder: MultiTaskBert, heads: nn.ModuleDict | None) -> list[str]:
    """The encoder's tasks in order, then any task that only has a head."""
    tasks = list(encoder.task_names)
    if heads is not None:
        tasks += [t for t in heads if t not in tasks]
    return tasks


def choose_tasks(tasks: str | Sequence[str] | None, available: Sequence[str], where: str) -> list[str]:
    """``tasks`` as a list (``None``: every one of ``available``), each checked to be in ``available``.

    Raises:
        PalUserError: naming the tasks not in ``where`` and the ones that are.
    """
    if tasks is None:
        return list(available)
    chosen = [tasks] if isinstance(tasks, str) else list(tasks)
    unknown = [t for t in chosen if t not in available]
    if unknown:
        raise PalUserError(
            f"Task(s) {unknown} are not in {where}. Available: {', '.join(available) or 'none'}."
        )
    return chosen


def task_prefixes(encoder: MultiTaskBert, task: str) -> tuple[str, str, str]:
    """The state-dict prefixes of ``task``'s tensors: its adapter, its group's individual layers, its head."""
    group = encoder.task_group.get(task, task)
    return f"{ADAPTERS_PREFIX}.{task}.", f"{INDIVIDUAL_PREFIX}.{group}.", f"{HEADS_PREFIX}.{task}."


def task_state(encoder: MultiTaskBert, heads: nn.ModuleDict | None, task: str) -> dict[str, torch.Tensor]:
    """The live tensors (sharing storage with the parameters) of ``task``'s adapter, individual layers and
    head."""
    adapter, individual, head = task_prefixes(encoder, task)
    group = encoder.task_group.get(task, task)
    state: dict[str, torch.Tensor] = {}
    if task in encoder.adapters:
        state.update(encoder.adapters[task].state_dict(prefix=adapter))
    if group in encoder.individual:  # its group's copies (the task's own without task_groups)
        state.update(encoder.individual[group].state_dict(prefix=individual))
    if heads is not None and task in heads:
        state.update(heads[task].state_dict(prefix=head))
    return state


def adapter_signature(encoder: MultiTaskBert) -> dict[str, object]:
    """The shape-relevant, resolved adapter options (the method's
    :meth:`~pal_lightning.modeling.methods.base.AdapterMethod.signature`, and the individual layers):
    equal signatures mean task weights fit."""
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


def encoder_source(encoder: MultiTaskBert) -> str:
    """The name or path the encoder was loaded from (``""`` for a random one); informative only."""
    return str(getattr(encoder.config, "name_or_path", "") or "")
