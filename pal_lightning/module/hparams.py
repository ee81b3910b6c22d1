"""The module's hyper-parameter names by what they decide, each name listed once."""

from __future__ import annotations

#: Hyper-parameters that fix the shape or meaning of the weights: a checkpoint must agree on them.
ARCHITECTURE_HPARAMS: tuple[str, ...] = (
    "encoder",
    "bert_config",
    "adapter",
    "layer_sharing",
    "task_groups",
    "pooling",
    "pair_encoding",
    "heads",
)

#: Adapter options that only pick the starting values: a checkpoint trained with another still fits.
STARTING_VALUES_ONLY: frozenset[str] = frozenset({"init"})

#: Hyper-parameters that also fix the optimizer's parameter groups: a resumed ``fit`` needs them equal.
OPTIMIZER_HPARAMS: tuple[str, ...] = ("freeze_encoder", "freeze_embeddings", "adapter_lr", "layer_lr_decay")
