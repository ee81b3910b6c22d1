"""Fixtures for the CLI tests: CS224N-format data files and a tiny-model config in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = "movie plot great awful fun dull story scene music end actor good bad long short".split()

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


#: A GEM callback for the tiny model, as it appears under ``trainer.callbacks`` in a config.
TINY_GEM = {
    "class_path": "pal_lightning.callbacks.GEMCallback",
    "init_args": {"memory_size": 8, "memory_batch_size": 2},
}
HERE = Path(__file__).resolve().parent


def subprocess_env() -> dict[str, str]:
    """Environment of a CLI subprocess: offline, one thread, ``tests/cli`` importable (test-only
    callbacks in configs), and none of the variables a parent run may have set for its ranks."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    for key in ("PAL_DEBUG", "LOCAL_RANK", "PAL_RUN_VERSION", "PAL_RESUME_CKPT"):
        env.pop(key, None)
    return env


def _sentence(i: int) -> str:
    n = 3 + (i * 5) % 7
    return " ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(n))


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


def write_cs224n_data(root: Path, n_train: int = 24, n_dev: int = 10, n_test: int = 6) -> Path:
    """Small files in the CS224N starter layout (tab-separated, leftover pandas index column)."""
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


def tiny_config(tmp_path: Path, data_dir: Path, tasks: list | None = None) -> Path:
    """A complete fit config for a tiny random encoder on the fixture data; returns its path."""
    import yaml

    config = {
        "seed_everything": 7,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": 4,
            "default_root_dir": str(tmp_path / "runs"),
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 1,
            "num_sanity_val_steps": 0,
        },
        "model": {
            "class_path": "pal_lightning.MultiTaskModule",
            "init_args": {
                "tasks": tasks if tasks is not None else ["sst", "qqp", "sts"],
                "pal_heads": 2,
                "pal_size": 8,
                "pair_encoding": {"sts": "siamese", "default": "cross"},
                "bert_config": TINY_BERT,
            },
        },
        "data": {
            "class_path": "pal_lightning.MultiTaskDataModule",
            "init_args": {
                "data_dir": str(data_dir),
                "batch_size": 4,
                "eval_batch_size": 16,
                "max_length": 32,
                "steps_per_epoch": 2,
                "cache_dir": False,
            },
        },
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_cs224n_data(tmp_path / "data")


@pytest.fixture
def tiny_yaml(tmp_path: Path, data_dir: Path) -> Path:
    return tiny_config(tmp_path, data_dir)
