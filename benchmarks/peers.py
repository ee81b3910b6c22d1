"""pal-lightning side by side with what users would pick instead (issue 16).

Systems, all on the same encoder (default all-MiniLM-L6-v2 from the ``offline`` extra), the same
training files, tokenisation limit, examples seen per task, seeds and learning-rate search budget:

* ``trainer``: the ``transformers`` Trainer, one ``AutoModelForSequenceClassification`` per task
  (regression head for STS, pairs cross-encoded as ``[CLS] a [SEP] b [SEP]``), AdamW with linear
  warmup and decay;
* ``lora``: ``peft`` LoRA, one adapter per task on the frozen encoder (peft's default target modules
  for BERT, query and value, plus the trained classifier), rank chosen so that one adapter holds about
  as many parameters as one task's PALs (both counts are reported);
* ``lora_tuned``: the same LoRA adapters on a *fine-tuned* frozen encoder. LoRA per task with the
  encoder trainable for that task would be full fine-tuning per task (``trainer``); the reading here
  is the other one: one encoder fine-tuned on all three tasks, then one adapter per task on it. Stage 1
  trains ``pal_shared`` (round robin, its rates) for ``TUNED_ENCODER_SHARE`` of the examples of each
  task (siamese pairs, as pal-lightning trains them); stage 2 trains ``lora`` exactly as above (pairs
  cross-encoded), from that encoder's weights and MiniLM's own pooler (pal-lightning has none), on the
  rest. Each stage reads its own disjoint part of the seed's training rows, so the examples per task
  in total equal every other system's; stage 1's heads are thrown away. It stores what ``lora``
  stores (one encoder + 3 x (LoRA + head)), and its one rate multiplier is chosen on overall;
* ``st_multitask``: ``sentence-transformers``' multi-task trainer (``SentenceTransformerTrainer`` with
  one dataset and loss per task, round-robin batches): ``SoftmaxLoss`` for Quora, cosine-similarity
  loss for STS, and for SST (one sentence, which ``SoftmaxLoss`` cannot take) the same softmax
  classifier over the single sentence embedding;
* ``pal_shared``, ``pal_pals``, ``pal_adapter_only``: pal-lightning with ``configs/quickstart.yaml``
  (PALs), the same with ``adapter: none`` (shared encoder, heads per task) and the same with the
  encoder frozen (only PALs and heads train).

Budget: ``--examples-per-task`` training examples per task (rounded down to whole batches). Every
seed draws its own training subset of each task (``min(N, rows)`` rows), written once as data files
that every system reads; single-task systems train ``N / batch`` steps per task, multi-task systems
``3 N / batch`` steps in round robin (pal-lightning's ``sampling: round_robin``: the quickstart's
annealed schedule would not give each task the same number of examples).

Scores: every system's dev predictions go through one scorer, ``pal_lightning.metrics``
(``build_task_metrics`` and ``cs224n_overall``). Learning rates: ``--lrs`` multiplies each system's
base rates (all its parameter groups), the same number of values for every system; the best value is
chosen on the dev sets (per task for the one-model-per-task systems, on the overall score for the
multi-task ones), which flatters every system alike since there is no labelled test set.

Cost: parameters stored to serve the three tasks, training seconds per example seen, and peak
resident memory of the process that ran the system (each run in its own subprocess unless
``--in-process``; ``--quick`` runs in-process, where the peak is that of the whole process).

Usage::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/peers.py                                   # every system, 3 seeds, 3 rates
    python benchmarks/peers.py --systems lora,pal_pals --seeds 1 --lrs 1 --examples-per-task 3200
    python benchmarks/peers.py --quick --out /tmp/peers.csv      # tiny random encoder, fixture data

Writes ``--out`` (CSV, one row per run) and the same path with ``.json`` (the settings, every run,
the per-system summary at its chosen rates and the paired differences of ``pal_pals`` against each
peer, ``benchmarks/paired_stats.py``). Needs the ``peers`` extra (``pip install -e ".[peers]"``).
:func:`plot_peers` draws a results CSV as score against stored parameters (``notebooks/peers.ipynb``).
"""

# no "from __future__ import annotations": the tests load this script by path, without a sys.modules
# entry, and dataclasses need one to read string annotations
import argparse
import csv
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
from paired_stats import mean_std, paired_difference  # noqa: E402
from reproduce import _fmt, cs224n_data_dir, prepare_data_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
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
    """Local directory of the encoder (resolved by ``pal_lightning.hub.resolve_encoder``)."""
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
    from pal_lightning.tasks import get_task

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
    from pal_lightning.data.readers import read_split
    from pal_lightning.tasks import get_task

    raw = read_split(get_task(task), split, data_dir)
    assert raw.labels is not None, f"{task} {split} has no labels"
    return raw.texts, raw.labels


# -------------------------------------------------------------------------------------- scoring


def score_task(task: str, predictions: Sequence[float], labels: Sequence[float]) -> float:
    """The task's main dev score by ``pal_lightning.metrics`` (class indices, or scores for STS)."""
    import torch

    from pal_lightning.metrics import build_task_metrics
    from pal_lightning.tasks import get_task

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
    from pal_lightning.metrics import cs224n_overall

    values = [row.get(TASK_SCORE[t][1]) for t in TASKS]
    return None if any(v is None for v in values) else cs224n_overall(*values)


