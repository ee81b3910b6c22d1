"""The systems that ``benchmarks/peers.py`` compares, one runner each: a system trained on a
:class:`~peers_budget.Budget` at one learning-rate scale and seed, and its part of the results row
(dev scores, training seconds, stored parameters).

The ``transformers`` Trainer per task and ``peft`` LoRA on it, ``lora_tuned`` (pal-lightning's shared
encoder, then LoRA per task), ``sentence-transformers``' multi-task trainer, the pal-lightning systems,
the PAL size that sets the LoRA rank, and :data:`RUNNERS`, the table from system to runner. Kept apart
from the entry point and the summaries: the only module that trains (and imports the peers' libraries,
inside its functions).
"""

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
from peers_budget import (  # noqa: E402
    BASE_LR,
    REPO,
    TASK_SCORE,
    TASKS,
    TUNED_ENCODER_SHARE,
    Budget,
    read_task,
    score_task,
)

QUICKSTART = REPO / "configs" / "quickstart.yaml"


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

    from pal_lightning.tasks.specs import get_task

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
    """Put a fine-tuned pal-lightning encoder's weights (``MultiTaskEncoder.backbone.state_dict()``, no pooler)
    into a ``BertForSequenceClassification``'s ``bert``, keeping its pretrained pooler; anything else
    missing or left over is an error, so no layer silently stays pretrained."""
    result = model.bert.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith("pooler.")]
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"fine-tuned encoder does not fit: missing {missing}, unexpected {result.unexpected_keys}"
        )


def trainer_schedule(budget: Budget, output_dir: str, steps: int, lr: float, seed: int) -> dict[str, Any]:
    """The ``TrainingArguments`` every Trainer-based peer shares (transformers' and sentence-transformers'):
    the budget's steps, rate, warmup then linear decay, weight decay and clipping, the seeds; no logging,
    saving or progress bars."""
    return {
        "output_dir": output_dir,
        "max_steps": steps,
        "per_device_train_batch_size": budget.batch_size,
        "learning_rate": lr,
        "weight_decay": budget.weight_decay,
        "warmup_steps": int(round(budget.warmup_ratio * steps)),
        "lr_scheduler_type": "linear",
        "max_grad_norm": budget.max_grad_norm,
        "seed": seed,
        "data_seed": seed,
        "report_to": "none",
        "save_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "bf16": budget.precision == "bf16-mixed",  # autocast, as Lightning's bf16-mixed
        "use_cpu": _device() == "cpu",  # the Trainer refuses bf16 on a CPU unless told it is one
    }


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
            **trainer_schedule(budget, tmp, steps, lr, seed),
            per_device_eval_batch_size=budget.eval_batch_size,
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
            **trainer_schedule(budget, tmp, steps, BASE_LR["st_multitask"] * scale, seed),
            multi_dataset_batch_sampler=MultiDatasetBatchSamplers.ROUND_ROBIN,
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
    optim = dict(model["optim"])
    optim.update(lr=optim["lr"] * scale, head_lr=optim["head_lr"] * scale)
    optim.update(weight_decay=budget.weight_decay, warmup_ratio=budget.warmup_ratio)
    model["encoder"] = budget.encoder
    overrides = dict(budget.pal_overrides)
    model["adapter"] = {**model["adapter"], **overrides.pop("adapter", {})}
    model["optim"] = {**optim, **overrides.pop("optim", {})}
    model.update(overrides)
    if system == "pal_shared":
        model["adapter"] = {**model["adapter"], "method": "none"}
    elif system == "pal_adapter_only":
        model["optim"]["freeze_encoder"] = True  # PALs and heads train, at head_lr
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
        # the budget's precision, as every peer trains (the quickstart's "auto" would give pal-lightning
        # bf16 on a CPU with bf16 instructions and fp32 elsewhere: the same arithmetic for every system)
        "precision": budget.precision,
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
    rates = model_args["optim"]
    row: dict[str, Any] = {"lr": f"{rates['lr']:g}/{rates['head_lr']:g}", "train_s": train_s}
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
    if model_args["adapter"]["method"] != "none":
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
    from pal_lightning.tasks.specs import get_task

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
    state = {k: v.detach().cpu().clone() for k, v in module.encoder.backbone.state_dict().items()}
    del module  # its heads are not kept: each task gets a new classifier with its adapter
    lr = BASE_LR[system] * scale
    parts = {task: train_one_task("lora", task, lora_budget, lr, seed, encoder_state=state) for task in TASKS}
    row = per_task_row(parts, budget.lora_rank)
    row["lr"] = f"{model_args['optim']['lr']:g}/{model_args['optim']['head_lr']:g} then {lr:g}"
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


# -------------------------------------------------------------------------------------- runners

RUNNERS: dict[str, Callable[[str, Budget, float, int], dict[str, Any]]] = {
    "trainer": run_per_task,
    "lora": run_per_task,
    "lora_tuned": run_lora_tuned,
    "st_multitask": lambda _s, b, scale, seed: run_sentence_transformers(b, scale, seed),
    "pal_shared": run_pal,
    "pal_pals": run_pal,
    "pal_adapter_only": run_pal,
}
