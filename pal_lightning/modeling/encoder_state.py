"""The state-dict layout of :class:`~pal_lightning.modeling.encoder.MultiTaskEncoder` (``backbone.*``,
``individual.<group>.<layer>.*``, ``adapters.<task>.*``) and how a pretrained checkpoint maps onto it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from pal_lightning.core.errors import PalUserError

ADAPTERS_PREFIX = "adapters"
"""State-dict prefix of every new (task-specific) parameter of :class:`MultiTaskEncoder`."""

INDIVIDUAL_PREFIX = "individual"
"""State-dict prefix of the copies of individual (I) layers: ``individual.<group>.<layer>.*``."""

ENCODER_PREFIX = "backbone"
"""State-dict prefix of the shared encoder."""


@dataclass
class LoadingInfo:
    """What :meth:`MultiTaskEncoder.from_pretrained` found in the checkpoint."""

    source: str
    """The checkpoint file(s) read."""
    missing_new: list[str] = field(default_factory=list)
    """Keys absent from the checkpoint that are new task-specific parameters."""
    unexpected: list[str] = field(default_factory=list)
    """Checkpoint keys the encoder does not use (pooler, pre-training heads): ignored."""


def encoder_keys(state: Mapping[str, torch.Tensor], model_prefix: str = "") -> dict[str, torch.Tensor]:
    """``state`` with every key under ``backbone.`` (dropping ``backbone.``/``model_prefix.``) and old
    ``LayerNorm.gamma/beta`` named ``weight/bias``."""
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
    """Copy each individual layer's weights to every group's ``individual.<group>.<layer>.*``; return the
    ``backbone.*`` keys copied (neither loaded nor reported as unused)."""
    copied: set[str] = set()
    for i in layers:
        prefix = f"{ENCODER_PREFIX}.{layers_path}.{i}."
        for key in [k for k in renamed if k.startswith(prefix)]:
            copied.add(key)
            for group in groups:
                renamed[f"{INDIVIDUAL_PREFIX}.{group}.{i}.{key.removeprefix(prefix)}"] = renamed[key]
    return copied


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
    """The tensors of ``state`` to load into an encoder whose state dict is ``expected``, and the
    :class:`LoadingInfo`; ``not_saved``: buffer keys neither loaded nor reported as unused. Raises
    ``PalUserError`` when a non-adapter key is missing or a shape differs."""
    renamed = encoder_keys(state, model_prefix)
    copied = copy_individual_layers(renamed, individual_layers, list(groups), layers_path)
    missing = sorted(set(expected) - set(renamed))
    not_new = [k for k in missing if not k.startswith(f"{ADAPTERS_PREFIX}.")]
    if not_new:
        shown = ", ".join(not_new[:8]) + (f" and {len(not_new) - 8} more" if len(not_new) > 8 else "")
        raise PalUserError(
            f"The checkpoint {source} lacks {len(not_new)} encoder weight(s) that are not new PAL "
            f"parameters: {shown}. Point the encoder at a complete checkpoint of the encoder's family (a folder saved with "
            "save_pretrained(), or a hub id)."
        )
    ignored = set(not_saved) | copied
    unexpected = sorted(k for k in renamed if k not in expected and k not in ignored)
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
    info = LoadingInfo(
        source=source,
        missing_new=[k for k in missing if k.startswith(f"{ADAPTERS_PREFIX}.")],
        unexpected=[k.removeprefix(f"{ENCODER_PREFIX}.") for k in unexpected],
    )
    return {k: v for k, v in renamed.items() if k in expected}, info
