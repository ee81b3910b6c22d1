"""Small, offline fixtures for tests of code built on pal-lightning (ours and users').

* :data:`TINY_BERT`: the ``bert_config`` of a 2-layer, width-32 random encoder with the real
  BERT/MiniLM vocabulary, so the packaged offline tokenizer can feed it
  (``MultiTaskModule(bert_config=TINY_BERT, pal_size=8, pal_heads=2)`` trains in milliseconds);
* :func:`write_cs224n_data`: small files in the CS224N starter layout for ``sst``, ``qqp`` and ``sts``;
* :func:`quiet_trainer`: a CPU ``Trainer`` that logs, saves and prints nothing unless told to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["QUIET_TRAINER", "TINY_BERT", "quiet_trainer", "write_cs224n_data"]

_WORDS = "movie plot great awful fun dull story scene music end actor good bad long short".split()

#: A random 2-layer encoder of width 32 with the real (MiniLM/BERT) vocabulary, so the real
#: offline tokenizer can feed it.
TINY_BERT = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "vocab_size": 30522,
    "max_position_embeddings": 128,
}


def _sentence(i: int) -> str:
    n = 3 + (i * 5) % 7
    return " ".join(_WORDS[(i * 3 + k) % len(_WORDS)] for k in range(n))


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


def write_cs224n_data(
    root: str | os.PathLike[str], n_train: int = 24, n_dev: int = 10, n_test: int = 6
) -> Path:
    """Small files in the CS224N starter layout (tab-separated, leftover pandas index column); returns the folder."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sst_h, pair_h = "\tid\tsentence\tsentiment", "\tid\tsentence1\tsentence2\t{label}"
    _write(
        root / "ids-sst-train.csv", sst_h, [f"{i}\tst{i}\t {_sentence(i)} .\t{i % 5}" for i in range(n_train)]
    )
    _write(
        root / "ids-sst-dev.csv", sst_h, [f"{i}\tsd{i}\t {_sentence(i + 3)} .\t{i % 5}" for i in range(n_dev)]
    )
    _write(
        root / "ids-sst-test-student.csv",
        "0\t\tid\tsentence",
        [f"{i}\t{i}.0\tss{i}\t {_sentence(i + 7)}" for i in range(n_test)],
    )
    for prefix, label, fmt in (("quora", "is_duplicate", "{:.1f}"), ("sts", "similarity", "{:.1f}")):
        scale = 1 if prefix == "quora" else 5
        for split, n, off in (("train", n_train, 0), ("dev", n_dev, 11)):
            rows = [
                f"{i}\t{prefix[0]}{split[0]}{i}\t{_sentence(i + off)}\t{_sentence(i + off + 1)}\t"
                + fmt.format((i % (scale + 1)) if scale > 1 else i % 2)
                for i in range(n)
            ]
            _write(root / f"{prefix}-{split}.csv", pair_h.format(label=label), rows)
        # the STS test file carries labels, so that `pal-lightning test` has a labelled split to score
        labelled = prefix == "sts"
        _write(
            root / f"{prefix}-test-student.csv",
            "\tid\tsentence1\tsentence2" + ("\tsimilarity" if labelled else ""),
            [
                f"{i}\t{prefix[0]}x{i}\t{_sentence(i)}\t{_sentence(i + 2)}"
                + (f"\t{i % 6}.0" if labelled else "")
                for i in range(n_test)
            ],
        )
    return root


#: What :func:`quiet_trainer` passes to ``Trainer`` unless overridden.
QUIET_TRAINER = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


def quiet_trainer(**overrides: Any) -> pl.Trainer:
    """A ``lightning.pytorch.Trainer`` for tests: one CPU device, no logger, no checkpoints, no progress
    bar or model summary, no sanity validation (:data:`QUIET_TRAINER`); ``overrides`` win."""
    import lightning.pytorch as pl

    return pl.Trainer(**{**QUIET_TRAINER, **overrides})
