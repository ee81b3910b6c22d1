"""Sentence pooling, per-task output heads, losses and predictions.

Everything here is a small pure function or a tiny ``nn.Module`` so that the
:class:`~pal_lightning.module.multitask.MultiTaskModule` (and its subclasses) can mix
them freely.

Pipeline for one batch of task ``t``::

    hidden [B,T,H] --pool--> u [B,H]            (single sentence, or a "cross" pair)
    hidden_a, hidden_b --pool--> u, v [B,H]      ("siamese" pair: each sentence alone)
    head(u) or head(u, v) --> output
    task_loss(spec, output, labels)   /   predict(spec, output)

Output conventions (the contract between heads, losses and predictions):

* classification: logits ``[B, C]`` with ``C = num_labels``, except for tasks
  whose loss is ``bce``, which get a single logit ``[B, 1]`` (``sigmoid`` of it
  is P(class 1));
* regression: a score ``[B]`` in the *normalised* 0..1 scale,
  ``label_scaled = (label - low) / (high - low)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskSpec

POOLING_MODES: tuple[str, ...] = ("cls", "mean")


def pool(hidden: Tensor, mask: Tensor | None, mode: str = "mean") -> Tensor:
    """Reduce token states to one vector per sequence.

    * ``cls``:  ``u = h[:, 0]`` (the ``[CLS]`` token, as BERT fine-tuning does);
    * ``mean``: ``u = sum_t m_t h_t / max(sum_t m_t, 1)``, the average over
      non-padding tokens only (how all-MiniLM-L6-v2 was trained). Padding must
      not count, or the same sentence would get a different vector depending on
      the longest sentence of its batch.

    Args:
        hidden: token states ``[B, T, H]``.
        mask: attention mask ``[B, T]`` (1 = token, 0 = padding); ``None`` means no padding.
        mode: ``"cls"`` or ``"mean"``.

    Returns:
        Pooled vectors ``[B, H]``.

    Raises:
        PalUserError: for an unknown ``mode``.
    """
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        if mask is None:
            return hidden.mean(dim=1)
        weights = mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
        # clamp: an all-padding row (should not happen) gives zeros, not NaN
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    raise PalUserError(
        f"Unknown pooling {mode!r}: choose one of {POOLING_MODES} (e.g. --model.pooling mean)."
    )


class TaskHead(nn.Module):
    """Base class of all heads: ``forward(u, v=None) -> output``.

    ``siamese`` is true for heads that need the second sentence's vector ``v``;
    the module then encodes the two sentences of a pair separately.
    """

    siamese: bool = False

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class LinearHead(TaskHead):
    """``output = W · dropout(u) + b`` on one pooled vector.

    Used for single sentences and for pairs encoded ``cross`` (one joint
    sequence). With ``out_features == 1`` and ``squeeze=True`` the output is a
    ``[B]`` regression score (normalised 0..1 scale, unbounded before clamping).
    """

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1, squeeze: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, out_features)
        self.squeeze = squeeze

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        out = self.linear(self.dropout(u))
        return out.squeeze(-1) if self.squeeze else out


class SiameseClassificationHead(TaskHead):
    """Sentence-BERT classification on two separately encoded sentences.

    ``logits = W · dropout([u, v, |u - v|, u * v]) + b`` with ``W`` of shape ``[C, 4H]``.
    """

    siamese = True

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(4 * hidden_size, out_features)

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        if v is None:
            raise ValueError("SiameseClassificationHead needs both sentence vectors u and v.")
        features = torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
        return self.linear(self.dropout(features))


class CosineSimilarityHead(TaskHead):
    """Similarity as a cosine: ``score = cos(u, v) = u·v / (|u| |v|)``, shape ``[B]``.

    The cosine *is* the score in the normalised 0..1 scale (it is trained with
    MSE against ``(label - low) / (high - low)``). It has no parameters. Its
    range is -1..1, so :func:`predict` clamps it to 0..1 before mapping it back
    to the task's scale (``low + score * (high - low)``).
    """

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        if v is None:
            raise ValueError("CosineSimilarityHead needs both sentence vectors u and v.")
        return F.cosine_similarity(u.float(), v.float(), dim=-1, eps=1e-8)


def check_loss(spec: TaskSpec) -> str:
    """The loss of ``spec`` after checking that it fits the task kind.

    Raises:
        PalUserError: ``mse`` on a classification task, or ``cross_entropy``/``bce`` on a regression task.
    """
    loss = spec.resolved_loss
    if spec.is_regression and loss != "mse":
        raise PalUserError(
            f"Task {spec.name!r} is a regression task but its loss is {loss!r}; use loss='mse' (or leave it unset)."
        )
    if not spec.is_regression and loss == "mse":
        raise PalUserError(
            f"Task {spec.name!r} is a classification task but its loss is 'mse'; "
            "use 'cross_entropy' or, for binary tasks, 'bce' (or leave it unset)."
        )
    return loss


def output_size(spec: TaskSpec) -> int:
    """Width of the head's output: ``num_labels`` logits, 1 logit for ``bce``, 1 score for regression."""
    if spec.is_regression or check_loss(spec) == "bce":
        return 1
    return spec.num_labels