# ------------------------------------------------------------------------ transformers and peft


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _Encoded:
    """A list of tokenised examples (``input_ids``, ..., ``labels``) as a map-style dataset."""

    def __init__(self, tokenizer: Any, texts: list[list[str]], labels: np.ndarray | None, max_length: int):
        pair = texts[1] if len(texts) > 1 else None
        enc = tokenizer(texts[0], pair, truncation=True, max_length=max_length)
        self.items = [{k: enc[k][i] for k in enc} for i in range(len(texts[0]))]
        if labels is not None:
            for item, label in zip(self.items, labels.tolist(), strict=True):
                item["labels"] = label

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def _classifier(budget: Budget, task: str) -> Any:
    from transformers import AutoModelForSequenceClassification

    from pal_lightning.tasks import get_task

    spec = get_task(task)
    return AutoModelForSequenceClassification.from_pretrained(
        budget.encoder,
        num_labels=1 if spec.is_regression else spec.num_labels,
        problem_type="regression" if spec.is_regression else "single_label_classification",
    )


def lora_model(model: Any, rank: int) -> Any:
    """``model`` with a LoRA adapter of rank ``rank`` (peft's default targets; classifier trained)."""
    from peft import LoraConfig, TaskType, get_peft_model

    # lora_alpha = 2 r: the common choice, so the update's scale does not change with the rank
    config = LoraConfig(task_type=TaskType.SEQ_CLS, r=rank, lora_alpha=2 * rank, lora_dropout=0.1)
    return get_peft_model(model, config)


def lora_counts(model: Any) -> tuple[int, int, int]:
    """``(frozen encoder, LoRA weights, trained head)`` parameter counts of a peft model."""
    lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    head = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n)
    frozen = sum(
        p.numel() for n, p in model.named_parameters() if not p.requires_grad and "original_module" not in n
    )
    # peft keeps a frozen copy of the original classifier beside the trained one: not stored for serving
    return frozen - _frozen_head(model), lora, head


def _frozen_head(model: Any) -> int:
    return sum(
        p.numel()
        for n, p in model.named_parameters()
        if not p.requires_grad and ("classifier" in n or ".score." in n) and "original_module" not in n
    )


def load_tuned_encoder(model: Any, state: dict[str, Any]) -> None:
    """Put a fine-tuned pal-lightning encoder's weights (``MultiTaskBert.bert.state_dict()``, no pooler)
    into a ``BertForSequenceClassification``'s ``bert``, keeping its pretrained pooler; anything else
    missing or left over is an error, so no layer silently stays pretrained."""
    result = model.bert.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith("pooler.")]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"fine-tuned encoder does not fit: missing {missing}, unexpected {result.unexpected_keys}"
        )


