"""BERT masking statistics of the pure function, against the 15 % / 80-10-10 rule, with a seeded generator."""

from __future__ import annotations

import pytest
import torch

from pal_lightning.pretraining.masking import IGNORE_INDEX, mask_tokens, maskable_positions

CLS, SEP, PAD, MASK = 101, 102, 0, 103
SPECIAL = (PAD, 100, CLS, SEP, MASK)
RANDOM_IDS = torch.arange(1000, 3000)


def batch(rows: int = 400, width: int = 120, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences of ids 1000..2999 between [CLS] and [SEP], right-padded to ``width`` (lengths vary)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(20, width + 1, (rows,), generator=g)
    ids = torch.randint(1000, 3000, (rows, width), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    ids[mask == 0] = PAD
    return ids, mask


def test_fifteen_percent_then_80_10_10() -> None:
    ids, attention = batch()
    maskable = maskable_positions(ids, attention, SPECIAL)
    # by hand: every real token but the [CLS] and [SEP] of each row
    assert int(maskable.sum()) == int(attention.sum()) - 2 * len(ids)
    g = torch.Generator().manual_seed(1)
    corrupted, labels = mask_tokens(ids, maskable, mask_token_id=MASK, random_ids=RANDOM_IDS, generator=g)
    chosen = labels != IGNORE_INDEX
    n, k = int(maskable.sum()), int(chosen.sum())
    # binomial: sd of the chosen share is sqrt(.15 * .85 / n) = 0.0011 for n ~ 28k; 5 sd
    assert abs(k / n - 0.15) < 0.0055
    assert not (chosen & ~maskable).any()  # never a special token or padding
    assert torch.equal(labels[chosen], ids[chosen])  # labels: the original token where chosen
    assert (labels[~chosen] == IGNORE_INDEX).all()
    masked = chosen & (corrupted == MASK)
    unchanged = chosen & (corrupted == ids)
    replaced = chosen & ~masked & ~unchanged
    # sd of an 80 % share over k ~ 4.2k: 0.0062; of a 10 % share: 0.0046; 5 sd
    assert abs(int(masked.sum()) / k - 0.8) < 0.031
    assert abs(int(replaced.sum()) / k - 0.1) < 0.023
    assert abs(int(unchanged.sum()) / k - 0.1) < 0.023  # a random draw equal to the original: 1 in 2000
    assert torch.isin(corrupted[replaced], RANDOM_IDS).all()
    assert torch.equal(corrupted[~chosen], ids[~chosen])  # nothing else changes


def test_seeded_and_pure_and_refuses_bad_arguments() -> None:
    ids, attention = batch(rows=8)
    maskable = maskable_positions(ids, attention, SPECIAL)

    def run(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return mask_tokens(ids, maskable, mask_token_id=MASK, random_ids=RANDOM_IDS, generator=g)

    a, b, c = run(5), run(5), run(6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])
    assert ids[0, 0] == CLS  # the input is not modified in place
    with pytest.raises(ValueError, match="probability"):
        mask_tokens(ids, maskable, mask_token_id=MASK, random_ids=RANDOM_IDS, probability=0.0)
    with pytest.raises(ValueError, match="random_ids"):
        mask_tokens(ids, maskable, mask_token_id=MASK, random_ids=torch.tensor([], dtype=torch.long))


def test_whole_word_masking_takes_every_piece_of_a_word() -> None:
    ids, attention = batch(rows=300, width=90, seed=2)
    # words of three pieces: piece j of a row belongs to word j // 3 (special tokens and padding: -1)
    width = ids.shape[1]
    word_ids = (torch.arange(width) // 3).expand_as(ids).clone()
    maskable = maskable_positions(ids, attention, SPECIAL)
    word_ids[~maskable] = -1
    g = torch.Generator().manual_seed(3)
    _, labels = mask_tokens(
        ids, maskable, mask_token_id=MASK, random_ids=RANDOM_IDS, generator=g, word_ids=word_ids
    )
    chosen = labels != IGNORE_INDEX
    words_total = words_chosen = 0
    for row in range(len(ids)):
        for word in word_ids[row][word_ids[row] >= 0].unique().tolist():
            picked = chosen[row][word_ids[row] == word]
            assert picked.all() or not picked.any()  # all pieces of a word, or none
            words_total += 1
            words_chosen += int(picked.all())
    # sd sqrt(.15 * .85 / ~8.7k words) = 0.0038; 5 sd
    assert abs(words_chosen / words_total - 0.15) < 0.019
    assert not (chosen & ~maskable).any()
