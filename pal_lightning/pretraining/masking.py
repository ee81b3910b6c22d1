"""BERT's masked-language-model corruption (Devlin et al. 2019), a pure function of the ids and a generator:
15 % of the maskable tokens (or whole words) chosen, of those 80 % ``[MASK]``, 10 % random, 10 % kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: Label of the positions that are not predicted (cross-entropy's ``ignore_index``).
IGNORE_INDEX = -100
#: Fractions of the chosen tokens that become ``[MASK]`` and a random token (the rest stay unchanged).
MASK_FRACTION = 0.8
RANDOM_FRACTION = 0.1


def maskable_positions(input_ids: Tensor, attention_mask: Tensor, special_ids: Sequence[int]) -> Tensor:
    """Positions that may be chosen: real tokens (mask 1) that are not special tokens."""
    special = torch.tensor(
        sorted({int(i) for i in special_ids}), dtype=input_ids.dtype, device=input_ids.device
    )
    return attention_mask.bool() & ~torch.isin(input_ids, special)


def mask_tokens(
    input_ids: Tensor,
    maskable: Tensor,
    *,
    mask_token_id: int,
    random_ids: Tensor,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
    word_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT masking of a batch: ``(corrupted input_ids, labels)`` (labels ``-100`` where not chosen).

    Args:
        input_ids: ``[B, T]`` token ids (on the CPU, like ``generator``).
        maskable: ``[B, T]`` bool, the positions that may be chosen (:func:`maskable_positions`).
        mask_token_id: id of ``[MASK]``.
        random_ids: 1-D ids a random replacement is drawn from, uniformly.
        probability: chance that a maskable token (or, with ``word_ids``, a word) is chosen.
        generator: the random stream.
        word_ids: ``[B, T]`` word of each token (``-1`` outside words): whole words are chosen.
    """
    if not 0.0 < probability <= 1.0:
        raise ValueError(f"The masking probability must lie in (0, 1], got {probability}.")
    if random_ids.numel() == 0:
        raise ValueError("random_ids is empty: no token to draw random replacements from.")
    shape = input_ids.shape
    if word_ids is None:
        chosen = torch.rand(shape, generator=generator) < probability
    else:
        words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
        chosen_word = torch.rand((shape[0], max(words, 1)), generator=generator) < probability
        chosen = chosen_word.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)
    chosen &= maskable
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    # one uniform per token splits the chosen ones 80 / 10 / 10
    u = torch.rand(shape, generator=generator)
    to_mask = chosen & (u < MASK_FRACTION)
    to_random = chosen & (u >= MASK_FRACTION) & (u < MASK_FRACTION + RANDOM_FRACTION)
    draws = torch.randint(len(random_ids), shape, generator=generator)
    corrupted = input_ids.clone()
    corrupted[to_mask] = mask_token_id
    corrupted[to_random] = random_ids[draws[to_random]].to(input_ids.dtype)
    return corrupted, labels