def train_one_task(
    system: str, task: str, budget: Budget, lr: float, seed: int, encoder_state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train and score one task with the Trainer (``system`` ``trainer``, or ``lora`` with peft), from
    the pretrained encoder or, when given, ``encoder_state`` (:func:`load_tuned_encoder`)."""
    from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

    set_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(budget.encoder)
    model = _classifier(budget, task)
    if encoder_state is not None:
        load_tuned_encoder(model, encoder_state)
    counts: dict[str, int]
    if system == "lora":
        model = lora_model(model, budget.lora_rank)
        frozen, lora, head = lora_counts(model)
        counts = {"shared": frozen, "task": lora + head, "adapter": lora}
    else:
        counts = {"shared": 0, "task": sum(p.numel() for p in model.parameters())}
    data_dir = budget.data_dir(seed)
    train = _Encoded(tokenizer, *read_task(task, "train", data_dir), budget.max_length)
    dev_texts, dev_labels = read_task(task, "dev", data_dir)
    dev = _Encoded(tokenizer, dev_texts, None, budget.max_length)
    steps = budget.steps_per_task
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            max_steps=steps,
            per_device_train_batch_size=budget.batch_size,
            per_device_eval_batch_size=budget.eval_batch_size,
            learning_rate=lr,
            weight_decay=budget.weight_decay,
            warmup_steps=int(round(budget.warmup_ratio * steps)),
            lr_scheduler_type="linear",
            max_grad_norm=budget.max_grad_norm,
            seed=seed,
            data_seed=seed,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer)
        )
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
        output = np.asarray(trainer.predict(dev).predictions)
    predictions = output.reshape(-1) if output.ndim == 1 or output.shape[-1] == 1 else output.argmax(-1)
    return {"score": score_task(task, predictions, dev_labels), "train_s": train_s, **counts}


def per_task_row(parts: dict[str, dict[str, Any]], lora_rank: int | None = None) -> dict[str, Any]:
    """Scores, training seconds and stored parameters of one model or adapter per task
    (:func:`train_one_task`'s results): one frozen encoder for all LoRA adapters, a whole model per task
    for the Trainer; with ``lora_rank``, also the adapters' size and rank."""
    row: dict[str, Any] = {TASK_SCORE[task][1]: part["score"] for task, part in parts.items()}
    row["train_s"] = sum(p["train_s"] for p in parts.values())
    row["params_per_task"] = round(sum(p["task"] for p in parts.values()) / len(parts))
    row["params_stored"] = max(p["shared"] for p in parts.values()) + sum(p["task"] for p in parts.values())
    if lora_rank is not None:
        row["adapter_per_task"] = round(sum(p["adapter"] for p in parts.values()) / len(parts))
        row["lora_rank"] = lora_rank
    return row


def run_per_task(system: str, budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """``trainer`` or ``lora``: one model (or adapter) per task, trained one after the other."""
    parts = {task: train_one_task(system, task, budget, BASE_LR[system] * scale, seed) for task in TASKS}
    lora_rank = budget.lora_rank if system == "lora" else None
    return {"lr": f"{BASE_LR[system] * scale:g}", **per_task_row(parts, lora_rank)}


# ------------------------------------------------------------------------- sentence-transformers


def _sentence_softmax_loss(model: Any, dim: int, num_labels: int) -> Any:
    """SoftmaxLoss's classifier over ONE sentence's embedding (SoftmaxLoss itself needs a pair)."""
    import torch
    from torch import nn

    class SentenceSoftmaxLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.classifier = nn.Linear(dim, num_labels, device=model.device)

        def forward(self, sentence_features: Sequence[dict[str, torch.Tensor]], labels: torch.Tensor) -> Any:
            embedding = self.model(sentence_features[0])["sentence_embedding"]
            return nn.functional.cross_entropy(self.classifier(embedding), labels.view(-1))

    return SentenceSoftmaxLoss()


def run_sentence_transformers(budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """``st_multitask``: one SentenceTransformer trained on the three tasks in round robin."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Args
    from sentence_transformers.base.sampler import MultiDatasetBatchSamplers
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss, SoftmaxLoss
    from transformers import set_seed

    set_seed(seed)
    model = SentenceTransformer(budget.encoder, device=_device())
    model.max_seq_length = budget.max_length
    dim = model.get_sentence_embedding_dimension()
    losses = {
        "sst": _sentence_softmax_loss(model, dim, 5),
        "qqp": SoftmaxLoss(model, dim, num_labels=2),
        "sts": CosineSimilarityLoss(model),
    }
    data_dir = budget.data_dir(seed)
    train = {}
    for task in TASKS:
        texts, labels = read_task(task, "train", data_dir)
        columns = {f"sentence{i + 1}": column for i, column in enumerate(texts)}
        # cosine-similarity loss regresses the cosine onto a 0..1 target: STS's 0..5 scaled
        train[task] = Dataset.from_dict(
            {**columns, "label": (labels / 5.0 if task == "sts" else labels).tolist()}
        )
    steps = len(TASKS) * budget.steps_per_task
    with tempfile.TemporaryDirectory() as tmp:
        args = Args(
            output_dir=tmp,
            max_steps=steps,
            per_device_train_batch_size=budget.batch_size,
            learning_rate=BASE_LR["st_multitask"] * scale,
            weight_decay=budget.weight_decay,
            warmup_steps=int(round(budget.warmup_ratio * steps)),
            lr_scheduler_type="linear",
            max_grad_norm=budget.max_grad_norm,
            seed=seed,
            data_seed=seed,
            multi_dataset_batch_sampler=MultiDatasetBatchSamplers.ROUND_ROBIN,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train, loss=losses)
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
    row: dict[str, Any] = {"lr": f"{BASE_LR['st_multitask'] * scale:g}", "train_s": train_s}
    model.eval()
    with torch.no_grad():
        for task in TASKS:
            texts, labels = read_task(task, "dev", data_dir)
            emb = [
                model.encode(column, batch_size=budget.eval_batch_size, convert_to_tensor=True)
                for column in texts
            ]
            if task == "sst":
                predictions = losses["sst"].classifier(emb[0]).argmax(-1)
            elif task == "qqp":
                u, v = emb
                predictions = losses["qqp"].classifier(torch.cat([u, v, (u - v).abs()], 1)).argmax(-1)
            else:
                predictions = torch.nn.functional.cosine_similarity(*emb)
            row[TASK_SCORE[task][1]] = score_task(task, predictions.cpu().numpy(), labels)
    heads = sum(p.numel() for t in ("sst", "qqp") for p in losses[t].classifier.parameters())
    encoder = sum(p.numel() for p in model.parameters())
    row["params_stored"] = encoder + heads
    row["params_per_task"] = round(heads / len(TASKS))
    return row


# ---------------------------------------------------------------------------------- pal-lightning


def pal_arguments(system: str, budget: Budget, scale: float, seed: int) -> tuple[dict, dict, dict]:
    """``MultiTaskModule``, ``MultiTaskDataModule`` and ``Trainer`` arguments of a pal system: the
    quickstart's, with the budget's encoder, data, limits and round-robin sampling."""
    import yaml

    recipe = yaml.safe_load(QUICKSTART.read_text())
    model = dict(recipe["model"]["init_args"])
    model.update(encoder=budget.encoder, lr=model["lr"] * scale, head_lr=model["head_lr"] * scale)
    model.update(weight_decay=budget.weight_decay, warmup_ratio=budget.warmup_ratio, **budget.pal_overrides)
    if system == "pal_shared":
        model["adapter"] = "none"
    elif system == "pal_adapter_only":
        model["freeze_encoder"] = True  # PALs and heads train, at head_lr
    steps = len(TASKS) * budget.steps_per_task
    data = dict(recipe["data"]["init_args"])
    data.update(
        tasks=model["tasks"],
        tokenizer=budget.encoder,
        pair_encoding=model["pair_encoding"],
        data_dir=str(budget.data_dir(seed)),
        batch_size=budget.batch_size,
        eval_batch_size=budget.eval_batch_size,
        max_length=budget.max_length,
        sampling="round_robin",  # the same number of examples per task as the peers
        steps_per_epoch=steps,
        cache_dir=False,
        seed=seed,
    )
    trainer = {
        "accelerator": "auto",
        "max_steps": steps,
        "limit_val_batches": 0,
        # fp32 as every peer trains here (the quickstart's "auto" would give pal-lightning bf16 on a CPU
        # with bf16 instructions: the same arithmetic for every system instead)
        "precision": "32-true",
        "gradient_clip_val": budget.max_grad_norm,
    }
    return model, data, trainer


def fit_pal(system: str, budget: Budget, scale: float, seed: int) -> tuple[Any, dict[str, Any], float]:
    """Train a pal-lightning system through its Python API and a Lightning Trainer: the module, its
    arguments and the training seconds."""
    import lightning.pytorch as pl

    from pal_lightning import MultiTaskDataModule, MultiTaskModule
    from pal_lightning.testing import quiet_trainer

    model_args, data_args, trainer_args = pal_arguments(system, budget, scale, seed)
    pl.seed_everything(seed, verbose=False)
    module = MultiTaskModule(**model_args)
    datamodule = MultiTaskDataModule(**data_args)
    trainer = quiet_trainer(**trainer_args)
    start = time.perf_counter()
    trainer.fit(module, datamodule)
    return module, model_args, time.perf_counter() - start


def run_pal(system: str, budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """A pal-lightning system, trained (:func:`fit_pal`) and scored by its own ``predict``."""
    from pal_lightning import parameter_report

    module, model_args, train_s = fit_pal(system, budget, scale, seed)
    module.predict_max_length = budget.max_length
    row: dict[str, Any] = {"lr": f"{model_args['lr']:g}/{model_args['head_lr']:g}", "train_s": train_s}
    for task in TASKS:
        texts, labels = read_task(task, "dev", budget.data_dir(seed))
        inputs = texts[0] if len(texts) == 1 else list(zip(*texts, strict=True))
        out = module.predict(task, inputs, batch_size=budget.eval_batch_size)
        row[TASK_SCORE[task][1]] = score_task(
            task, out.scores if out.scores is not None else out.classes, labels
        )
    report = parameter_report(module)
    row["params_stored"] = report.total
    row["params_per_task"] = round(sum(report.stored_per_task.values()) / len(report.tasks))
    if model_args["adapter"] != "none":
        row["adapter_per_task"] = round(
            sum(report.adapter_params(t) for t in report.tasks) / len(report.tasks)
        )
    return row


def tuned_stages(budget: Budget) -> tuple[Budget, Budget]:
    """``lora_tuned``'s two budgets: :data:`TUNED_ENCODER_SHARE` of each task's whole batches for the
    encoder (stage 1), the rest for the task's adapter (stage 2), at least one batch each; each reads
    its own data folder (:func:`split_training_files`)."""
    from dataclasses import replace

    steps = budget.steps_per_task
    if steps < 2:
        raise ValueError(f"lora_tuned needs at least 2 batches per task, got {steps}")
    first = min(steps - 1, max(1, round(TUNED_ENCODER_SHARE * steps)))
    root = Path(budget.data_root)
    return (
        replace(budget, examples_per_task=first * budget.batch_size, data_root=str(root / "tuned_encoder")),
        replace(
            budget, examples_per_task=(steps - first) * budget.batch_size, data_root=str(root / "tuned_lora")
        ),
    )


def split_training_files(budget: Budget, stages: tuple[Budget, Budget], seed: int) -> None:
    """The stages' data folders for a seed: dev and test files linked from the budget's, each task's
    training rows split in two disjoint parts (a seeded draw, in file order) in proportion to the
    stages' examples, so that stage 2 does not see again what stage 1 saw (as far as the rows go)."""
    from pal_lightning.tasks import get_task

    source = budget.data_dir(seed)
    names = {get_task(t).files["train"] for t in TASKS}
    targets = [stage.data_dir(seed) for stage in stages]
    for target in targets:
        shutil.rmtree(target, ignore_errors=True)  # written afresh: the same content at every rate
        target.mkdir(parents=True)
        for path in source.iterdir():
            if path.is_file() and path.name not in names:
                (target / path.name).symlink_to(path.resolve())
    share = stages[0].examples_per_task / (stages[0].examples_per_task + stages[1].examples_per_task)
    for name in sorted(names):
        lines = (source / name).read_text(encoding="utf-8").splitlines(keepends=True)
        rows = np.random.default_rng([seed, 1]).permutation(len(lines) - 1)
        cut = min(len(rows) - 1, max(1, round(share * len(rows))))
        for target, keep in zip(targets, (rows[:cut], rows[cut:]), strict=True):
            kept = "".join(lines[1 + i] for i in sorted(keep.tolist()))
            (target / name).write_text(lines[0] + kept, encoding="utf-8")


def run_lora_tuned(system: str, budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """``lora_tuned``: ``pal_shared`` fine-tunes the encoder on all tasks (stage 1), then one LoRA
    adapter per task trains on that frozen encoder (stage 2, :func:`train_one_task`)."""
    encoder_budget, lora_budget = tuned_stages(budget)
    split_training_files(budget, (encoder_budget, lora_budget), seed)
    module, model_args, encoder_s = fit_pal("pal_shared", encoder_budget, scale, seed)
    state = {k: v.detach().cpu().clone() for k, v in module.encoder.bert.state_dict().items()}
    del module  # its heads are not kept: each task gets a new classifier with its adapter
    lr = BASE_LR[system] * scale
    parts = {task: train_one_task("lora", task, lora_budget, lr, seed, encoder_state=state) for task in TASKS}
    row = per_task_row(parts, budget.lora_rank)
    row["lr"] = f"{model_args['lr']:g}/{model_args['head_lr']:g} then {lr:g}"
    row["train_s"] += encoder_s  # both stages: examples_per_task (run_unit) counts both too
    return row


def pal_adapter_size(budget: Budget) -> int:
    """Parameters of one task's PALs (weights and biases) in the ``pal_pals`` system."""
    from pal_lightning import MultiTaskModule, parameter_report

    model_args, _, _ = pal_arguments("pal_pals", budget, 1.0, 0)
    report = parameter_report(MultiTaskModule(**model_args))
    return report.adapter_params(report.tasks[0])


def matched_lora_rank(budget: Budget, target: int) -> int:
    """The LoRA rank whose adapter is closest in size to ``target`` parameters (LoRA grows linearly
    in the rank, so one rank-1 model gives the size per rank)."""
    _, per_rank, _ = lora_counts(lora_model(_classifier(budget, "qqp"), 1))
    return max(1, round(target / per_rank))


# -------------------------------------------------------------------------------------- running

RUNNERS: dict[str, Callable[[str, Budget, float, int], dict[str, Any]]] = {
    "trainer": run_per_task,
    "lora": run_per_task,
    "lora_tuned": run_lora_tuned,
    "st_multitask": lambda _s, b, scale, seed: run_sentence_transformers(b, scale, seed),
    "pal_shared": run_pal,
    "pal_pals": run_pal,
    "pal_adapter_only": run_pal,
}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_unit(system: str, budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """One system at one learning-rate scale and seed: its results row (without the command)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        system=system, lr_scale=scale, seed=seed, examples_per_task=budget.steps_per_task * budget.batch_size
    )
    try:
        row.update(RUNNERS[system](system, budget, scale, seed))
        row["status"] = "ok"
    except Exception as err:  # noqa: BLE001 - a peer that fails is reported, the others still run
        row["status"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    row["overall"] = overall(row)
    if row["train_s"] is not None:
        row["ms_per_example"] = 1000.0 * row["train_s"] / (len(TASKS) * row["examples_per_task"])
    row["peak_rss_mb"] = round(peak_rss_mb(), 1)
    row["device"] = _device()
    return row


def run_in_subprocess(system: str, budget: Budget, scale: float, seed: int, log: Path) -> dict[str, Any]:
    """:func:`run_unit` in a fresh Python process (its own peak memory; nothing shared between runs)."""
    spec = json.dumps({"system": system, "budget": asdict(budget), "scale": scale, "seed": seed})
    result = log.with_suffix(".json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", spec, "--worker-out", str(result)]
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0 or not result.is_file():
        row: dict[str, Any] = dict.fromkeys(COLUMNS)
        row.update(system=system, lr_scale=scale, seed=seed, status=f"exit {proc.returncode} (see {log})")
        return row
    return json.loads(result.read_text())


def choose_rates(rows: Sequence[dict[str, Any]], system: str) -> dict[str, float]:
    """The best ``--lrs`` value of a system per score column, by the mean over seeds on dev: one value
    for every task of a multi-task system (by overall), one per task for a one-model-per-task system."""
    mine = [r for r in rows if r["system"] == system and r["status"] == "ok"]
    scales = sorted({r["lr_scale"] for r in mine})
    if not scales:
        return {}

    def mean(column: str, scale: float) -> float:
        values = [r[column] for r in mine if r["lr_scale"] == scale and r[column] is not None]
        return sum(values) / len(values) if values else float("-inf")

    columns = [TASK_SCORE[t][1] for t in TASKS]
    if SYSTEMS[system]:
        return {c: max(scales, key=lambda s, c=c: mean(c, s)) for c in columns}
    best = max(scales, key=lambda s: mean("overall", s))
    return dict.fromkeys(columns, best)


def selected_scores(rows: Sequence[dict[str, Any]], system: str) -> dict[int, dict[str, float]]:
    """Per seed, the system's three scores at its chosen rates and their overall (complete seeds only)."""
    rates = choose_rates(rows, system)
    out: dict[int, dict[str, float]] = {}
    for seed in sorted({r["seed"] for r in rows if r["system"] == system}):
        scores = {}
        for column, scale in rates.items():
            match = [
                r for r in rows if r["system"] == system and r["seed"] == seed and r["lr_scale"] == scale
            ]
            if match and match[0][column] is not None:
                scores[column] = match[0][column]
        if len(scores) == len(TASKS):
            scores["overall"] = overall(scores)
            out[seed] = scores
    return out


def summarize(rows: Sequence[dict[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    """Per system: chosen rates, mean and sd of each score over seeds, and mean costs; and the paired
    difference of ``pal_pals`` minus each other system over the seeds both have."""
    summary: dict[str, Any] = {"systems": {}, "pal_pals_minus": {}}
    for system in systems:
        per_seed = selected_scores(rows, system)
        mine = [r for r in rows if r["system"] == system and r["status"] == "ok"]
        entry: dict[str, Any] = {"rates": choose_rates(rows, system), "seeds": sorted(per_seed)}
        for column in [*(TASK_SCORE[t][1] for t in TASKS), "overall"]:
            values = [s[column] for s in per_seed.values()]
            if values:
                m, sd = mean_std(values)
                entry[column] = {"mean": m, "sd": sd, "n": len(values)}
        for column in (
            "params_stored",
            "params_per_task",
            "adapter_per_task",
            "ms_per_example",
            "peak_rss_mb",
        ):
            values = [r[column] for r in mine if r[column] is not None]
            entry[column] = sum(values) / len(values) if values else None
        summary["systems"][system] = entry
    pals = selected_scores(rows, "pal_pals")
    for system in systems:
        other = selected_scores(rows, system)
        common = sorted(set(pals) & set(other))
        if system == "pal_pals" or not common:
            continue
        d = paired_difference([pals[s]["overall"] for s in common], [other[s]["overall"] for s in common])
        summary["pal_pals_minus"][system] = {
            "n": d.n, "mean": d.mean, "low": d.low, "high": d.high, "verdict": d.verdict
        }  # fmt: skip
    return summary


#: settings that must be equal for runs of two calls to be compared (the budget without its local paths)
RESUME_KEYS = ("encoder", "budget", "pal_adapter_per_task", "quick", "qqp_dev_limit", "dev_limit")


def resumed_rows(out: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """``--resume``: the finished runs (status ``ok``) recorded in ``out``'s JSON by an earlier call, which
    must have measured what this one measures (:data:`RESUME_KEYS`); ``settings`` gets the union of both
    calls' systems, seeds and rates. Raises :class:`ValueError` naming the settings that differ."""
    record = out.with_suffix(".json")
    if not record.is_file():
        return []
    earlier = json.loads(record.read_text())
    before = earlier["settings"]
    comparable = {k: v for k, v in settings["budget"].items() if k != "encoder"}
    differ = [
        k
        for k in RESUME_KEYS
        if (before.get(k) if k != "budget" else {x: y for x, y in before[k].items() if x != "encoder"})
        != (settings.get(k) if k != "budget" else comparable)
    ]
    if differ:
        raise ValueError(
            f"--resume: {record} was measured with other {', '.join(differ)}; run with that file's options "
            "(its 'settings') or write to another --out"
        )
    settings["systems"] = list(dict.fromkeys([*before["systems"], *settings["systems"]]))
    settings["seeds"] = sorted({*before["seeds"], *settings["seeds"]})
    settings["lr_multipliers"] = sorted({*before["lr_multipliers"], *settings["lr_multipliers"]})
    settings["base_lr"] = {**before["base_lr"], **settings["base_lr"]}
    return [row for row in earlier["runs"] if row["status"] == "ok"]


def write_outputs(out: Path, rows: Sequence[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """``out`` (CSV, every run) and ``out.with_suffix('.json')`` (settings, runs, summary)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in COLUMNS})
    summary = summarize(rows, settings["systems"])
    payload = {"settings": settings, "summary": summary, "runs": list(rows)}
    out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    return summary


def summary_table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (mean over seeds at the chosen rates)."""

    def cell(entry: dict[str, Any], column: str) -> str:
        value = entry.get(column)
        if not value:
            return ""
        sd = f" ± {value['sd']:.3f}" if value.get("sd") is not None else ""
        return f"{value['mean']:.3f}{sd}"

    lines = [
        "| system | seeds | SST acc | Quora acc | STS r | overall | stored params | per task | ms/example | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system, e in summary["systems"].items():
        stored, per_task = _fmt(e.get("params_stored"), "params"), _fmt(e.get("params_per_task"), "params")
        ms = f"{e['ms_per_example']:.1f}" if e.get("ms_per_example") else ""
        rss = f"{e['peak_rss_mb']:.0f} MiB" if e.get("peak_rss_mb") else ""
        lines.append(
            f"| {system} | {len(e['seeds'])} | {cell(e, 'sst_acc')} | {cell(e, 'qqp_acc')} | "
            f"{cell(e, 'sts_pearson')} | {cell(e, 'overall')} | {stored} | {per_task} | {ms} | {rss} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- figure

#: Columns of the results CSV read back as integers, and as floats (the rest stay text; blanks None).
INT_COLUMNS = (
    "seed",
    "params_stored",
    "params_per_task",
    "adapter_per_task",
    "lora_rank",
    "examples_per_task",
)
FLOAT_COLUMNS = (
    "lr_scale", "sst_acc", "qqp_acc", "sts_pearson", "overall", "train_s", "ms_per_example", "peak_rss_mb"
)  # fmt: skip


def read_results(csv_path: Path) -> list[dict[str, Any]]:
    """The rows of a results CSV written by :func:`write_outputs`, numbers as numbers, blanks as ``None``
    (what :func:`summarize` and :func:`selected_scores` take)."""

    def value(column: str, text: str) -> Any:
        if text == "":
            return None
        if column in INT_COLUMNS:
            return int(float(text))
        return float(text) if column in FLOAT_COLUMNS else text

    with Path(csv_path).open(newline="") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


@dataclass(frozen=True)
class PlotPoint:
    """One system in the score-against-stored-parameters figure."""

    system: str
    """The system's name (``SYSTEMS``)."""
    params_stored: float
    """Parameters stored to serve the three tasks (the mean over its runs; the same in every run)."""
    mean: float
    """Mean CS224N overall over the seeds, each seed at the system's chosen rates."""
    low: float
    """Lowest seed's overall (the bottom of the spread bar)."""
    high: float
    """Highest seed's overall (the top of the spread bar)."""
    seeds: int
    """Seeds with all three scores."""


def plot_points(rows: Sequence[dict[str, Any]]) -> list[PlotPoint]:
    """One point per system that has a complete seed, in the rows' order: its stored parameters and the
    mean, lowest and highest overall over seeds at its chosen rates (:func:`selected_scores`, the
    summary's choice, so the figure shows what the summary table shows)."""
    points = []
    for system in dict.fromkeys(r["system"] for r in rows):
        per_seed = [s["overall"] for s in selected_scores(rows, system).values()]
        stored = [
            r["params_stored"] for r in rows if r["system"] == system and r["params_stored"] is not None
        ]
        if per_seed and stored:
            mean, _ = mean_std(per_seed)
            points.append(
                PlotPoint(
                    system, sum(stored) / len(stored), mean, min(per_seed), max(per_seed), len(per_seed)
                )
            )
    return points


def describe_run(settings: dict[str, Any]) -> str:
    """One line saying what a results file measured, and whether it is the issue's comparison (at least
    3 seeds, 3 learning rates, whole dev sets, the real encoder) or a smoke run."""
    seeds, lrs = len(settings["seeds"]), len(settings["lr_multipliers"])
    dev = f"first {settings['dev_limit']} dev rows" if settings.get("dev_limit") else "whole dev sets"
    line = (
        f"{seeds} seed{'s' * (seeds != 1)}, {settings['budget']['examples_per_task']} examples per task, "
        f"{lrs} learning rate{'s' * (lrs != 1)}, {dev}"
    )
    comparison = seeds >= 3 and lrs >= 3 and not settings.get("dev_limit") and not settings.get("quick")
    return line + ("" if comparison else ": a smoke run, not the comparison")


def label_heights(x: Sequence[float], y: Sequence[float], gap: float = 0.045) -> list[float]:
    """Heights of the points' labels: each label at its point unless a higher point's label near it (x
    within a factor 1.3) is closer than ``gap`` of the y range; then just below that label. Systems
    often store nearly the same parameters, and their labels would print over each other."""
    span = (max(y) - min(y)) or 1.0
    heights = list(y)
    placed: list[int] = []
    for i in sorted(range(len(y)), key=lambda k: -y[k]):
        for j in placed:
            if max(x[i], x[j]) / min(x[i], x[j]) < 1.3 and heights[j] - heights[i] < gap * span:
                heights[i] = heights[j] - gap * span
        placed.append(i)
    return heights


def plot_peers(csv_path: Path, out: Path | None = None) -> Any:
    """Overall dev score against stored parameters (log scale), one labelled point per system: the mean
    over seeds, with a bar from the lowest to the highest seed. The title says what was run (from the
    JSON beside the CSV, when there is one). Saved to ``out`` (PNG) when given; returns the figure."""
    import matplotlib.pyplot as plt

    points = plot_points(read_results(csv_path))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    x = [p.params_stored / 1e6 for p in points]
    y = [p.mean for p in points]
    ax.errorbar(
        x, y, yerr=[[p.mean - p.low for p in points], [p.high - p.mean for p in points]],
        fmt="none", ecolor="grey", capsize=3,
    )  # fmt: skip
    ax.scatter(x, y, zorder=3)
    for p, xi, label_y in zip(points, x, label_heights(x, y), strict=True):
        ax.annotate(
            p.system, (xi, p.mean), xytext=(xi * 1.02, label_y), fontsize=8, va="center",
            arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5} if label_y != p.mean else None,
        )  # fmt: skip
    ax.set_xscale("log")
    ax.margins(x=0.12)  # room for the rightmost label
    # plain numbers on the log axis (22.6, not 2.26 x 10^1): the systems span one decade at most
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("parameters stored to serve SST, Quora and STS (millions, log scale)")
    ax.set_ylabel("CS224N overall dev score (mean over seeds)")
    settings_path = Path(csv_path).with_suffix(".json")
    title = "score against stored parameters, one point per system"
    if settings_path.is_file():
        title += "\n" + describe_run(json.loads(settings_path.read_text())["settings"])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, bbox_inches="tight")
    return fig


# ---------------------------------------------------------------------------------- quick fixture


def quick_encoder(folder: Path) -> Path:
    """A tiny random BERT (``pal_lightning.testing.TINY_BERT``) saved with the packaged MiniLM tokenizer,
    so every system loads the same weights from one folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from pal_lightning.hub import resolve_encoder
    from pal_lightning.testing import TINY_BERT

    if not (folder / "config.json").is_file():
        torch.manual_seed(0)
        BertModel(BertConfig(**TINY_BERT)).save_pretrained(folder)
        AutoTokenizer.from_pretrained(resolve_encoder("all-MiniLM-L6-v2")).save_pretrained(folder)
    return folder


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, from {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds --seed .. --seed + N - 1 (default 3)")
    parser.add_argument("--seed", type=int, default=42, help="the first seed (default 42)")
    parser.add_argument(
        "--lrs",
        default="0.5,1,2",
        help="learning-rate search: multipliers of each system's base rates, the same for all (default 0.5,1,2)",
    )
    parser.add_argument(
        "--examples-per-task",
        type=int,
        default=12800,
        help="training examples seen per task (default 12800: the quickstart's 1,200 steps of 32 over 3 tasks)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64, help="tokens per encoder input (default 64)")
    parser.add_argument(
        "--qqp-dev-limit", type=int, default=0, help="score the first N Quora dev pairs; 0 = all"
    )
    parser.add_argument(
        "--dev-limit",
        type=int,
        default=0,
        help="score the first N dev examples of every task; 0 = all (default). Smoke runs only: the files are\n"
        "not shuffled (SST's first 400 dev rows are 44 %% class 3, the whole file 24 %%)",
    )
    parser.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results_peers.csv", help="CSV (and .json)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for budget data and logs (default: temporary)"
    )
    parser.add_argument("--in-process", action="store_true", help="run every system in this process")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished runs of the --out file (same budget and dev sets, else refused) and run only\n"
        "the others: the comparison can be run in parts, one session at a time",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny random encoder and fixture data, in-process (tests)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or not args.systems:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    try:
        args.lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--lrs {args.lrs!r}: write comma-separated numbers, e.g. 0.5,1,2")
    if not args.lrs or any(x <= 0 for x in args.lrs):
        parser.error("--lrs needs at least one positive multiplier")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.examples_per_task < args.batch_size:
        parser.error("--examples-per-task must be at least --batch-size")
    if "lora_tuned" in args.systems and args.examples_per_task < 2 * args.batch_size and not args.quick:
        parser.error(
            "--systems lora_tuned trains in two stages: --examples-per-task must be at least 2 batches"
        )
    if not args.quick:
        args.data_dir = cs224n_data_dir(parser, args.data_dir)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    if args.worker:  # one run in a subprocess of main()
        spec = json.loads(args.worker)
        row = run_unit(spec["system"], Budget(**spec["budget"]), spec["scale"], spec["seed"])
        row["rss_scope"] = "run"
        args.worker_out.write_text(json.dumps(row))
        return 0
    words = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/peers.py", *words])
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return _run(args, work, command)


def _run(args: argparse.Namespace, work: Path, command: str) -> int:
    from pal_lightning.hub import resolve_encoder

    seeds = [args.seed + i for i in range(args.seeds)]
    overrides: dict[str, Any] = {}
    if args.quick:
        from pal_lightning.testing import write_cs224n_data

        source = write_cs224n_data(work / "fixture")
        encoder = str(quick_encoder(work / "tiny_encoder"))
        overrides = {"pal_size": 8, "pal_heads": 2}
        # seconds, not minutes: two batches of four short examples per task, one torch thread (a
        # tiny model gains nothing from more, and on a busy machine extra threads only wait for cores)
        import torch

        torch.set_num_threads(1)
        args.batch_size, args.max_length = 4, 32
        args.examples_per_task = min(args.examples_per_task, 2 * args.batch_size)
    else:
        source = args.data_dir.resolve()
        encoder = resolve_encoder(args.encoder)
    budget = Budget(
        encoder=encoder,
        data_root=str(work / "data"),
        examples_per_task=args.examples_per_task // args.batch_size * args.batch_size,
        batch_size=args.batch_size,
        eval_batch_size=16 if args.quick else 128,
        max_length=args.max_length,
        pal_overrides=overrides,
    )
    for seed in seeds:
        write_budget_data(
            source, budget.data_dir(seed), budget.examples_per_task, seed, args.qqp_dev_limit, args.dev_limit
        )
    pal_size = pal_adapter_size(budget)
    from dataclasses import replace

    budget = replace(budget, lora_rank=matched_lora_rank(budget, pal_size))
    in_process = args.in_process or args.quick
    settings = {
        "command": command,
        "encoder": args.encoder,
        "systems": args.systems,
        "seeds": seeds,
        "lr_multipliers": args.lrs,
        "base_lr": {s: BASE_LR[s] for s in args.systems},
        "budget": {**asdict(budget), "data_root": None},
        "pal_adapter_per_task": pal_size,
        "quick": args.quick,
        "qqp_dev_limit": args.qqp_dev_limit,
        "dev_limit": args.dev_limit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_avg_at_start": os.getloadavg()[0],
    }
    print(
        f"budget: {budget.examples_per_task} examples per task, batch {budget.batch_size}, max_length "
        f"{budget.max_length}; seeds {seeds}; lr multipliers {args.lrs}; PAL adapter {pal_size} parameters "
        f"per task, LoRA rank {budget.lora_rank}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    if args.resume:
        try:
            rows = resumed_rows(args.out, settings)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    done = {(row["seed"], row["system"], row["lr_scale"]) for row in rows}
    runs = [
        (seed, system, scale)
        for seed in seeds
        for system in args.systems
        for scale in args.lrs
        if (seed, system, scale) not in done
    ]
    if rows:
        print(f"--resume: {len(rows)} finished runs kept from {args.out}, {len(runs)} to run", flush=True)
    summary = summarize(rows, settings["systems"])  # written after each run below
    for k, (seed, system, scale) in enumerate(runs, 1):
        if in_process:
            row = run_unit(system, budget, scale, seed)
            row["rss_scope"] = "process"
        else:
            log = work / "logs" / f"{system}-lr{scale:g}-seed{seed}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            row = run_in_subprocess(system, budget, scale, seed, log)
        row["command"] = (
            f"python benchmarks/peers.py --systems {system} --seeds {args.seeds} --seed {args.seed} "
            f"--lrs {','.join(f'{x:g}' for x in args.lrs)} --examples-per-task {budget.examples_per_task} "
            f"--max-length {args.max_length} --qqp-dev-limit {args.qqp_dev_limit}"
            + (f" --dev-limit {args.dev_limit}" if args.dev_limit else "")
            + (" --quick" if args.quick else "")
        )
        rows.append(row)
        scores = "  ".join(
            f"{c} {row[c]:.3f}"
            for c in ("sst_acc", "qqp_acc", "sts_pearson", "overall")
            if row[c] is not None
        )
        print(f"[{k}/{len(runs)}] {system} lr x{scale:g} seed {seed}: {scores}  {row['status']}", flush=True)
        summary = write_outputs(args.out, rows, settings)
    if args.work is None:
        shutil.rmtree(work / "data", ignore_errors=True)
    print(summary_table(summary))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
