"""What every system of ``benchmarks/peers.py`` gets, and the one scorer they all go through.

The systems compared and their base learning rates, the tasks and the results columns, the
:class:`Budget` (encoder, data, limits, optimizer settings), each seed's training subsets (written once,
read by every system), the dev-set reader and scorer (``pal_lightning.tasks.metrics``), and ``--quick``'s tiny
random encoder. Kept apart so that the runners (``peers_systems.py``) and the summaries
(``peers_results.py``) share these definitions without importing each other.
"""

# no "from __future__ import annotations" (see peers.py): Budget is a dataclass, which must read its
# annotations also when this module is loaded by path, without a sys.modules entry
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
from reproduce import prepare_data_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKS = ("sst", "qqp", "sts")
#: The systems in table order, and whether each chooses its learning rate per task (one model per task,
#: nothing shared between the tasks' runs; ``lora_tuned``'s encoder is shared, so it chooses on overall).
SYSTEMS = {
    "trainer": True,
    "lora": True,
    "lora_tuned": False,
    "st_multitask": False,
    "pal_shared": False,
    "pal_pals": False,
    "pal_adapter_only": False,
}
#: Base peak learning rates, multiplied by each ``--lrs`` value. Full fine-tuning gets the quickstart's
#: encoder rate, adapter-only systems its head rate (LoRA's usual range); pal systems use the
#: quickstart's ``lr`` / ``head_lr`` pair (adapters train at ``head_lr``).
BASE_LR = {
    "trainer": 1e-4,
    "lora": 1e-3,
    "lora_tuned": 1e-3,  # its LoRA stage; its encoder stage trains at pal_shared's rates, same multiplier
    "st_multitask": 1e-4,
    "pal_shared": 1e-4,
    "pal_pals": 1e-4,
    "pal_adapter_only": 1e-4,
}
#: ``lora_tuned``: the share of each task's training examples spent fine-tuning the shared encoder
#: (stage 1); the rest train the task's LoRA adapter on it (stage 2). Half and half: neither stage is
#: favoured, and the total stays the budget every other system gets.
TUNED_ENCODER_SHARE = 0.5
#: Main score of each task, and its results column.
TASK_SCORE = {
    "sst": ("accuracy", "sst_acc"),
    "qqp": ("accuracy", "qqp_acc"),
    "sts": ("pearson", "sts_pearson"),
}

COLUMNS = (
    "system",
    "lr_scale",  # the --lrs value this run used
    "lr",  # the system's peak rate(s) at that scale
    "seed",
    "sst_acc",
    "qqp_acc",
    "sts_pearson",
    "overall",  # CS224N overall of this run's three scores
    "params_stored",  # parameters stored to serve all three tasks
    "params_per_task",  # task-specific parameters per task (whole model for one-model-per-task)
    "adapter_per_task",  # LoRA or PAL parameters of one task's adapter (blank without adapters)
    "lora_rank",
    "examples_per_task",  # training examples seen per task
    "train_s",  # training wall seconds (all tasks), without loading and scoring
    "ms_per_example",  # train_s / examples seen, in milliseconds
    "peak_rss_mb",  # peak resident memory of the process that ran it
    "rss_scope",  # "run" (own subprocess) or "process" (in-process: the whole process's peak)
    "device",
    "status",
    "command",  # one command that reproduces this system's rows
)


@dataclass(frozen=True)
class Budget:
    """What every system gets: the same encoder, data, limits and optimizer settings."""

    encoder: str
    """Local directory of the encoder (resolved by ``pal_lightning.core.hub.resolve_encoder``)."""
    data_root: str
    """Folder holding one budget data folder per seed (``seed<N>/``)."""
    examples_per_task: int
    """Training examples seen per task (a multiple of ``batch_size``)."""
    batch_size: int = 32
    """Training batch size of every system."""
    eval_batch_size: int = 128
    """Batch size when predicting the dev sets."""
    max_length: int = 64
    """Tokens per encoder input (a pair counts as one input when cross-encoded)."""
    warmup_ratio: float = 0.06
    """Fraction of the steps spent in linear warmup (the quickstart's), then linear decay to 0."""
    weight_decay: float = 0.01
    """AdamW weight decay of every system."""
    max_grad_norm: float = 1.0
    """Gradient clipping of every system (the quickstart's and the Trainer's default)."""
    pal_overrides: dict[str, Any] = field(default_factory=dict)
    """``MultiTaskModule`` arguments replacing the quickstart's (``--quick``: PAL sizes of a tiny model)."""
    lora_rank: int = 8
    """LoRA rank (set by :func:`matched_lora_rank`)."""
    precision: str = "32-true"
    """Every system's arithmetic: ``32-true``, or ``bf16-mixed`` (autocast to bf16: Lightning's
    ``precision`` for pal-lightning, ``bf16=True`` in the Trainer-based peers), the same for all."""

    @property
    def steps_per_task(self) -> int:
        return self.examples_per_task // self.batch_size

    def data_dir(self, seed: int) -> Path:
        return Path(self.data_root) / f"seed{seed}"


