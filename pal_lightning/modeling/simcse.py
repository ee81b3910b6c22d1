"""SimCSE as an auxiliary loss of multi-task training: its configuration and the sentences of a batch.

The sentences come from the current step's batch: a single-sentence task gives its sentences, a pair
task both sides of every pair (a ``cross`` pair ``[CLS] a [SEP] b [SEP]`` is cut back into
``[CLS] a [SEP]`` and ``[CLS] b [SEP]`` by its segment ids). The module encodes them with the batch's
task active (its PAL adapter; the plain encoder with ``adapter: none``) and its own pooling:

* ``unsup``: every sentence twice with independent dropout masks; the two views of a sentence are
  positives, all other sentences negatives;
* ``sup``: each pair once; pairs labelled ``positive_label`` give anchor ``a`` and positive ``b``,
  pairs labelled ``hard_negative_label`` (if set) give their ``b`` as a hard negative for every anchor.

In training the step's own task forward (single sentences, ``siamese`` pairs) is the first view, so
``unsup`` costs one more forward/backward of the sentences and ``sup`` none; ``cross`` pairs, whose
task forward sees the pair as one sequence, need both views encoded (in one pass of ``2N``).

The loss is :func:`simcse_loss` at the end of this module, a pure function of embeddings (no model, no
data code), with :func:`gather_rows`, a gather for DDP that keeps the gradient. It is the SimCSE
contrastive loss (Gao, Yao & Chen, 2021).

InfoNCE with cosine similarity: anchor ``i`` must pick its own positive among all candidates::

    s_ij   = cos(z1_i, c_j) / tau          c = [z2 ; hard_negatives]   (rows)
    loss   = mean_i  -log( exp(s_i,t(i)) / sum_{j not ignored} exp(s_ij) )   t(i) = targets[i] (default i)

Unsupervised SimCSE: ``z1``/``z2`` are the same sentences encoded twice with different dropout masks.
Supervised SimCSE: ``z1`` anchors, ``z2`` their positives, ``hard_negatives`` extra rows that are
negatives for every anchor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from pal_lightning.core import distributed
from pal_lightning.core.batch import (
    ATTENTION_MASK,
    INPUT_IDS,
    LABELS,
    TOKEN_TYPE_IDS,
    concat_inputs,
    side_inputs,
    side_keys,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskKind, TaskSpec

SimCSEMode = Literal["unsup", "sup"]
SIMCSE_MODES: tuple[str, ...] = ("unsup", "sup")
#: ``input_ids`` / ``attention_mask`` / ``token_type_ids`` of a set of sentences.
Inputs = dict[str, Tensor]


@dataclass
class SimCSEConfig:
    """SimCSE (Gao, Yao & Chen 2021) as an auxiliary loss added to the task loss of a training step.

    The step's loss becomes ``task_loss + weight * simcse_loss`` on the steps whose task is in ``tasks``
    (and whose step number is a multiple of ``every_k_steps``); validation and GEM's memory gradients
    use the task loss alone.
    """

    weight: float = 1.0
    """Factor of the SimCSE loss in the step's loss. 0 switches SimCSE off (no extra forward pass). 1.0, the
    plain sum: on all-MiniLM-L6-v2 (already a contrastive sentence encoder) the SimCSE gradient on the
    encoder is about 1-15 % of the task gradient at weight 1, so 0.1 would make it a near no-op."""
    temperature: float = 0.05
    """Softmax temperature tau of the cosine similarities (the paper's 0.05)."""
    tasks: list[str] | None = None
    """Tasks whose batches also train SimCSE, on their own text (both sides of a pair). ``None``: every
    task of the model (in ``sup`` mode: every pair classification task)."""
    every_k_steps: int = 1
    """Add the loss on optimizer steps ``0, k, 2k, ...`` only (1 = every step); each ``unsup`` SimCSE step
    costs an extra forward and backward of the batch's sentences (two for ``cross`` pairs)."""
    mode: SimCSEMode = "unsup"
    """``unsup``: each sentence encoded twice with dropout, the two views are positives. ``sup``: pairs
    labelled ``positive_label`` are positives (e.g. Quora duplicates), pairs labelled
    ``hard_negative_label`` give hard negatives; needs pair classification tasks."""
    positive_label: int = 1
    """``sup`` mode: the class whose pairs are positives (1 = duplicate for ``qqp``)."""
    hard_negative_label: int | None = None
    """``sup`` mode: the class whose pairs' second sentences are hard negatives (e.g. 0 for ``qqp``,
    contradiction for NLI); ``None``: only in-batch negatives."""
    mask_pair_partners: bool = True
    """``unsup`` mode on pair tasks: the other sentence of a sentence's pair, and any identical sentence of
    the batch, is not used as its negative (paraphrase and STS pairs would otherwise push similar sentences
    apart). ``False``: every other sentence is a negative, as in the paper's single-sentence setting."""
    gather_across_ranks: bool = False
    """Under DDP, use the other ranks' sentences as extra negatives (all-gather of the embeddings;
    gradients flow into the local ones). Off: each rank contrasts its own batch."""

    def active_tasks(self, specs: Mapping[str, TaskSpec]) -> tuple[str, ...]:
        """The tasks that get SimCSE, after :meth:`check` (``tasks`` or the default set)."""
        if self.tasks is not None:
            return tuple(self.tasks)
        if self.mode == "sup":
            return tuple(n for n, s in specs.items() if s.kind is TaskKind.PAIR_CLASSIFICATION)
        return tuple(specs)

    def check(self, specs: Mapping[str, TaskSpec]) -> None:
        """Refuse settings that cannot work with the model's tasks.

        Raises:
            PalUserError: one line naming the bad field and the fix.
        """
        if self.weight < 0:
            raise PalUserError(f"simcse.weight must be >= 0 (0 switches SimCSE off), got {self.weight}.")
        if self.temperature <= 0:
            raise PalUserError(
                f"simcse.temperature must be > 0 (the paper uses 0.05), got {self.temperature}."
            )
        if self.every_k_steps < 1:
            raise PalUserError(f"simcse.every_k_steps must be >= 1, got {self.every_k_steps}.")
        if self.mode not in SIMCSE_MODES:
            raise PalUserError(f"simcse.mode {self.mode!r} is unknown: choose one of {SIMCSE_MODES}.")
        unknown = [t for t in (self.tasks or []) if t not in specs]
        if unknown:
            raise PalUserError(
                f"simcse.tasks names task(s) {unknown} that the model does not train; choose from "
                f"{sorted(specs)} (--model.simcse.tasks '[sst, qqp]')."
            )
        tasks = self.active_tasks(specs)
        if not tasks:
            what = "pair classification tasks (sup mode)" if self.mode == "sup" else "tasks"
            raise PalUserError(
                f"simcse has no {what} to take sentences from: list them in simcse.tasks, use mode "
                "'unsup', or set simcse.weight 0 / simcse null to switch it off."
            )
        if self.mode == "sup":
            wrong = [t for t in tasks if specs[t].kind is not TaskKind.PAIR_CLASSIFICATION]
            if wrong:
                raise PalUserError(
                    f"simcse mode 'sup' needs pair classification tasks whose labels mark positives, but "
                    f"{wrong} are not; use mode 'unsup' for them or drop them from simcse.tasks."
                )
            for t in tasks:
                low, high = specs[t].label_range
                for field, label in (
                    ("positive_label", self.positive_label),
                    ("hard_negative_label", self.hard_negative_label),
                ):
                    if label is not None and not low <= label <= high:
                        raise PalUserError(
                            f"simcse.{field} {label} is not a label of task {t!r} (labels {low:g}..{high:g})."
                        )


def as_simcse_config(value: SimCSEConfig | Mapping[str, Any] | None) -> SimCSEConfig | None:
    """A :class:`SimCSEConfig` from itself, a plain mapping (saved hyper-parameters) or ``None``."""
    if value is None or isinstance(value, SimCSEConfig):
        return value
    if isinstance(value, Mapping):
        try:
            return SimCSEConfig(**dict(value))
        except TypeError as err:
            raise PalUserError(f"simcse: {err}; fields are those of SimCSEConfig.") from None
    raise PalUserError(f"simcse must be a SimCSEConfig, a mapping or null, got {type(value).__name__}.")


def split_cross_pairs(inputs: Mapping[str, Tensor]) -> tuple[Inputs, Inputs]:
    """Cut ``cross`` pairs ``[CLS] a [SEP] b [SEP]`` (segments 0 then 1) into ``[CLS] a [SEP]`` and ``[CLS] b [SEP]``.

    The first sentence is the segment-0 prefix of each row; the second gets the row's first token
    (``[CLS]``) in front of its segment-1 tokens. Both come back right-padded, with segment ids 0.

    Raises:
        PalUserError: when the batch has no ``token_type_ids`` or a row has no second segment.
    """
    ids, mask, types = inputs[INPUT_IDS], inputs[ATTENTION_MASK], inputs.get(TOKEN_TYPE_IDS)
    if types is None:
        raise PalUserError("SimCSE on 'cross' pairs needs token_type_ids to find the two sentences.")
    mask = mask.bool()
    len_a = (mask & (types == 0)).sum(1)
    len_b = (mask & (types == 1)).sum(1)
    if bool((len_b == 0).any()):
        raise PalUserError(
            "SimCSE on 'cross' pairs found a row without a second sentence (no segment-1 tokens); "
            "use pair_encoding 'siamese' for this task."
        )
    positions = torch.arange(ids.shape[1], device=ids.device)
    width_a = int(len_a.max())
    mask_a = positions[:width_a].unsqueeze(0) < len_a.unsqueeze(1)
    ids_a = ids[:, :width_a] * mask_a
    width_b = int(len_b.max())
    offsets = positions[:width_b].unsqueeze(0)
    mask_b_tail = offsets < len_b.unsqueeze(1)
    index = (len_a.unsqueeze(1) + offsets).clamp(max=ids.shape[1] - 1)
    tail = torch.gather(ids, 1, index) * mask_b_tail
    ids_b = torch.cat([ids[:, :1], tail], dim=1)
    mask_b = torch.cat([torch.ones_like(mask_b_tail[:, :1]), mask_b_tail], dim=1)
    side_a = {INPUT_IDS: ids_a, ATTENTION_MASK: mask_a.long(), TOKEN_TYPE_IDS: torch.zeros_like(ids_a)}
    side_b = {INPUT_IDS: ids_b, ATTENTION_MASK: mask_b.long(), TOKEN_TYPE_IDS: torch.zeros_like(ids_b)}
    return side_a, side_b


def batch_sentences(batch: Mapping[str, Any], spec: TaskSpec) -> tuple[Inputs, Inputs | None]:
    """The sentences of a batch: ``(first, None)`` for a single-sentence task, ``(first, second)`` for pairs."""
    if not spec.is_pair:
        return side_inputs(batch, ""), None
    if side_keys("a")[0] in batch:  # siamese: each sentence already alone
        return side_inputs(batch, "a"), side_inputs(batch, "b")
    return split_cross_pairs(batch)


def simcse_batch_loss(
    encode: Callable[[Inputs], Tensor],
    batch: Mapping[str, Any],
    spec: TaskSpec,
    config: SimCSEConfig,
    first_view: Tensor | None = None,
) -> Tensor:
    """SimCSE loss of one training batch; ``encode`` maps encoder inputs to pooled vectors ``[N, H]``.

    ``encode`` must run with dropout on (training mode) and the batch's task active. ``first_view``:
    the batch's sentences (``[a; b]`` for pairs) already encoded the same way, e.g. by the step's task
    forward; it is then the first view (``unsup``: one more pass gives the second; ``sup``: no more
    pass at all). Without it (or with a row count that does not fit) every view is encoded here.
    Every DDP rank must call this at the same steps when ``config.gather_across_ranks`` is set (the
    task sampler gives all ranks the same task, so they do).
    """
    first, second = batch_sentences(batch, spec)
    rows = first[INPUT_IDS].shape[0] * (1 if second is None else 2)
    if first_view is not None and first_view.shape[0] != rows:
        first_view = None
    ignore = None
    if config.mode == "unsup":
        sentences = first if second is None else concat_inputs([first, second])
        if first_view is None:  # one pass of 2N sequences: every copy gets its own dropout mask
            z1, z2 = encode(concat_inputs([sentences, sentences])).chunk(2)
        else:
            z1, z2 = first_view, encode(sentences)
        hard = None
        if second is not None and config.mask_pair_partners:
            ignore = not_negatives(sentences)
    else:
        if second is None or LABELS not in batch:
            raise PalUserError(f"simcse mode 'sup' needs labelled pairs; the {spec.name!r} batch has none.")
        u, v = (encode(concat_inputs([first, second])) if first_view is None else first_view).chunk(2)
        labels = batch[LABELS]
        positive = labels == config.positive_label
        z1, z2 = u[positive], v[positive]
        hard = v[labels == config.hard_negative_label] if config.hard_negative_label is not None else None
    targets = None
    if config.gather_across_ranks:
        local = z2.shape[0]
        z2, offset = gather_rows(z2)
        targets = offset + torch.arange(z1.shape[0], device=z1.device)
        if hard is not None:
            hard, _ = gather_rows(hard)
        if ignore is not None:  # the local block of the gathered candidates; other ranks' are all negatives
            wide = ignore.new_zeros((ignore.shape[0], z2.shape[0]))
            wide[:, offset : offset + local] = ignore
            ignore = wide
    if z1.shape[0] == 0:
        # no positive pair on this rank: nothing to learn from (the graph is kept for DDP's backward)
        return u.sum() * 0.0
    return simcse_loss(z1, z2, config.temperature, hard_negatives=hard, targets=targets, ignore=ignore)


def not_negatives(sentences: Mapping[str, Tensor]) -> Tensor:
    """``BoolTensor [2N, 2N]`` for the sentences ``[a_1..a_N, b_1..b_N]`` of N pairs: true where column ``j``
    is the other sentence of row ``i``'s pair or the same token sequence as row ``i`` (but not ``i``
    itself, the positive)."""
    ids = sentences[INPUT_IDS] * sentences[ATTENTION_MASK]
    n2 = ids.shape[0]
    half = n2 // 2
    same = (ids.unsqueeze(1) == ids.unsqueeze(0)).all(-1)
    rows = torch.arange(n2, device=ids.device)
    partner = torch.zeros_like(same)
    partner[rows, (rows + half) % n2] = True
    return (same | partner) & ~torch.eye(n2, dtype=torch.bool, device=ids.device)


# ------------------------------------------------------------------ the loss: pure functions of embeddings
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
