"""The package's model: uncertainty-weighted task losses (Kendall et al., 2018) and an MLP head for one task."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pal_lightning import MultiTaskModule
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import LinearHead, TaskHead
from pal_lightning.modeling.param_groups import OwnGroup


class MLPHead(TaskHead):
    """``W2 · gelu(W1 · dropout(u) + b1) + b2``: a hidden layer of ``hidden`` units before the logits."""

    def __init__(self, hidden_size: int, hidden: int, out_features: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(hidden_size, hidden), nn.GELU(), nn.Linear(hidden, out_features)
        )

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return self.net(u)


class UncertaintyWeighted(MultiTaskModule):
    """Each task's loss weighted by a learned log-variance ``s_t``: ``exp(-s_t) * loss + s_t``.

    Args:
        mlp_task: the classification task (encoded as one sequence) whose head is an :class:`MLPHead`.
        mlp_hidden: the MLP head's hidden units.
        log_var_lr: peak learning rate of the log-variances, in an optimizer group of their own (no decay).
        *args, **kwargs: :class:`~pal_lightning.MultiTaskModule`'s.
    """

    def __init__(
        self,
        *args: Any,
        mlp_task: str = "sst",
        mlp_hidden: int = 16,
        log_var_lr: float = 0.05,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)  # build_heads reads mlp_task and mlp_hidden from self.hparams
        self.log_vars = nn.Parameter(torch.zeros(len(self.task_specs)))
        self._task_index = {task: i for i, task in enumerate(self.task_specs)}

    def build_heads(self) -> nn.ModuleDict:
        heads = super().build_heads()
        task, hidden = self.hparams["mlp_task"], int(self.hparams["mlp_hidden"])
        default = heads[task] if task in heads else None
        if not isinstance(default, LinearHead) or self.task_specs[task].is_regression:
            raise PalUserError(
                f"mlp_task {task!r} must be a classification task of the model scored from one vector "
                f"(tasks: {list(self.task_specs)}); pass --model.init_args.mlp_task sst."
            )
        heads[task] = MLPHead(
            self.encoder.hidden_size, hidden, default.linear.out_features, float(self.hparams["dropout"])
        )
        return heads

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        s = self.log_vars[self._task_index[task]]
        return torch.exp(-s) * super().compute_loss(task, output, labels) + s

    def parameter_group_of(self, name: str, parameter: nn.Parameter) -> Any:
        if name == "log_vars":
            return OwnGroup("log_vars", lr=float(self.hparams["log_var_lr"]), weight_decay=0.0)
        return None  # everything else where the library puts it