# ----------------------------------------------------------------------------------------- data


def budget_rows(n_rows: int, examples: int, seed: int) -> list[int]:
    """The data rows (0-based) a seed's training subset keeps: the first ``min(examples, n_rows)`` of a
    seeded permutation, in file order."""
    keep = np.random.default_rng(seed).permutation(n_rows)[: min(examples, n_rows)]
    return sorted(int(i) for i in keep)


def write_budget_data(
    source: Path, target: Path, examples: int, seed: int, qqp_dev_limit: int, dev_limit: int = 0
) -> Path:
    """A data folder for one seed: dev and test files linked from ``source`` (Quora dev cut to its first
    ``qqp_dev_limit`` pairs when > 0, every dev file to its first ``dev_limit`` rows when > 0), each
    task's training file cut to :func:`budget_rows`."""
    from pal_lightning.tasks.specs import get_task

    # prepare_data_dir links every file and keeps the first N Quora dev pairs (N huge: all of them)
    prepare_data_dir(source, target, qqp_dev_limit if qqp_dev_limit > 0 else 10**9)
    for task in TASKS:
        name = get_task(task).files["train"]
        lines = (source / name).read_text(encoding="utf-8").splitlines(keepends=True)
        rows = budget_rows(len(lines) - 1, examples, seed)
        path = target / name
        path.unlink(missing_ok=True)
        path.write_text(lines[0] + "".join(lines[1 + i] for i in rows), encoding="utf-8")
        dev = target / get_task(task).files["dev"]
        if dev_limit > 0:  # a CPU-only smoke budget: scoring whole dev sets costs more than training
            kept = dev.read_text(encoding="utf-8").splitlines(keepends=True)[: 1 + dev_limit]
            dev.unlink()
            dev.write_text("".join(kept), encoding="utf-8")
    return target


def read_task(task: str, split: str, data_dir: Path) -> tuple[list[list[str]], np.ndarray]:
    """Text columns and labels of one split, read by pal-lightning's own reader (same rows for all)."""
    from pal_lightning.data.sources.readers import read_split
    from pal_lightning.tasks.specs import get_task

    raw = read_split(get_task(task), split, data_dir)
    assert raw.labels is not None, f"{task} {split} has no labels"
    return raw.texts, raw.labels


# -------------------------------------------------------------------------------------- scoring


def score_task(task: str, predictions: Sequence[float], labels: Sequence[float]) -> float:
    """The task's main dev score by ``pal_lightning.tasks.metrics`` (class indices, or scores for STS)."""
    import torch

    from pal_lightning.tasks.metrics import build_task_metrics
    from pal_lightning.tasks.specs import get_task

    spec = get_task(task)
    dtype = torch.float32 if spec.is_regression else torch.long
    metrics = build_task_metrics(spec)
    metrics.update(
        torch.as_tensor(np.asarray(predictions), dtype=dtype),
        torch.as_tensor(np.asarray(labels), dtype=dtype),
    )
    return float(metrics.compute()[TASK_SCORE[task][0]])


def overall(row: dict[str, Any]) -> float | None:
    """CS224N overall of a row's three scores (``None`` unless all three are there)."""
    from pal_lightning.tasks.metrics import cs224n_overall

    values = [row.get(TASK_SCORE[t][1]) for t in TASKS]
    return None if any(v is None for v in values) else cs224n_overall(*values)


# ---------------------------------------------------------------------------------- quick fixture


def quick_encoder(folder: Path) -> Path:
    """A tiny random BERT (``pal_lightning.testing.TINY_BERT``) saved with the packaged MiniLM tokenizer,
    so every system loads the same weights from one folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from pal_lightning.core.hub import resolve_encoder
    from pal_lightning.testing import TINY_BERT

    if not (folder / "config.json").is_file():
        torch.manual_seed(0)
        BertModel(BertConfig(**TINY_BERT)).save_pretrained(folder)
        AutoTokenizer.from_pretrained(resolve_encoder("all-MiniLM-L6-v2")).save_pretrained(folder)
    return folder
