"""Pair heads from the literature beside the defaults, chosen per task with the module's ``heads`` option
(``{sts: cosine_rescaled, qqp: concat}``; why not ``5 · sigmoid(cos)``: docs/experiments.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import LinearHead, TaskHead, build_head, output_size, second
from pal_lightning.tasks.specs import TaskSpec

#: Head names a task may be given through the module's ``heads`` option.
HEAD_CHOICES: tuple[str, ...] = ("default", "cosine_rescaled", "concat", "sum")


def rescaled_cosine(u: Tensor, v: Tensor) -> Tensor:
    """``(cos(u, v) + 1) / 2``: the cosine mapped onto the 0..1 score scale."""
    return (F.cosine_similarity(u.float(), v.float(), dim=-1, eps=1e-8) + 1.0) / 2.0


class RescaledCosineHead(TaskHead):
    """Similarity as :func:`rescaled_cosine`, shape ``[B]``."""

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return rescaled_cosine(u, second(v, type(self).__name__))


class ConcatPairHead(LinearHead):
    """``output = W · dropout([u, v]) + b`` (not symmetric in the sentences)."""

    siamese = True

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1, squeeze: bool = False):
        super().__init__(2 * hidden_size, out_features, dropout, squeeze)

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return super().forward(torch.cat([u, second(v, type(self).__name__)], dim=-1))


class SumPairHead(LinearHead):
    """``output = W · dropout(u + v) + b`` (symmetric in the sentences)."""

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return super().forward(u + second(v, type(self).__name__))


def check_head_choice(spec: TaskSpec, head: str, encoding: str) -> None:
    """Refuse a head that does not fit the task's kind or pair encoding (:class:`PalUserError`)."""
    if head not in HEAD_CHOICES:
        raise PalUserError(f"Unknown head {head!r} for task {spec.name!r}: choose one of {HEAD_CHOICES}.")
    if head == "default":
        return
    if not spec.is_pair:
        raise PalUserError(
            f"Head {head!r} compares two sentences but task {spec.name!r} has one; "
            "leave it out of heads (its head is 'default')."
        )
    if head == "cosine_rescaled" and not spec.is_regression:
        raise PalUserError(
            f"Head 'cosine_rescaled' scores a similarity but task {spec.name!r} is a classification task; "
            "use 'concat', 'sum' or 'default' for it."
        )
    if encoding != "siamese":
        raise PalUserError(
            f"Head {head!r} for task {spec.name!r} needs each sentence encoded alone, but its pair_encoding "
            f"is {encoding!r}; set pair_encoding siamese for it (e.g. pair_encoding: {{{spec.name}: siamese, "
            "default: cross}, the same for the model and the data)."
        )


def build_task_head(
    spec: TaskSpec,
    hidden_size: int,
    pair_encoding: str | dict[str, str],
    dropout: float,
    head: str = "default",
) -> TaskHead:
    """The head named ``head`` for ``spec`` (:data:`HEAD_CHOICES`), after :func:`check_head_choice`."""
    encoding = resolve_pair_encoding(pair_encoding, spec.name) if spec.is_pair else "cross"
    check_head_choice(spec, head, encoding)
    if head == "cosine_rescaled":
        return RescaledCosineHead()
    if head in ("concat", "sum"):
        cls = ConcatPairHead if head == "concat" else SumPairHead
        return cls(hidden_size, output_size(spec), dropout, squeeze=spec.is_regression)
    return build_head(spec, hidden_size, pair_encoding, dropout)


def build_task_heads(
    specs: Sequence[TaskSpec],
    hidden_size: int,
    pair_encoding: str | dict[str, str],
    dropout: float,
    heads: Mapping[str, str] | None = None,
) -> dict[str, TaskHead]:
    """One head per task: the one ``heads`` names, else the task's default (:class:`PalUserError` if unfit)."""
    chosen = dict(heads or {})
    unknown = sorted(set(chosen) - {s.name for s in specs})
    if unknown:
        raise PalUserError(
            f"heads names task(s) {unknown} that the model does not have; its tasks are "
            f"{[s.name for s in specs]}."
        )
    return {
        s.name: build_task_head(s, hidden_size, pair_encoding, dropout, chosen.get(s.name, "default"))
        for s in specs
    }
