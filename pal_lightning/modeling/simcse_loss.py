"""The SimCSE contrastive loss (Gao, Yao & Chen, 2021) and a gradient-keeping gather for DDP.

InfoNCE with cosine similarity: anchor ``i`` must pick its own positive among all candidates::

    s_ij   = cos(z1_i, c_j) / tau          c = [z2 ; hard_negatives]   (rows)
    loss   = mean_i  -log( exp(s_i,t(i)) / sum_{j not ignored} exp(s_ij) )   t(i) = targets[i] (default i)

Unsupervised SimCSE: ``z1``/``z2`` are the same sentences encoded twice with different dropout masks.
Supervised SimCSE: ``z1`` anchors, ``z2`` their positives, ``hard_negatives`` extra rows that are
negatives for every anchor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pal_lightning.core import distributed


def simcse_loss(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.05,
    hard_negatives: Tensor | None = None,
    targets: Tensor | None = None,
    ignore: Tensor | None = None,
) -> Tensor:
    """InfoNCE of anchors ``z1 [N, H]`` against candidates ``z2 [M, H]`` (+ ``hard_negatives [K, H]``).

    Args:
        z1: anchor embeddings.
        z2: candidate embeddings; row ``targets[i]`` is anchor ``i``'s positive, every other row a negative.
        temperature: tau, the softmax temperature of the cosine similarities (0.05 in the paper).
        hard_negatives: extra negative rows shared by all anchors (supervised SimCSE), or ``None``.
        targets: index of each anchor's positive in ``z2`` (``LongTensor [N]``); ``None`` means
            ``arange(N)`` (``z2`` aligned with ``z1``). Under DDP, with ``z2`` gathered from all ranks,
            it is ``offset + arange(N)``.
        ignore: ``BoolTensor [N, M + K]``, true where a candidate is neither anchor ``i``'s positive nor a
            negative (e.g. the other sentence of its pair, a paraphrase): left out of the softmax.

    Returns:
        The mean loss over the anchors, a scalar.

    Raises:
        ValueError: for a non-positive temperature, no anchors, or mismatched widths.
    """
    if temperature <= 0:
        raise ValueError(f"simcse_loss needs temperature > 0, got {temperature}.")
    if z1.ndim != 2 or z2.ndim != 2 or z1.shape[1] != z2.shape[1] or z1.shape[0] == 0:
        raise ValueError(
            f"simcse_loss needs z1 [N>0, H] and z2 [M, H], got {tuple(z1.shape)}, {tuple(z2.shape)}."
        )
    candidates = z2 if hard_negatives is None else torch.cat([z2, hard_negatives.to(z2.dtype)])
    # in float32 even under bf16/fp16 autocast: at tau = 0.05 a cosine's rounding error of 4e-3 (bf16)
    # would move a logit by 0.08
    with torch.autocast(device_type=z1.device.type, enabled=False):
        # cosine similarity = dot product of L2-normalised rows (eps guards an all-zero vector)
        sims = F.normalize(z1.float(), dim=-1) @ F.normalize(candidates.float(), dim=-1).T / temperature
    if targets is None:
        targets = torch.arange(z1.shape[0], device=z1.device)
    if ignore is not None:  # must leave each anchor's positive in (else its loss is inf)
        sims = sims.masked_fill(ignore, float("-inf"))
    return F.cross_entropy(sims, targets)


def gather_rows(z: Tensor) -> tuple[Tensor, int]:
    """Rows of ``z`` from every DDP rank, concatenated in rank order, and the offset of this rank's rows.

    The local rows stay the tensor ``z`` itself, so gradients flow into them; the other ranks' rows are
    constants here (each rank back-propagates its own anchors' loss into its own embeddings, and DDP
    averages the gradients). Ranks may hold different numbers of rows (supervised SimCSE keeps only the
    positive pairs): sizes are exchanged first and rows padded to the largest. Without an initialised
    process group, or with one process, returns ``(z, 0)``. Every rank must call it at the same step.
    """
    if distributed.world_size() == 1:
        return z, 0
    rank = distributed.rank()
    parts = distributed.gather_tensors(z)
    rows = [z if r == rank else part for r, part in enumerate(parts)]
    return torch.cat(rows), sum(len(part) for part in parts[:rank])
