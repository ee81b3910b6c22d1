"""The state-dict layout of :class:`~pal_lightning.modeling.encoder.MultiTaskBert`, and how a pretrained BERT
checkpoint maps onto it.

Layout::

    bert.*                          the shared encoder (embeddings, frozen and shared layers)
    individual.<group>.<layer>.*    each group's copy of an individual (I) layer
    adapters.<task>.*               each task's TS_t (PALs, or the block on top)

A pretrained checkpoint knows only ``bert.*`` (or the same names without the prefix). Loading it is a
pure plan (:func:`plan_pretrained_load`): rename its keys, copy the I layers' weights to every group,
refuse a checkpoint that lacks an encoder weight or has a wrong shape, and report what it holds that the
encoder does not use. Only the new ``adapters.*`` keys may be missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from pal_lightning.core.errors import PalUserError

ADAPTERS_PREFIX = "adapters"
"""State-dict prefix of every new (task-specific) parameter of :class:`MultiTaskBert`."""

INDIVIDUAL_PREFIX = "individual"
"""State-dict prefix of the per-task copies of individual (I) layers: ``individual.<task>.<layer>.*``."""

ENCODER_PREFIX = "bert"
"""State-dict prefix of the shared encoder."""


@dataclass
class LoadingInfo:
    """What :meth:`MultiTaskBert.from_pretrained` found in the checkpoint."""

    source: str
    """The checkpoint file(s) read."""

    missing_new: list[str] = field(default_factory=list)
    """Keys absent from the checkpoint that are new task-specific parameters (expected)."""

    unexpected: list[str] = field(default_factory=list)
    """Checkpoint keys the encoder does not use (pooler, pre-training heads, ...): ignored."""


def encoder_keys(state: Mapping[str, torch.Tensor], model_prefix: str = "") -> dict[str, torch.Tensor]:
    """``state`` under this encoder's names: every key under ``bert.`` (a task model's checkpoint names its
    encoder ``bert.``/``roberta.``/... -- ``model_prefix``, the family's own -- and a base model's has no
    prefix) and old ``LayerNorm.gamma/beta`` as ``LayerNorm.weight/bias``."""
    renamed: dict[str, torch.Tensor] = {}
    prefixes = {f"{ENCODER_PREFIX}."} | ({f"{model_prefix}."} if model_prefix else set())
    for key, value in state.items():
        name = key
        for prefix in prefixes:
            name = name.removeprefix(prefix)
        if name.endswith("LayerNorm.gamma"):
            name = name.removesuffix("gamma") + "weight"
        elif name.endswith("LayerNorm.beta"):
            name = name.removesuffix("beta") + "bias"
        renamed[f"{ENCODER_PREFIX}.{name}"] = value
    return renamed


def copy_individual_layers(
    renamed: dict[str, torch.Tensor],
    layers: Sequence[int],
    groups: Sequence[str],
    layers_path: str = "encoder.layer",
) -> set[str]:
    """Add, for each individual layer, its pretrained weights under every group's copy
    (``individual.<group>.<layer>.*``); return the ``bert.<layers_path>.<i>.*`` keys copied.

    An individual layer has no place in ``bert.*`` (its slot holds no parameters), so the copied keys are
    neither loaded nor reported as unused.
    """
    copied: set[str] = set()
    for i in layers:
        prefix = f"{ENCODER_PREFIX}.{layers_path}.{i}."
        for key in [k for k in renamed if k.startswith(prefix)]:
            copied.add(key)
            for group in groups:
                renamed[f"{INDIVIDUAL_PREFIX}.{group}.{i}.{key.removeprefix(prefix)}"] = renamed[key]
    return copied


def _check_complete(missing: Sequence[str], source: str) -> None:
    not_new = [k for k in missing if not k.startswith(f"{ADAPTERS_PREFIX}.")]
    if not_new:
        shown = ", ".join(not_new[:8]) + (f" and {len(not_new) - 8} more" if len(not_new) > 8 else "")
        raise PalUserError(
            f"The checkpoint {source} lacks {len(not_new)} encoder weight(s) that are not new PAL "
            f"parameters: {shown}. Point the encoder at a complete checkpoint of the encoder's family (a folder saved with "
            "save_pretrained(), or a hub id)."
        )


def _check_shapes(
    renamed: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], source: str
) -> None:
    mismatched = [
        f"{k} (checkpoint {tuple(renamed[k].shape)}, model {tuple(expected[k].shape)})"
        for k in expected
        if k in renamed and renamed[k].shape != expected[k].shape
    ]
    if mismatched:
        raise PalUserError(
            f"Shapes in {source} do not match the encoder config: {', '.join(mismatched[:5])}. "
            "Check that config.json belongs to these weights."
        )


def plan_pretrained_load(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    *,
    individual_layers: Sequence[int],
    groups: Iterable[str],
    not_saved: Iterable[str] = (),
    source: str = "<state dict>",
    model_prefix: str = "",
    layers_path: str = "encoder.layer",
) -> tuple[dict[str, torch.Tensor], LoadingInfo]:
    """What to load from the pretrained ``state`` into an encoder whose state dict is ``expected``.

    Args:
        state: the checkpoint's tensors.
        expected: the encoder's ``state_dict()`` (names and shapes).
        individual_layers: the encoder's individual (I) layers.
        groups: the groups holding copies of them.
        not_saved: keys of buffers the encoder does not save (``bert.embeddings.position_ids``, which old
            transformers versions wrote and new ones recompute): neither loaded nor reported as unused.
        source: the checkpoint's file(s), for messages.
        model_prefix: the family's name for its encoder in task models' checkpoints (``roberta``, ...).
        layers_path: where the family keeps its layers (``encoder.layer``, ``layers``, ...).

    Returns:
        The tensors to load (every key is one of ``expected``'s) and the :class:`LoadingInfo`.

    Raises:
        PalUserError: when a non-adapter key is missing or a shape differs.
    """
    renamed = encoder_keys(state, model_prefix)
    copied = copy_individual_layers(renamed, individual_layers, list(groups), layers_path)
    missing = sorted(set(expected) - set(renamed))
    _check_complete(missing, source)
    ignored = set(not_saved) | copied
    unexpected = sorted(k for k in renamed if k not in expected and k not in ignored)
    _check_shapes(renamed, expected, source)
    info = LoadingInfo(
        source=source,
        missing_new=[k for k in missing if k.startswith(f"{ADAPTERS_PREFIX}.")],
        unexpected=[k.removeprefix(f"{ENCODER_PREFIX}.") for k in unexpected],
    )
    return {k: v for k, v in renamed.items() if k in expected}, info
