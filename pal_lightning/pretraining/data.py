"""Text for masked-language-model pre-training: every text column of the chosen tasks (train for
training, dev for validation), read with fine-tuning's readers, de-duplicated, tokenised once; batches
carry ``word_ids`` for whole-word masking.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from pal_lightning.core.batch import ATTENTION_MASK, INPUT_IDS
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
from pal_lightning.data.sources.readers import check_files_exist, read_split, resolve_data_dir
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks, task_to_hparam

#: Files of which at least one must be in an encoder folder for its tokenizer to load.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "spiece.model", "merges.txt")


#: Key of an MLM batch: the word of each token (-1 for special tokens and padding).
WORD_IDS = "word_ids"


def load_tokenizer(encoder: str) -> Any:
    """The fast tokenizer (with a mask token) saved with ``encoder``, a folder or hub id."""
    from transformers import AutoTokenizer

    path = resolve_encoder(encoder)
    if Path(path).is_dir() and not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
        raise PalUserError(
            f"Encoder folder {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}): masked-language "
            "pre-training masks with the encoder's own tokenizer and saves it beside the new weights. Save "
            "it there (AutoTokenizer.from_pretrained(<original>).save_pretrained(folder)) or pick an encoder "
            "folder that has one."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PalUserError(f"Cannot load the tokenizer of {encoder!r} from {path}: {first}") from err
    if not getattr(tokenizer, "is_fast", False) or tokenizer.mask_token_id is None:
        raise PalUserError(
            f"The tokenizer of {encoder!r} is not a fast tokenizer with a mask token; masked-language "
            "pre-training needs both (save the encoder with a tokenizer.json of a BERT-style model)."
        )
    return tokenizer


def task_sentences(
    specs: Sequence[TaskSpec], split: str, data_dir: Path, detokenize: bool = True
) -> list[str]:
    """Every text of ``split`` of every task, all text columns, de-duplicated in first-seen order."""
    seen: dict[str, None] = {}
    for spec in specs:
        raw = read_split(spec, split, data_dir, on_bad_row="skip", detokenize=detokenize)
        for column in raw.texts:
            seen.update(dict.fromkeys(column))
    return list(seen)


#: A tokenised sentence: its token ids and the word of each token (-1 for special tokens).
Sentence = tuple[torch.Tensor, torch.Tensor]


def tokenize_sentences(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[Sentence]:
    """Every text tokenised (truncated to ``max_length``), with its tokens' words."""
    out = tokenizer(list(texts), truncation=True, max_length=max_length, return_attention_mask=False)
    return [
        (torch.tensor(ids), torch.tensor([-1 if w is None else w for w in out.word_ids(i)]))
        for i, ids in enumerate(out["input_ids"])
    ]


def collate_sentences(items: Sequence[Sentence], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad a list of ``(ids, word_ids)`` to the longest: ``input_ids``, ``attention_mask``, ``word_ids``."""
    ids, words = [item[0] for item in items], [item[1] for item in items]
    return {
        INPUT_IDS: pad_sequence(ids, batch_first=True, padding_value=pad_id),
        ATTENTION_MASK: pad_sequence([torch.ones_like(i) for i in ids], batch_first=True),
        WORD_IDS: pad_sequence(words, batch_first=True, padding_value=-1),
    }


class MLMDataModule(pl.LightningDataModule):
    """Sentences of the chosen tasks for masked-language-model pre-training.

    Args:
        tasks: task names or :class:`~pal_lightning.tasks.specs.TaskSpec` s whose text is used.
        tokenizer: the encoder whose tokenizer is used (linked from ``model.encoder`` by the CLI).
        data_dir: folder of the data files; default ``$PAL_DATA_DIR``, else ``./data``.
        max_length: longest tokenised sentence (special tokens included); longer ones are truncated.
        batch_size: sentences per training batch (per device).
        eval_batch_size: sentences per validation batch.
        max_val_sentences: validate on at most this many (the first) dev sentences.
        limit_examples: keep only the first N training sentences.
        detokenize: undo PTB tokens for tasks that ask for it (SST).
        num_workers: DataLoader worker processes.
        seed: seed of the training order.
    """

    def __init__(
        self,
        tasks: Sequence[str | TaskSpec | dict[str, Any]] = ("sst", "qqp", "sts"),
        tokenizer: str = DEFAULT_ENCODER,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int = 128,
        batch_size: int = 32,
        eval_batch_size: int = 128,
        max_val_sentences: int | None = 2000,
        limit_examples: int | None = None,
        detokenize: bool = True,
        num_workers: int = 0,
        seed: int = 42,
    ) -> None:
        super().__init__()
        self.task_specs = resolve_tasks(tasks)
        if max_length < 8:
            raise PalUserError(f"max_length must be >= 8, got {max_length}.")
        if batch_size < 1 or eval_batch_size < 1:
            raise PalUserError(f"batch sizes must be >= 1, got {batch_size} and {eval_batch_size}.")
        self.tokenizer_name = str(tokenizer)
        self.data_dir = resolve_data_dir(data_dir)
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.max_val_sentences = max_val_sentences
        self.limit_examples = limit_examples
        self.detokenize = detokenize
        self.num_workers = num_workers
        self.seed = seed
        self.save_hyperparameters(ignore=["tasks"])
        self.save_hyperparameters({"tasks": [task_to_hparam(s) for s in self.task_specs]})
        self._tokenizer: Any = None
        self.train_set: list[Sentence] | None = None
        self.val_set: list[Sentence] | None = None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.tokenizer_name)
        return self._tokenizer

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        check_files_exist([(s, sp) for s in self.task_specs for sp in ("train", "dev")], self.data_dir)
        train = task_sentences(self.task_specs, "train", self.data_dir, self.detokenize)[
            : self.limit_examples
        ]
        dev = task_sentences(self.task_specs, "dev", self.data_dir, self.detokenize)[: self.max_val_sentences]
        self.train_set = tokenize_sentences(self.tokenizer, train, self.max_length)
        self.val_set = tokenize_sentences(self.tokenizer, dev, self.max_length)

    def _loader(self, data: list[Sentence] | None, batch_size: int, shuffle: bool) -> DataLoader:
        if data is None:
            self.setup("fit")
            data = self.train_set if shuffle else self.val_set
            assert data is not None  # setup("fit") builds both sets
        pad = self.tokenizer.pad_token_id
        return DataLoader(
            data,  # type: ignore[arg-type]  # a list is a map-style dataset to torch, not to its stubs
            batch_size=batch_size,
            shuffle=shuffle,
            collate_fn=functools.partial(collate_sentences, pad_id=0 if pad is None else int(pad)),
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(self.seed),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.eval_batch_size, shuffle=False)
