"""Sentence pooling, per-task output heads, losses and predictions: classification heads give logits
``[B, C]`` (``[B, 1]`` for ``bce``), regression heads a score ``[B]`` on the 0..1 scale."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskSpec

POOLING_MODES: tuple[str, ...] = ("cls", "mean")


def pool(hidden: Tensor, mask: Tensor | None, mode: str = "mean") -> Tensor:
    """One vector ``[B, H]`` per sequence of ``hidden [B, T, H]``: ``cls`` (``h[:, 0]``) or ``mean`` (over the
    tokens of ``mask``, 1 = token; ``None``: no padding). Raises ``PalUserError`` for an unknown ``mode``."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        if mask is None:
            return hidden.mean(dim=1)
        weights = mask.to(hidden.dtype).unsqueeze(-1)  # [B, T, 1]
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
    raise PalUserError(
        f"Unknown pooling {mode!r}: choose one of {POOLING_MODES} (e.g. --model.pooling mean)."
    )


def second(v: Tensor | None, head: str) -> Tensor:
    """``v``, the second sentence's vector, which the pair head ``head`` needs (``ValueError`` if ``None``)."""
    if v is None:
        raise ValueError(f"{head} needs both sentence vectors u and v.")
    return v


class TaskHead(nn.Module):
    """Base class of all heads: ``forward(u, v=None) -> output``; ``siamese`` heads need ``v``."""

    siamese: bool = False

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class LinearHead(TaskHead):
    """``output = W · dropout(u) + b`` (``squeeze``: a ``[B]`` score)."""

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1, squeeze: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, out_features)
        self.squeeze = squeeze

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        out = self.linear(self.dropout(u))
        return out.squeeze(-1) if self.squeeze else out


class SiameseClassificationHead(TaskHead):
    """Sentence-BERT classification: ``W · dropout([u, v, |u - v|, u * v]) + b``."""

    siamese = True

    def __init__(self, hidden_size: int, out_features: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(4 * hidden_size, out_features)

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        v = second(v, "SiameseClassificationHead")
        features = torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
        return self.linear(self.dropout(features))


class CosineSimilarityHead(TaskHead):
    """``cos(u, v)`` as the 0..1 score, shape ``[B]`` (:func:`predict` clamps it)."""

    siamese = True

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return F.cosine_similarity(u.float(), second(v, "CosineSimilarityHead").float(), dim=-1, eps=1e-8)


def check_loss(spec: TaskSpec) -> str:
    """The loss of ``spec``, checked against the task kind. Raises ``PalUserError`` ``mse`` on a
    classification task, or ``cross_entropy``/``bce`` on a regression task."""
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
    """The default head of one task: :class:`LinearHead`, or for ``siamese`` pairs
    :class:`SiameseClassificationHead` (classification) or :class:`CosineSimilarityHead` (regression)."""
    out = output_size(spec)
    encoding = resolve_pair_encoding(pair_encoding, spec.name) if spec.is_pair else "cross"
    if encoding == "siamese":
        if spec.is_regression:
            return CosineSimilarityHead()
        return SiameseClassificationHead(hidden_size, out, dropout)
    return LinearHead(hidden_size, out, dropout, squeeze=spec.is_regression)


def task_loss(spec: TaskSpec, output: Tensor, labels: Tensor) -> Tensor:
    """The training loss of one batch of ``spec`` (cross-entropy, BCE or MSE on the 0..1 scale), in fp32."""
    loss = check_loss(spec)
    output = output.float()
    if loss == "cross_entropy":
        return F.cross_entropy(output, labels.long())
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(binary_logit(output), labels.float())
    low, high = spec.label_range  # a regression label on the 0..1 scale
    return F.mse_loss(output.reshape(-1), (labels.float() - low) / (high - low))


def binary_logit(output: Tensor) -> Tensor:
    """One log-odds per example from ``[B]``, ``[B, 1]`` or two-class ``[B, 2]`` logits (``z_1 - z_0``)."""
    if output.dim() == 2 and output.shape[-1] == 2:
        return output[:, 1] - output[:, 0]
    return output.reshape(-1)


def predict(spec: TaskSpec, output: Tensor) -> Tensor:
    """Class indices ``[B]``, or regression scores on the task's scale (clamped to ``label_range``)."""
    if spec.is_regression:
        low, high = spec.label_range
        return low + output.reshape(-1).float().clamp(0.0, 1.0) * (high - low)
    if output.dim() == 1 or output.shape[-1] == 1:
        return (output.reshape(-1) > 0).long()
    return output.argmax(dim=-1)
