"""SimCSE (Gao, Yao & Chen, 2021) as an auxiliary loss: its configuration, the sentences of a batch,
and the InfoNCE loss :func:`simcse_loss` (docs/experiments.md, "SimCSE")."""

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
    """SimCSE (Gao, Yao & Chen 2021): a training step's loss becomes ``task_loss + weight * simcse_loss``."""

    weight: float = 1.0
    """Factor of the SimCSE loss in the step's loss; 0 switches SimCSE off."""
    temperature: float = 0.05
    """Softmax temperature tau of the cosine similarities (the paper's 0.05)."""
    tasks: list[str] | None = None
    """Tasks whose batches also train SimCSE. ``None``: every task (``sup``: every pair classification task)."""
    every_k_steps: int = 1
    """Add the loss on optimizer steps ``0, k, 2k, ...`` only (1 = every step)."""
    mode: SimCSEMode = "unsup"
    """``unsup``: two dropout views of a sentence are positives. ``sup``: pairs labelled
    ``positive_label`` are positives (needs pair classification tasks)."""
    positive_label: int = 1
    """``sup`` mode: the class whose pairs are positives (1 = duplicate for ``qqp``)."""
    hard_negative_label: int | None = None
    """``sup`` mode: the class whose pairs' second sentences are hard negatives (``None``: none)."""
    mask_pair_partners: bool = True
    """``unsup`` on pair tasks: a sentence's pair partner and identical sentences are not its negatives."""
    gather_across_ranks: bool = False
    """Under DDP, use the other ranks' sentences as extra negatives."""

    def active_tasks(self, specs: Mapping[str, TaskSpec]) -> tuple[str, ...]:
        """The tasks that get SimCSE."""
        if self.tasks is not None:
            return tuple(self.tasks)
        if self.mode == "sup":
            return tuple(n for n, s in specs.items() if s.kind is TaskKind.PAIR_CLASSIFICATION)
        return tuple(specs)

    def check(self, specs: Mapping[str, TaskSpec]) -> None:
        """Raise :class:`PalUserError` for settings that cannot work with the model's tasks."""
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
    """A :class:`SimCSEConfig` from itself, a mapping or ``None``."""
    if value is None or isinstance(value, SimCSEConfig):
        return value
    if isinstance(value, Mapping):
        try:
            return SimCSEConfig(**dict(value))
        except TypeError as err:
            raise PalUserError(f"simcse: {err}; fields are those of SimCSEConfig.") from None
    raise PalUserError(f"simcse must be a SimCSEConfig, a mapping or null, got {type(value).__name__}.")


def split_cross_pairs(inputs: Mapping[str, Tensor]) -> tuple[Inputs, Inputs]:
    """Cut ``cross`` pairs ``[CLS] a [SEP] b [SEP]`` into ``[CLS] a [SEP]`` and ``[CLS] b [SEP]``
    (right-padded). Raises ``PalUserError`` when the batch has no ``token_type_ids`` or a row has no second
    segment."""
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
    """The sentences of a batch: ``(first, None)``, or ``(first, second)`` for pairs."""
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
    """SimCSE loss of one batch; ``encode`` maps inputs to pooled vectors (dropout on); ``first_view``: the
    sentences (``[a; b]`` for pairs) already encoded, used as the first view when the rows fit."""
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
    """``[2N, 2N]`` for ``[a_1..a_N, b_1..b_N]``: true where ``j`` is ``i``'s pair partner or the same text."""
    ids = sentences[INPUT_IDS] * sentences[ATTENTION_MASK]
    n2 = ids.shape[0]
    half = n2 // 2
    same = (ids.unsqueeze(1) == ids.unsqueeze(0)).all(-1)
    rows = torch.arange(n2, device=ids.device)
    partner = torch.zeros_like(same)
    partner[rows, (rows + half) % n2] = True
    return (same | partner) & ~torch.eye(n2, dtype=torch.bool, device=ids.device)


def simcse_loss(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.05,
    hard_negatives: Tensor | None = None,
    targets: Tensor | None = None,
    ignore: Tensor | None = None,
) -> Tensor:
    """Mean InfoNCE of anchors ``z1 [N, H]`` against ``z2 [M, H]`` (+ ``hard_negatives``) by cosine / tau;
    ``targets``: each anchor's positive row (default ``arange(N)``); ``ignore [N, M + K]``: left out. Raises
    ``ValueError`` for a non-positive temperature, no anchors, or mismatched widths."""
    if temperature <= 0:
        raise ValueError(f"simcse_loss needs temperature > 0, got {temperature}.")
    if z1.ndim != 2 or z2.ndim != 2 or z1.shape[1] != z2.shape[1] or z1.shape[0] == 0:
        raise ValueError(
            f"simcse_loss needs z1 [N>0, H] and z2 [M, H], got {tuple(z1.shape)}, {tuple(z2.shape)}."
        )
    candidates = z2 if hard_negatives is None else torch.cat([z2, hard_negatives.to(z2.dtype)])
    # fp32 even under autocast: at tau = 0.05 a bf16 rounding error moves a logit noticeably
    with torch.autocast(device_type=z1.device.type, enabled=False):
        sims = F.normalize(z1.float(), dim=-1) @ F.normalize(candidates.float(), dim=-1).T / temperature
    if targets is None:
        targets = torch.arange(z1.shape[0], device=z1.device)
    if ignore is not None:  # must leave each anchor's positive in (else its loss is inf)
        sims = sims.masked_fill(ignore, float("-inf"))
    return F.cross_entropy(sims, targets)


def gather_rows(z: Tensor) -> tuple[Tensor, int]:
    """Rows of ``z`` from every DDP rank in rank order (the local ones keep their gradient), and this rank's
    offset; ``(z, 0)`` with one process."""
    if distributed.world_size() == 1:
        return z, 0
    rank = distributed.rank()
    parts = distributed.gather_tensors(z)
    rows = [z if r == rank else part for r, part in enumerate(parts)]
    return torch.cat(rows), sum(len(part) for part in parts[:rank])
