"""The module's hyper-parameter names by what they decide, each name listed once.

:class:`~pal_lightning.module.multitask.MultiTaskModule` takes the adapter options as flat ``pal_*`` arguments
(one option per CLI flag); :data:`PAL_ARGUMENTS` maps them to the fields of
:class:`~pal_lightning.modeling.PALConfig`, and the checkpoint check derives from the same mapping
which of them fix the shape of the weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pal_lightning.modeling.methods.config import PALConfig

#: Module argument -> :class:`~pal_lightning.modeling.PALConfig` field, for every adapter option.
PAL_ARGUMENTS: dict[str, str] = {
    "adapter": "adapter",
    "pal_size": "pal_size",
    "pal_heads": "num_heads",
    "pal_placement": "placement",
    "pal_num_layers": "num_layers",
    "pal_init": "init",
    "pal_activation": "activation",
}

#: Adapter options that only pick the starting values, not the weights' shape or meaning: a
#: checkpoint trained with another ``pal_init`` still fits.
_STARTING_VALUES_ONLY = frozenset({"pal_init"})

#: Hyper-parameters that fix the shape or meaning of the weights: a checkpoint must agree on them.
ARCHITECTURE_HPARAMS: tuple[str, ...] = (
    "encoder",
    "bert_config",
    *(name for name in PAL_ARGUMENTS if name not in _STARTING_VALUES_ONLY),
    "layer_sharing",
    "task_groups",
    "pooling",
    "pair_encoding",
    "heads",
)

#: Hyper-parameters that also fix the optimizer's parameter groups: a resumed ``fit`` needs them equal.
OPTIMIZER_HPARAMS: tuple[str, ...] = ("freeze_encoder", "freeze_embeddings", "adapter_lr", "layer_lr_decay")

_PAL_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(PALConfig)}


def pal_config_kwargs(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`~pal_lightning.modeling.PALConfig` keyword arguments the module's ``hparams`` hold.

    An option missing from ``hparams`` (a checkpoint saved before the option existed, such as
    ``pal_activation``) takes :class:`~pal_lightning.modeling.PALConfig`'s default, which is what
    such a checkpoint was trained with.
    """
    return {field: hparams.get(name, _PAL_DEFAULTS[field]) for name, field in PAL_ARGUMENTS.items()}
