"""Tiny token-id batches of ``sst``, ``qqp`` and ``sts``, a tiny module and a data module serving them, for
in-process tests without tokenizer or data files (not imported by ``pal_lightning.testing``)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing.encoders import tiny_bert_config

#: Token ids of the tiny batches: 0 padding, 1 ``[CLS]``, 2 ``[SEP]``, the rest words.
VOCAB = 60
CLS, SEP = 1, 2
#: The encoder of :func:`tiny_module`: 2 layers of width 32, 4 heads, :data:`VOCAB` ids.
TINY_BATCH_BERT = tiny_bert_config(heads=4, vocab_size=VOCAB, max_positions=64)
PAIR_ENCODING = {"sts": "siamese", "default": "cross"}


def tiny_module(adapter: str | dict[str, Any] = "pals", **kw: Any) -> MultiTaskModule:
    """A tiny random module; ``adapter``: a method name or AdapterConfig fields (2 heads unless given)."""
    options = {"method": adapter} if isinstance(adapter, str) else adapter
    args: dict[str, Any] = dict(
        tasks=("sst", "qqp", "sts"),
        encoder_config=TINY_BATCH_BERT,
        adapter={"num_heads": 2, **options},
        pair_encoding=PAIR_ENCODING,
        dropout=0.0,
    )
    args.update(kw)
    return MultiTaskModule(**args)


def _sentences(g: torch.Generator, n: int) -> list[list[int]]:
    lengths = torch.randint(2, 7, (n,), generator=g).tolist()
    return [torch.randint(3, VOCAB, (k,), generator=g).tolist() for k in lengths]


def _encode(seqs: list[list[int]], types: list[list[int]]) -> dict[str, Tensor]:
    def padded(rows: list[list[int]]) -> Tensor:
        return pad_sequence([torch.tensor(r, dtype=torch.long) for r in rows], batch_first=True)

    return {
        "input_ids": padded(seqs),
        "attention_mask": padded([[1] * len(s) for s in seqs]),
        "token_type_ids": padded(types),
    }


def make_batch(
    task: str, size: int = 8, seed: int = 0, split: str = "train", labelled: bool = True
) -> dict[str, Any]:
    """A batch of ``size`` random sentences (pairs) of ``task`` (``sst``, ``qqp`` or ``sts``), drawn
    from a generator seeded with ``seed``; without ``labels`` unless ``labelled``."""
    g = torch.Generator().manual_seed(seed)
    a = [[CLS, *s, SEP] for s in _sentences(g, size)]
    batch: dict[str, Any] = {"task": task, "split": split, "ids": [f"{task}-{seed}-{i}" for i in range(size)]}
    if task == "sst":
        batch.update(_encode(a, [[0] * len(s) for s in a]))
        labels: Tensor = torch.randint(0, 5, (size,), generator=g)
    else:
        b = [[*s, SEP] for s in _sentences(g, size)]
        if PAIR_ENCODING.get(task, PAIR_ENCODING["default"]) == "siamese":
            for side, seqs in (("a", a), ("b", [[CLS, *s] for s in b])):
                batch.update(
                    {f"{k}_{side}": v for k, v in _encode(seqs, [[0] * len(s) for s in seqs]).items()}
                )
        else:
            batch.update(
                _encode(
                    [x + y for x, y in zip(a, b, strict=True)],
                    [[0] * len(x) + [1] * len(y) for x, y in zip(a, b, strict=True)],
                )
            )
        if task == "qqp":
            labels = torch.randint(0, 2, (size,), generator=g)
        else:
            labels = torch.randint(0, 11, (size,), generator=g).float() / 2
    if labelled:
        batch["labels"] = labels
    return batch


#: Six labelled batches: seeds 0 and 1 of each task.
FIXED = [make_batch(t, seed=s) for s in range(2) for t in ("sst", "qqp", "sts")]


def _loader(batches: list[dict[str, Any]]) -> DataLoader:
    """The batches as they are, one per step (a list is a map-style dataset to torch, not to its stubs)."""
    return DataLoader(batches, batch_size=None)  # type: ignore[arg-type]


class TinyData(pl.LightningDataModule):
    """Train: the 6 fixed batches cycled to 20 steps; val: one loader per task (dataloader_idx 0..2)."""

    steps = 20

    @property
    def steps_per_epoch(self) -> int:
        return self.steps

    def train_dataloader(self) -> DataLoader:
        return _loader([FIXED[i % len(FIXED)] for i in range(self.steps)])

    def val_dataloader(self) -> list[DataLoader]:
        return [_loader([b for b in FIXED if b["task"] == t]) for t in ("sst", "qqp", "sts")]

    def test_dataloader(self) -> DataLoader:
        return _loader(FIXED + [make_batch("sst", seed=9, split="test", labelled=False)])

    def predict_dataloader(self) -> DataLoader:
        return _loader([make_batch(t, seed=5, split="test", labelled=False) for t in ("sst", "sts")])