def build_head(
    spec: TaskSpec, hidden_size: int, pair_encoding: str | dict[str, str], dropout: float
) -> TaskHead:
    """The head for one task.

    ============================= ======================= =================================
    task kind                     ``cross`` / single      ``siamese``
    ============================= ======================= =================================
    single-sentence class.        :class:`LinearHead`     (same: one sentence)
    pair classification           :class:`LinearHead`     :class:`SiameseClassificationHead`
    pair regression               :class:`LinearHead` [B] :class:`CosineSimilarityHead`
    ============================= ======================= =================================

    Args:
        spec: the task.
        hidden_size: encoder width ``H``.
        pair_encoding: ``"cross"``, ``"siamese"`` or a per-task mapping (see
            :func:`pal_lightning.core.batch.resolve_pair_encoding`); ignored for single sentences.
        dropout: dropout probability before the linear layer.
    """
    out = output_size(spec)
    encoding = resolve_pair_encoding(pair_encoding, spec.name) if spec.is_pair else "cross"
    if encoding == "siamese":
        if spec.is_regression:
            return CosineSimilarityHead()
        return SiameseClassificationHead(hidden_size, out, dropout)
    return LinearHead(hidden_size, out, dropout, squeeze=spec.is_regression)


def scale_labels(spec: TaskSpec, labels: Tensor) -> Tensor:
    """``(label - low) / (high - low)``: a regression label in the normalised 0..1 scale."""
    low, high = spec.label_range
    return (labels.float() - low) / (high - low)


def unscale_scores(spec: TaskSpec, scores: Tensor) -> Tensor:
    """``low + clamp(score, 0, 1) * (high - low)``: a 0..1 score back on the task's own scale."""
    low, high = spec.label_range
    return low + scores.float().clamp(0.0, 1.0) * (high - low)


def task_loss(spec: TaskSpec, output: Tensor, labels: Tensor) -> Tensor:
    """The training loss of one batch of ``spec``.

    * ``cross_entropy``: ``-mean_i log softmax(z_i)[y_i]`` on logits ``[B, C]``.
    * ``bce`` (binary tasks): ``-mean_i [y_i log σ(s_i) + (1 - y_i) log(1 - σ(s_i))]``
      where ``s`` is the single logit ``[B, 1]``/``[B]``; given two logits
      ``[B, 2]`` it uses ``s = z_1 - z_0`` (the log-odds of class 1 under a
      softmax, so that case equals 2-class cross-entropy).
    * ``mse`` (regression): ``mean_i (ŝ_i - (y_i - low)/(high - low))^2``, the
      score compared with the label scaled to 0..1 (no clamping while training,
      so the gradient never vanishes).

    Computed in float32 so that it is stable under mixed precision.
    """
    loss = check_loss(spec)
    output = output.float()
    if loss == "cross_entropy":
        return F.cross_entropy(output, labels.long())
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(binary_logit(output), labels.float())
    return F.mse_loss(output.reshape(-1), scale_labels(spec, labels))


def binary_logit(output: Tensor) -> Tensor:
    """One log-odds per example from ``[B]``, ``[B, 1]`` or two-class ``[B, 2]`` logits (``z_1 - z_0``)."""
    if output.dim() == 2 and output.shape[-1] == 2:
        return output[:, 1] - output[:, 0]
    return output.reshape(-1)


def predict(spec: TaskSpec, output: Tensor) -> Tensor:
    """Predictions on the task's own terms.

    Classification: class indices ``LongTensor[B]`` (``argmax`` of the logits;
    ``logit > 0`` for a single ``bce`` logit). Regression: ``FloatTensor[B]`` on
    the task's scale, ``low + clamp(score, 0, 1) * (high - low)``; the clamp
    keeps predictions inside ``label_range`` (a cosine can be negative, a
    linear score can overshoot).
    """
    if spec.is_regression:
        return unscale_scores(spec, output.reshape(-1))
    if output.dim() == 1 or output.shape[-1] == 1:
        return (output.reshape(-1) > 0).long()
    return output.argmax(dim=-1)
