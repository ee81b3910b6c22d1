"""Heads of sentence pairs that the literature used beside the library's defaults, chosen per task.

The default head of a task follows from its kind and pair encoding (:func:`~pal_lightning.modeling.heads.
build_head`). The module's ``heads`` option names another one per task::

    heads: {sts: cosine_rescaled, qqp: concat}

================= ============================== ===================================================
name              tasks                          output
================= ============================== ===================================================
``default``       any                            what :func:`~pal_lightning.modeling.heads.build_head`
                                                 builds (today's behaviour)
``cosine_rescaled`` pair regression, siamese     ``(cos(u, v) + 1) / 2``: on STS's 0..5 scale the
                                                 prediction ``2.5 (cos + 1)``
``concat``        pair tasks, siamese            ``W · dropout([u, v]) + b`` (``W``: ``[C, 2H]``)
``sum``           pair tasks, siamese            ``W · dropout(u + v) + b`` (``W``: ``[C, H]``)
================= ============================== ===================================================

Why ``cosine_rescaled`` is the affine map of the cosine and not ``5 · sigmoid(cos)``: the cosine lies in
-1..1, and ``sigmoid`` maps that interval to 0.27..0.73 only, so ``5 · sigmoid(cos)`` can never predict
a score below 1.34 or above 3.66 (a third of STS's labels lie outside) unless a learned temperature is
added. ``(cos + 1) / 2`` reaches the whole 0..1 range (0..5 on STS's scale) with no parameter, never
needs the clamp of :func:`~pal_lightning.modeling.heads.predict` and keeps a gradient everywhere. The
default siamese STS head, :class:`~pal_lightning.modeling.heads.CosineSimilarityHead`, is the other
form of the literature (Sentence-BERT's: ``cos`` against ``label / 5``, so prediction ``5 · clamp(cos, 0,
1)``), which maps every negative cosine to 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import LinearHead, TaskHead, build_head, output_size
from pal_lightning.tasks.specs import TaskSpec

#: Head names a task may be given through the module's ``heads`` option.
HEAD_CHOICES: tuple[str, ...] = ("default", "cosine_rescaled", "concat", "sum")


def _pair(u: Tensor, v: Tensor | None, head: str) -> Tensor:
    """``v``, after checking that the head was given the second sentence's vector."""
    if v is None:
        raise ValueError(f"{head} needs both sentence vectors u and v.")
    return v


def rescaled_cosine(u: Tensor, v: Tensor) -> Tensor:
    """``(cos(u, v) + 1) / 2``: the cosine's -1..1 mapped onto the normalised 0..1 score scale."""
    return (F.cosine_similarity(u.float(), v.float(), dim=-1, eps=1e-8) + 1.0) / 2.0


class RescaledCosineHead(TaskHead):
    """Similarity as ``(cos(u, v) + 1) / 2``, shape ``[B]``, no parameters (:func:`rescaled_cosine`)."""

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return rescaled_cosine(u, _pair(u, v, type(self).__name__))


class ConcatPairHead(LinearHead):
    """``output = W · dropout([u, v]) + b`` on two separately encoded sentences (``W``: ``[C, 2H]``).

    Not symmetric: swapping the sentences changes the output (unlike the default ``[u, v, |u-v|, u*v]``
    head's last two features).
    """

    siamese = True

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1, squeeze: bool = False):
        super().__init__(2 * hidden_size, out_features, dropout, squeeze)

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return super().forward(torch.cat([u, _pair(u, v, type(self).__name__)], dim=-1))


class SumPairHead(LinearHead):
    """``output = W · dropout(u + v) + b`` on two separately encoded sentences (``W``: ``[C, H]``).

    Symmetric in the two sentences, and as small as a single-sentence head.
    """

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return super().forward(u + _pair(u, v, type(self).__name__))


def check_head_choice(spec: TaskSpec, head: str, encoding: str) -> None:
    """Refuse a head that does not fit the task's kind or pair encoding.

    Raises:
        PalUserError: an unknown name, a pair head on a single-sentence task, ``cosine_rescaled`` on a
            classification task, or a pair head on a task encoded ``cross``.
    """
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
    """One head per task, keyed by name: the one ``heads`` names, else the task's default.

    Raises:
        PalUserError: ``heads`` names a task that is not in ``specs``, or a head that does not fit.
    """
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
