"""The batch contract: the key constants are the strings batches hold, and one sentence's inputs read back."""

from __future__ import annotations

import numpy as np
import torch

from pal_lightning.core.batch import (
    ATTENTION_MASK,
    ENCODING_KEYS,
    IDS,
    INDICES,
    INPUT_IDS,
    LABELS,
    SPLIT,
    TASK,
    TOKEN_TYPE_IDS,
    side_inputs,
    side_keys,
)
from pal_lightning.data.loaders import MultiTaskDataset
from pal_lightning.data.sampling.per_task import TaskBatch
from pal_lightning.data.tokenize import Encoded, TokenizedSplit


def test_side_keys_spell_each_sentence_of_a_pair():
    assert ENCODING_KEYS == ("input_ids", "attention_mask", "token_type_ids")
    assert side_keys("b") == ("input_ids_b", "attention_mask_b", "token_type_ids_b")
    assert side_keys("") == ENCODING_KEYS


def test_side_inputs_renames_one_sentence_and_leaves_out_absent_keys():
    a, b = torch.ones(2, 3), torch.zeros(2, 4)
    batch = {TASK: "sts", "input_ids_a": a, "attention_mask_a": a, "input_ids_b": b, "attention_mask_b": b}
    got = side_inputs(batch, "b")
    assert set(got) == {INPUT_IDS, ATTENTION_MASK}  # no token_type_ids_b in the batch
    assert got[INPUT_IDS] is b and got[ATTENTION_MASK] is b


def test_the_dataset_writes_batches_under_the_constants():
    # two examples of 2 and 3 tokens, stored back to back (offsets 0, 2, 5)
    enc = Encoded(np.array([5, 6, 7, 8, 9], dtype=np.int64), np.zeros(5, dtype=np.int64), np.array([0, 2, 5]))
    split = TokenizedSplit(
        "sst", "dev", np.array(["x", "y"]), np.array([1, 0]), {"": enc}, rows=2, bad_rows=0
    )
    batch = MultiTaskDataset({("sst", "dev"): split}, pad_token_id=0).__getitems__(
        TaskBatch("sst", "dev", (1, 0))
    )
    assert set(batch) == {TASK, SPLIT, IDS, INDICES, LABELS, INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS}
    assert batch[TASK] == "sst" and batch[SPLIT] == "dev" and batch[IDS] == ["y", "x"]
    assert batch[INDICES] == [1, 0]
    assert batch[INPUT_IDS].tolist() == [[7, 8, 9], [5, 6, 0]]
    assert batch[ATTENTION_MASK].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch[LABELS].tolist() == [0, 1]
