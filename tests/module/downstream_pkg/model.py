"""``MLPHeadModule``: a subclass with a constructor argument of its own and a head of its own, the shape of
the subclass in issue 43 (item 2) that the library's entry points refused."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from pal_lightning import MultiTaskModule


class MLPHead(nn.Module):
    """Two layers instead of the library's one: weights a ``MultiTaskModule`` does not have."""

    def __init__(self, width: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(width, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return self.out(nn.functional.gelu(self.hidden(u)))


class MLPHeadModule(MultiTaskModule):
    """The task ``mlp_task`` (a single-sentence classification task) gets an :class:`MLPHead` of
    ``mlp_width`` hidden units; the other tasks keep the library's heads."""

    def __init__(self, *args: Any, mlp_task: str = "sst", mlp_width: int = 16, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # save_hyperparameters records mlp_task and mlp_width too

    def build_heads(self) -> nn.ModuleDict:
        heads = super().build_heads()
        task, width = self.hparams["mlp_task"], self.hparams["mlp_width"]
        heads[task] = MLPHead(self.encoder.hidden_size, width, self.task_specs[task].num_labels)
        return heads
