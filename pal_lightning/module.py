"""The multi-task LightningModule: one PAL-augmented encoder, one head per task.

Every batch holds one task (see :mod:`pal_lightning.batch`); the module reads
``batch["task"]``, runs the encoder with that task's adapter, pools, applies
the task's head and its loss. Validation and test keep one torchmetrics
collection per task and stage and log ``val/<task>/<metric>`` and
``val/overall`` (``test/...`` likewise) at the end of the epoch; an evaluation that reached only
some of the :attr:`~MultiTaskModule.scored_tasks` logs ``val/overall_partial`` instead.

Subclassing: override any of

* :meth:`MultiTaskModule.build_heads` -> ``nn.ModuleDict`` of heads keyed by task,
* :meth:`MultiTaskModule.encode` -> pooled vectors ``(u, v)`` (``v`` only for siamese pairs),
* :meth:`MultiTaskModule.forward` -> the head's output,
* :meth:`MultiTaskModule.compute_loss` -> the loss of one batch,

e.g. to try another head or loss without touching the library.

Two safety nets:

* a numerical guard: an optimizer step whose gradients are not all finite is skipped (no weight
  moves) and counted; ``max_nonfinite_steps`` such steps in a row stop the run with a
  :class:`NonFiniteTrainingError` naming the tasks and the step;
* a checkpoint check: loading a checkpoint trained for other tasks, another encoder or another
  adapter shape stops with a message saying what differs (:meth:`MultiTaskModule.on_load_checkpoint`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pal_lightning.auxiliary import check_auxiliary
from pal_lightning.batch import LABELS, TASK, side_keys
from pal_lightning.errors import PalUserError
from pal_lightning.hub import DEFAULT_ENCODER, resolve_encoder
from pal_lightning.inference import InferenceMixin
from pal_lightning.init_weights import load_initial_weights
from pal_lightning.metrics import build_task_metrics, overall_over, scored_task_names
from pal_lightning.modeling.heads import POOLING_MODES, build_head, check_loss, pool, predict, task_loss
from pal_lightning.modeling.param_groups import GroupRates, build_parameter_groups
from pal_lightning.modeling.simcse import SimCSEConfig, as_simcse_config, simcse_batch_loss
from pal_lightning.pretrained import PretrainedMixin
from pal_lightning.tasks import TaskSpec, resolve_tasks, task_to_hparam

STAGES = ("val", "test")

#: Hyper-parameters that fix the shape or meaning of the weights: a checkpoint must agree on them.
ARCHITECTURE_HPARAMS = (
    "encoder",
    "bert_config",
    "adapter",
    "pal_size",
    "pal_heads",
    "pal_placement",
    "pal_num_layers",
    "pal_activation",
    "layer_sharing",
    "task_groups",
    "pooling",
    "pair_encoding",
)
#: Hyper-parameters that also fix the optimizer's parameter groups: a resumed ``fit`` needs them equal.
OPTIMIZER_HPARAMS = ("freeze_encoder", "freeze_embeddings", "adapter_lr", "layer_lr_decay")


class NonFiniteTrainingError(PalUserError):
    """Training stopped after too many consecutive optimizer steps with non-finite gradients."""


def linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor at optimizer step ``step`` (0-based): linear warmup, then linear decay to 0.

    ::

        f(s) = (s + 1) / (warmup + 1)                 for s < warmup
        f(s) = (total - s) / (total - warmup)         for warmup <= s < total
        f(s) = 0                                      for s >= total

    Unlike the common ``s / warmup`` this never gives the first step a zero
    learning rate, and the last of the ``total`` steps still moves the weights
    (``f(total - 1) = 1 / (total - warmup) > 0``); the peak ``f(warmup) = 1``.

    Raises:
        ValueError: for ``total < 1`` or a negative ``warmup``.
    """
    if total < 1 or warmup < 0:
        raise ValueError(
            f"linear_warmup_decay needs total >= 1 and warmup >= 0, got total={total}, warmup={warmup}"
        )
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if step >= total:
        return 0.0
    return (total - step) / (total - warmup)


def _pad_right(x: Tensor, length: int) -> Tensor:
    return F.pad(x, (0, length - x.shape[1]), value=0)


class MultiTaskModule(PretrainedMixin, InferenceMixin, pl.LightningModule):
    """Multi-task fine-tuning of a BERT encoder with task-specific adapters (PALs) and heads.

    Args:
        tasks: task names (``sst``, ``qqp``, ``sts``, ...) or :class:`~pal_lightning.tasks.TaskSpec` objects.
        encoder: hub id or local directory of a BERT-family encoder (resolved offline by
            :func:`pal_lightning.hub.resolve_encoder`); ignored when ``bert_config`` is given.
        adapter: task-specific function beside each layer: ``pals``, ``pals_no_sharing``, ``low_rank``,
            ``pff`` (projected feed-forward), or after the last layer: ``pa_on_top``, ``bert_layer_on_top``;
            or ``none`` (the shared baseline: only heads are task-specific). See
            :class:`~pal_lightning.modeling.PALConfig`.
        pal_size: d_s, width of the projected space; ``None`` scales the paper's 204 (at width 768).
        pal_heads: heads of the PAL attention.
        pal_placement: layers that get adapters: ``all``, ``top`` or ``bottom``.
        pal_num_layers: k for ``top``/``bottom`` placement (``None``: half the layers).
        pal_init: ``zero`` (step 0 is exactly the pretrained encoder) or ``random`` (the reference's N(0, 0.02)).
        pal_activation: ``none`` (default) or ``gelu``: a GELU after V^D, as in the reference code.
        layer_sharing: layer-sharing regime, one letter per encoder layer, bottom first: ``F`` frozen,
            ``S`` shared, ``I`` individual (a copy per task starting from the pretrained layer), e.g.
            ``FFSSII``; ``None``: all shared (:mod:`pal_lightning.modeling.sharing`).
        task_groups: groups of related tasks that share their copies of the ``I`` layers, e.g.
            ``[[sst, qqp]]``; a task in no group has its own copies.
        pooling: sentence vector: ``mean`` over non-padding tokens (what all-MiniLM-L6-v2 was trained
            with) or ``cls``.
        pair_encoding: ``cross`` (both sentences in one sequence) or ``siamese`` (each alone), or a
            per-task mapping with an optional ``default``; must match the data module's setting.
        dropout: dropout before each head's linear layer.
        lr: peak learning rate of the pretrained encoder weights.
        head_lr: peak learning rate of the new parameters (heads, and adapters unless ``adapter_lr`` is
            set), which start from scratch.
        adapter_lr: peak learning rate of the adapters (PALs); ``None`` means ``head_lr``.
        layer_lr_decay: layer-wise learning-rate decay of the encoder: layer ``l`` (0-based) of ``L``
            gets ``lr * layer_lr_decay**(L - l)``, the embeddings ``lr * layer_lr_decay**(L + 1)``;
            1.0 = one rate (see :mod:`pal_lightning.modeling.param_groups`).
        weight_decay: AdamW decoupled weight decay, not applied to biases and LayerNorm weights.
        warmup_ratio: fraction of the total optimizer steps spent warming up linearly.
        warmup_steps: absolute number of warmup steps; overrides ``warmup_ratio`` when set.
        freeze_embeddings: keep the pretrained embedding layer fixed.
        freeze_encoder: keep every pretrained weight fixed and train only adapters and heads (the paper's
            parameter-efficient setting).
        attn_implementation: transformers attention kernel (``sdpa``, ``eager``); ``None`` = library default.
        bert_config: keyword arguments of a ``transformers.BertConfig``; when given, a randomly initialised
            encoder of that shape is built instead of loading ``encoder`` (tests, parameter counting).
        max_nonfinite_steps: how many optimizer steps in a row may have a non-finite gradient (NaN or
            inf, from a non-finite loss or an overflow) before training stops with a
            :class:`NonFiniteTrainingError`. Each such step is skipped: every gradient is dropped, so
            AdamW moves no weight and leaves its moments alone (the learning-rate schedule still
            advances). Under fp16 mixed precision, overflows at a loss scale >= 1 are the
            ``GradScaler``'s ordinary work (it halves the scale and retries) and do not count.
        simcse: SimCSE as an auxiliary loss on the text of chosen tasks
            (:class:`~pal_lightning.modeling.simcse.SimCSEConfig`); ``None`` = off.
        auxiliary: tasks trained (sampled, with heads and adapters) but left out of ``val/overall`` and
            ``test/overall``; their own metrics are still logged. The model owns this list because it
            owns the task list and computes the overall score (the data module only samples; a task's
            sampling weight is ``data.task_multipliers``).
        init_from: a checkpoint of this module (e.g. the best one of a joint stage-1 run) whose weights
            are copied in when ``fit`` starts: weights only, not a resume (no optimizer, schedule or step
            count); checked like any checkpoint (same tasks, encoder and adapter shape). Used by the
            two-stage recipe "joint, then specialise" with ``freeze_encoder``. The file is read only
            then, so a stage-2 checkpoint still loads (validate, predict) where it is gone.
        encoder_revision: hub branch, tag or commit of ``encoder`` to use (pins the weights; the data
            module's tokenizer follows through the CLI link); ``None``: the packaged or cached copy, else
            the hub's default branch.
    """

    def __init__(
        self,
        tasks: Sequence[str | TaskSpec] = ("sst", "qqp", "sts"),
        encoder: str = DEFAULT_ENCODER,
        adapter: str = "pals",
        pal_size: int | None = None,
        pal_heads: int = 6,
        pal_placement: str = "all",
        pal_num_layers: int | None = None,
        pal_init: str = "zero",
        pal_activation: str = "none",
        layer_sharing: str | None = None,
        task_groups: list[list[str]] | None = None,
        pooling: str = "mean",
        pair_encoding: str | dict[str, str] = "cross",
        dropout: float = 0.1,
        lr: float = 3e-5,
        head_lr: float = 5e-4,
        adapter_lr: float | None = None,
        layer_lr_decay: float = 1.0,
        weight_decay: float = 0.01,
        warmup_ratio: float = 0.1,
        warmup_steps: int | None = None,
        freeze_embeddings: bool = False,
        freeze_encoder: bool = False,
        attn_implementation: str | None = None,
        bert_config: dict[str, Any] | None = None,
        max_nonfinite_steps: int = 10,
        simcse: SimCSEConfig | None = None,
        auxiliary: Sequence[str] | None = None,
        init_from: str | None = None,
        encoder_revision: str | None = None,
    ) -> None:
        super().__init__()
        self.task_specs: dict[str, TaskSpec] = {s.name: s for s in resolve_tasks(tasks)}
        # tasks are saved as names / plain dicts, not TaskSpec objects, so that checkpoints stay
        # loadable with torch.load(weights_only=True)
        self.save_hyperparameters(ignore=["tasks"])
        self.save_hyperparameters({"tasks": [task_to_hparam(s) for s in self.task_specs.values()]})
        self.simcse = as_simcse_config(simcse)
        # saved as a plain dict for the same reason (weights_only loading)
        self.save_hyperparameters({"simcse": None if self.simcse is None else asdict(self.simcse)})
        self.save_hyperparameters({"auxiliary": check_auxiliary(auxiliary, list(self.task_specs))})
        if pooling not in POOLING_MODES:
            raise PalUserError(f"Unknown pooling {pooling!r}: choose one of {POOLING_MODES}.")
        if not 0.0 <= warmup_ratio <= 1.0:
            raise PalUserError(f"warmup_ratio must lie in [0, 1], got {warmup_ratio}.")
        if warmup_steps is not None and warmup_steps < 0:
            raise PalUserError(
                f"warmup_steps must be >= 0 (or None to use warmup_ratio), got {warmup_steps}."
            )
        if not 0.0 < layer_lr_decay <= 1.0:
            raise PalUserError(f"layer_lr_decay must lie in (0, 1] (1 = no decay), got {layer_lr_decay}.")
        if self.simcse is not None:
            self.simcse.check(self.task_specs)
        if freeze_encoder and isinstance(layer_sharing, str) and "I" in layer_sharing.upper():
            raise PalUserError(
                f"layer_sharing {layer_sharing!r} has individual (I) layers, which freeze_encoder would freeze: "
                "set freeze_encoder: false (mark the layers to keep fixed with F), or use F/S letters only."
            )
        if max_nonfinite_steps < 1:
            raise PalUserError(f"max_nonfinite_steps must be >= 1, got {max_nonfinite_steps}.")
        for spec in self.task_specs.values():
            check_loss(spec)  # fail at construction, not at the first batch

        self.encoder = self.build_encoder()
        self.heads = self.build_heads()
        missing = sorted(set(self.task_specs) - set(self.heads.keys()))
        if missing:
            raise PalUserError(f"build_heads() returned no head for task(s) {missing}.")
        if self.simcse is not None:
            self._check_simcse_pairs()
        self.metrics = nn.ModuleDict(
            {
                stage: nn.ModuleDict(
                    {
                        name: build_task_metrics(spec, prefix=f"{stage}/{name}/")
                        for name, spec in self.task_specs.items()
                    }
                )
                for stage in STAGES
            }
        )
        # per-stage count of labelled batches seen this epoch, and running loss sums
        self._eval_counts: dict[str, dict[str, int]] = {s: {} for s in STAGES}
        self._eval_loss: dict[str, dict[str, list[Tensor]]] = {s: {} for s in STAGES}
        self.last_scores: dict[str, dict[str, float]] = {}
        """The last computed ``{stage/task/metric: value}`` per stage (``val``, ``test``), for inspection."""
        # numerical guard: tasks of the current accumulation window, whether one of its losses was
        # non-finite (a tensor, so that no step waits for the device), skipped steps in a row and in all
        self._window_tasks: list[str] = []
        self._window_bad_loss: Tensor | None = None
        self.nonfinite_in_a_row = 0
        self.nonfinite_steps = 0
        # SimCSE reuses the training step's own sentence vectors as its first view (see training_step)
        self._simcse_capturing = False
        self._simcse_view: Tensor | None = None

        self._apply_freezing()

    # ------------------------------------------------------------------ building

    def build_encoder(self) -> nn.Module:
        """The shared encoder: ``MultiTaskBert`` loaded from ``encoder``, or random from ``bert_config``."""
        from pal_lightning.modeling import MultiTaskBert, PALConfig

        hp = self.hparams
        specs = list(self.task_specs.values())
        pal_kwargs = dict(
            adapter=hp.adapter,
            pal_size=hp.pal_size,
            num_heads=hp.pal_heads,
            placement=hp.pal_placement,
            num_layers=hp.pal_num_layers,
            init=hp.pal_init,
            activation=hp.get("pal_activation", "none"),
        )
        if hp.bert_config is not None:
            return MultiTaskBert.from_config(
                dict(hp.bert_config),
                specs,
                attn_implementation=hp.attn_implementation,
                layer_sharing=hp.get("layer_sharing"),
                task_groups=hp.get("task_groups"),
                **pal_kwargs,
            )
        return MultiTaskBert.from_pretrained(
            resolve_encoder(hp.encoder, hp.get("encoder_revision")),
            specs,
            pal=PALConfig(**pal_kwargs),
            attn_implementation=hp.attn_implementation,
            layer_sharing=hp.get("layer_sharing"),
            task_groups=hp.get("task_groups"),
        )

    def build_heads(self) -> nn.ModuleDict:
        """One head per task (:func:`pal_lightning.modeling.heads.build_head`), keyed by task name."""
        hidden = self.encoder.hidden_size
        return nn.ModuleDict(
            {
                name: build_head(spec, hidden, self.hparams.pair_encoding, self.hparams.dropout)
                for name, spec in self.task_specs.items()
            }
        )

    def _apply_freezing(self) -> None:
        if self.hparams.freeze_encoder:
            for _, p in self.encoder.pretrained_parameters():
                p.requires_grad_(False)
        elif self.hparams.freeze_embeddings:
            for p in self.encoder.bert.embeddings.parameters():
                p.requires_grad_(False)

    @property
    def scored_tasks(self) -> list[str]:
        """The tasks the overall score covers: all tasks except auxiliary ones (an ``auxiliary``
        attribute or hyper-parameter listing task names, or ``TaskSpec.auxiliary``)."""
        auxiliary = getattr(self, "auxiliary", None)
        if auxiliary is None:
            auxiliary = self.hparams.get("auxiliary")
        if isinstance(auxiliary, str):
            auxiliary = [auxiliary]
        return scored_task_names(self.task_specs.values(), tuple(auxiliary or ()))

    def parameter_report(self) -> Any:
        """Shared, per-task and total parameter counts (:func:`pal_lightning.modeling.parameter_report`)."""
        from pal_lightning.modeling import parameter_report

        return parameter_report(self)

    def setup(self, stage: str) -> None:
        """Copy ``init_from``'s weights in before ``fit`` (a resumed fit then restores its own over them)."""
        if stage == "fit" and self.hparams.get("init_from"):
            load_initial_weights(self, self.hparams.init_from)

    # ------------------------------------------------------------------ model

    def _spec(self, batch: Mapping[str, Any]) -> TaskSpec:
        task = batch[TASK]
        try:
            return self.task_specs[task]
        except KeyError:
            raise PalUserError(
                f"Batch of task {task!r}, but the model was built for {sorted(self.task_specs)}. "
                "Use the same task list for the model and the data."
            ) from None

    def _is_siamese(self, task: str) -> bool:
        return bool(getattr(self.heads[task], "siamese", False))

    def encode(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor | None]:
        """Pooled sentence vectors of a batch: ``(u, None)``, or ``(u, v)`` for a siamese pair.

        Siamese sentences are padded to one length and run through the encoder in
        one pass of ``2B`` sequences (padding does not change mean or CLS pooling).
        """
        task = batch[TASK]
        mode = self.hparams.pooling
        siamese = self._is_siamese(task)
        if not siamese:
            if "input_ids" not in batch:
                raise PalUserError(
                    f"Task {task!r}: the model encodes pairs 'cross' but the batch is 'siamese'. "
                    "Set the same pair_encoding for the model and the data."
                )
            mask = batch["attention_mask"]
            hidden = self.encoder(batch["input_ids"], mask, batch.get("token_type_ids"), task=task)
            pooled = pool(hidden, mask, mode)
            if not self.task_specs[task].is_pair:  # a cross pair's vector is not a sentence's
                self._capture_simcse_view(pooled)
            return pooled, None
        keys_a, keys_b = side_keys("a"), side_keys("b")
        if keys_a[0] not in batch:
            raise PalUserError(
                f"Task {task!r}: the model encodes pairs 'siamese' but the batch is 'cross'. "
                "Set the same pair_encoding for the model and the data."
            )
        length = max(batch[keys_a[0]].shape[1], batch[keys_b[0]].shape[1])
        stacked = []
        for ka, kb in zip(keys_a, keys_b, strict=True):
            if ka not in batch:  # token_type_ids are optional
                stacked.append(None)
                continue
            stacked.append(torch.cat([_pad_right(batch[ka], length), _pad_right(batch[kb], length)]))
        ids, mask, types = stacked
        pooled = pool(self.encoder(ids, mask, types, task=task), mask, mode)
        self._capture_simcse_view(pooled)  # [a; b]: the sentence order SimCSE uses
        u, v = pooled.chunk(2)
        return u, v

    def forward(self, batch: Mapping[str, Any]) -> Tensor:
        """The head output of one batch: logits ``[B, C]`` (``[B, 1]`` for bce), or scores ``[B]`` in 0..1."""
        spec = self._spec(batch)
        u, v = self.encode(batch)
        head = self.heads[spec.name]
        return head(u, v) if self._is_siamese(spec.name) else head(u)

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        """The loss of one batch of ``task`` (:func:`pal_lightning.modeling.heads.task_loss`)."""
        return task_loss(self.task_specs[task], output, labels)

    def predict_from_output(self, task: str, output: Tensor) -> Tensor:
        """Class indices, or scores on the task's scale (:func:`pal_lightning.modeling.heads.predict`)."""
        return predict(self.task_specs[task], output)

    def batch_loss(self, batch: Mapping[str, Any]) -> Tensor:
        """Forward and loss of a labelled batch (also what GEM-style callbacks call on memory batches)."""
        spec = self._spec(batch)
        if LABELS not in batch:
            raise PalUserError(f"A {spec.name!r} batch without labels cannot be trained on.")
        return self.compute_loss(spec.name, self(batch), batch[LABELS])

    # ------------------------------------------------------------------ steps

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        task = self._spec(batch).name
        use_simcse = self.simcse_active(task)
        # the task forward's pooled sentences (with their dropout) serve as SimCSE's first view, so
        # SimCSE adds one forward/backward of the sentences (none in 'sup' mode), not two
        self._simcse_capturing, self._simcse_view = use_simcse, None
        try:
            loss = self.batch_loss(batch)
        finally:
            self._simcse_capturing = False
        size = len(batch["ids"])
        # logger=False: Lightning would repeat every task's last loss on every metrics.csv row;
        # TrainingLog writes the trained task's loss alone
        self.log(f"train/{task}/loss", loss, batch_size=size, logger=False)
        if use_simcse:
            view, self._simcse_view = self._simcse_view, None
            auxiliary = self.simcse_loss(batch, first_view=view)
            self.log("train/simcse_loss", auxiliary, batch_size=size)
            # part of this step's gradient only: GEM's memories call batch_loss, without it
            loss = loss + self.simcse.weight * auxiliary
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        # Always return the loss, even a NaN one: returning None would skip backward on this rank
        # only and hang DDP's gradient all-reduce. The guard in on_before_optimizer_step decides.
        if task not in self._window_tasks:
            self._window_tasks.append(task)
        bad = ~torch.isfinite(loss.detach())
        self._window_bad_loss = bad if self._window_bad_loss is None else self._window_bad_loss | bad
        return loss

    # ------------------------------------------------------------------ SimCSE

    def _check_simcse_pairs(self) -> None:
        """Supervised SimCSE needs each sentence of a pair alone: refuse ``cross`` pairs for it."""
        assert self.simcse is not None
        if self.simcse.mode != "sup":
            return
        cross = [t for t in self.simcse.active_tasks(self.task_specs) if not self._is_siamese(t)]
        if cross:
            raise PalUserError(
                f"simcse mode 'sup' needs pair_encoding 'siamese' for {cross} (anchor and positive "
                "encoded alone); set --model.pair_encoding siamese (and the data's)."
            )

    def simcse_active(self, task: str) -> bool:
        """Whether this training step adds the SimCSE loss (configured, weight > 0, task and step chosen)."""
        cfg = self.simcse
        if cfg is None or cfg.weight == 0 or task not in cfg.active_tasks(self.task_specs):
            return False
        step = self.trainer.global_step if self._trainer is not None else 0
        return step % cfg.every_k_steps == 0

    def _capture_simcse_view(self, pooled: Tensor) -> None:
        """Keep the training step's pooled sentence vectors for SimCSE (only while training_step asks)."""
        if self._simcse_capturing:
            self._simcse_view = pooled

    def simcse_loss(self, batch: Mapping[str, Any], first_view: Tensor | None = None) -> Tensor:
        """The SimCSE loss of a batch's sentences, with the batch's task active and the module's pooling.

        Dropout must be on (training mode) for unsupervised SimCSE: the two views differ only by it.
        ``first_view``: the batch's sentences already pooled by this step's task forward (see
        :func:`~pal_lightning.modeling.simcse.simcse_batch_loss`); ``None`` encodes both views here.
        """
        assert self.simcse is not None, "simcse_loss needs a SimCSEConfig (--model.simcse)"
        spec = self._spec(batch)
        mode = self.hparams.pooling

        def encode(inputs: Mapping[str, Tensor]) -> Tensor:
            mask = inputs["attention_mask"]
            hidden = self.encoder(inputs["input_ids"], mask, inputs.get("token_type_ids"), task=spec.name)
            return pool(hidden, mask, mode)

        return simcse_batch_loss(encode, batch, spec, self.simcse, first_view=first_view)

    # ------------------------------------------------------------------ numerical guard

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip an optimizer step whose gradients are not all finite; stop after too many in a row.

        Runs once per accumulation window, after the callbacks' hooks (e.g. a GEM projection), with
        complete, unscaled and (under DDP) all-reduced gradients: every rank sees the same
        non-finiteness and takes the same decision, without a collective of its own. A skipped step
        sets every gradient to ``None``, so AdamW moves no weight and keeps its moments, and gradient
        clipping has nothing to clip. The check costs one device synchronisation per optimizer step.

        Raises:
            NonFiniteTrainingError: after ``max_nonfinite_steps`` consecutive skipped steps; the
                exception ends ``fit`` before any later checkpoint is saved, so the last good
                checkpoint stays the newest.
        """
        tasks, bad_loss = self._window_tasks, self._window_bad_loss
        self._window_tasks, self._window_bad_loss = [], None
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return
        # per-tensor all(isfinite): a norm could overflow to inf on large but finite gradients
        finite = bool(torch.stack([torch.isfinite(g).all().to(grads[0].device) for g in grads]).all())
        if finite:
            self.nonfinite_in_a_row = 0
            self.log("train/nonfinite_steps", float(self.nonfinite_steps), on_step=True, on_epoch=False)
            return
        for p in self.parameters():
            p.grad = None
        self.nonfinite_steps += 1
        if not self._scaler_handles_overflow():
            self.nonfinite_in_a_row += 1
        self.log("train/nonfinite_steps", float(self.nonfinite_steps), on_step=True, on_epoch=False)
        loss_bad = bad_loss is not None and bool(bad_loss)
        self.log("train/nonfinite_loss", float(loss_bad), on_step=True, on_epoch=False)
        if self.nonfinite_in_a_row >= self.hparams.max_nonfinite_steps:
            step = self.trainer.global_step if self._trainer is not None else -1
            what = "loss" if loss_bad else "gradients"
            raise NonFiniteTrainingError(
                f"Training stopped: {self.nonfinite_in_a_row} consecutive steps with non-finite "
                f"loss/gradients (last: non-finite {what}; task {', '.join(tasks) or '?'}, step {step}); "
                "those steps were skipped and the last checkpoint written before them is intact. Lower "
                "the learning rate (--model.lr, --model.head_lr), check the data of that task for extreme "
                "labels, or enable gradient clipping (--trainer.gradient_clip_val 1.0); resume with "
                "--ckpt_path last. max_nonfinite_steps sets how many such steps are tolerated."
            )

    def _scaler_handles_overflow(self) -> bool:
        """Whether an fp16 ``GradScaler`` at a loss scale >= 1 skips this step anyway (and lowers the scale).

        A genuinely non-finite loss keeps overflowing until the halved scale falls below 1; from
        then on the steps count towards ``max_nonfinite_steps``.
        """
        if self._trainer is None:
            return False
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is None or not scaler.is_enabled():
            return False
        return float(scaler.get_scale()) >= 1.0

    # ------------------------------------------------------------------ checkpoint check

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint whose tasks, encoder or adapter shape differ from this model's.

        Called by the Trainer before the weights are loaded (``fit``/``validate``/``test``/``predict``
        with ``ckpt_path``) and by ``load_from_checkpoint``. A resumed ``fit`` (the checkpoint carries
        optimizer states) also needs the same task order and freezing options.

        Raises:
            PalUserError: naming each difference and how to fix it.
        """
        saved = checkpoint.get("hyper_parameters")
        if not isinstance(saved, Mapping):
            return  # not written by this module (a user's own checkpoint): the weights decide
        differences = self.checkpoint_differences(saved, resuming=bool(checkpoint.get("optimizer_states")))
        if differences:
            raise PalUserError(
                "The checkpoint does not fit this model: "
                + "; ".join(differences)
                + ". Use the configuration the checkpoint was trained with (the config.yaml in its run "
                "folder, e.g. --config runs/<name>/version_N/config.yaml), or pick a checkpoint trained "
                "with this configuration."
            )

    def checkpoint_differences(self, saved: Mapping[str, Any], resuming: bool = False) -> list[str]:
        """What a checkpoint's ``hyper_parameters`` ``saved`` say differently from this model, as phrases."""
        out: list[str] = []
        ours = {"tasks": [task_to_hparam(s) for s in self.task_specs.values()]}
        theirs_tasks = saved.get("tasks")
        if theirs_tasks is not None:
            theirs = {_task_name(t): t for t in theirs_tasks}
            mine = {_task_name(t): t for t in ours["tasks"]}
            if set(theirs) != set(mine):
                out.append(
                    f"it was trained for tasks [{', '.join(theirs)}] but the model is configured for "
                    f"[{', '.join(mine)}]"
                )
            else:
                changed = [n for n in mine if _plain(theirs[n]) != _plain(mine[n])]
                if changed:
                    out.append(f"the task definition of {changed} differs (labels, files or columns)")
                elif resuming and list(theirs) != list(mine):
                    out.append(
                        f"it was trained with the task order [{', '.join(theirs)}], the model now has "
                        f"[{', '.join(mine)}] (resuming a fit needs the same order)"
                    )
        keys = ARCHITECTURE_HPARAMS + (OPTIMIZER_HPARAMS if resuming else ())
        for key in keys:
            if key not in saved:
                continue
            if key == "encoder" and (
                saved.get("bert_config") is not None or self.hparams.bert_config is not None
            ):
                continue  # a random encoder of bert_config's shape: the name is not used
            a, b = _plain(saved[key]), _plain(self.hparams.get(key))
            if a != b and not (key == "encoder" and _same_encoder(str(a), str(b))):
                out.append(f"{key} is {a!r} in the checkpoint but {b!r} here")
        return out

    def _eval_step(self, batch: dict[str, Any], stage: str) -> None:
        spec = self._spec(batch)
        if LABELS not in batch:  # unlabelled split (e.g. CS224N test): nothing to score
            return
        labels = batch[LABELS]
        output = self(batch)
        loss = self.compute_loss(spec.name, output, labels)
        self.metrics[stage][spec.name].update(self.predict_from_output(spec.name, output), labels)
        counts = self._eval_counts[stage]
        counts[spec.name] = counts.get(spec.name, 0) + len(labels)
        self._eval_loss[stage].setdefault(spec.name, []).append(loss.detach().float() * len(labels))

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, "test")

    def _end_eval_epoch(self, stage: str) -> None:
        """Compute, log and reset the metrics of every task that was scored on any rank.

        The example counts are summed over ranks first, so that every rank makes the
        same ``compute()`` (collective) calls in the same order.
        """
        names = list(self.task_specs)
        counts = torch.tensor([float(self._eval_counts[stage].get(n, 0)) for n in names], device=self.device)
        losses = torch.stack(
            [
                torch.stack(self._eval_loss[stage][n]).sum()
                if n in self._eval_loss[stage]
                else counts.new_zeros(())
                for n in names
            ]
        )
        totals = torch.stack([counts, losses])
        if self.trainer.world_size > 1:
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        values: dict[str, float] = {}
        scores: dict[str, dict[str, float]] = {}
        for i, name in enumerate(names):
            if totals[0, i] <= 0:
                continue
            collection = self.metrics[stage][name]
            computed = {k: float(v) for k, v in collection.compute().items()}
            collection.reset()
            values.update(computed)
            values[f"{stage}/{name}/loss"] = float(totals[1, i] / totals[0, i])
            prefix = f"{stage}/{name}/"
            scores[name] = {k[len(prefix) :]: v for k, v in computed.items()}
        overall = overall_over(scores, list(self.task_specs.values()), self.scored_tasks)
        self._eval_counts[stage] = {}
        self._eval_loss[stage] = {}
        # The values are already identical on every rank (torchmetrics merged the states, the
        # counts were reduced); sync_dist=True only averages equal numbers and keeps Lightning's
        # epoch-level logging consistent under DDP. Every rank logs the same keys.
        if values:
            self.log_dict(values, sync_dist=True)
        if overall.value is not None:
            # a partial mean gets its own name: a checkpoint monitoring <stage>/overall never
            # compares it with (or prefers it over) the score of a complete evaluation
            self.log(overall.key(stage), overall.value, prog_bar=True, sync_dist=True)
            values[overall.key(stage)] = overall.value
        self.last_scores[stage] = values

    def on_validation_epoch_start(self) -> None:
        self._reset_stage("val")

    def on_test_epoch_start(self) -> None:
        self._reset_stage("test")

    def _reset_stage(self, stage: str) -> None:
        self._eval_counts[stage] = {}
        self._eval_loss[stage] = {}
        for collection in self.metrics[stage].values():
            collection.reset()

    def on_validation_epoch_end(self) -> None:
        self._end_eval_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_eval_epoch("test")

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """``{"task", "split", "ids", "predictions"}``: class ints, or float scores on the task's scale."""
        spec = self._spec(batch)
        predictions = self.predict_from_output(spec.name, self(batch)).detach().cpu().tolist()
        return {
            "task": spec.name,
            "split": batch.get("split"),
            "ids": list(batch["ids"]),
            "predictions": predictions,
        }

    # ------------------------------------------------------------------ optimisation

    def parameter_groups(self) -> list[dict[str, Any]]:
        """AdamW parameter groups of the trainable parameters, each with its peak learning rate.

        By default {pretrained, new} x {decay, no decay}: pretrained encoder weights use ``lr``, new
        parameters (adapters, heads) ``head_lr``. ``adapter_lr`` gives the adapters their own groups and
        ``layer_lr_decay < 1`` one group per encoder layer
        (:func:`pal_lightning.modeling.param_groups.build_parameter_groups`). Biases and LayerNorm
        weights get no weight decay (decaying a LayerNorm gain towards 0 shrinks the activations, and
        biases do not scale with the input).
        """
        hp = self.hparams
        adapter_lr = hp.get("adapter_lr")
        rates = GroupRates(
            lr=hp.lr,
            adapter_lr=hp.head_lr if adapter_lr is None else adapter_lr,
            head_lr=hp.head_lr,
            weight_decay=hp.weight_decay,
            layer_lr_decay=hp.get("layer_lr_decay", 1.0),
            num_layers=self.encoder.num_layers,
        )
        return build_parameter_groups(
            self.named_parameters(),
            pretrained={id(p) for _, p in self.encoder.pretrained_parameters()},
            adapters={id(p) for _, p in self.encoder.new_parameters()},
            no_decay={id(p) for m in self.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters(False)},
            rates=rates,
            split_adapters=adapter_lr is not None,
        )

    def total_training_steps(self) -> int:
        """Optimizer steps of the whole run: ``max_steps`` if set, else from the DataModule.

        ``ceil(steps_per_epoch / accumulate_grad_batches) * max_epochs`` (Lightning steps the
        optimizer on the last batch of an epoch even when the accumulation window is not full).
        ``trainer.estimated_stepping_batches`` is deliberately not used: it loads the train
        dataloader inside ``configure_optimizers`` and breaks mid-epoch resume (Lightning #20550).

        Raises:
            PalUserError: when neither ``max_steps`` nor a DataModule with ``steps_per_epoch`` and
                ``max_epochs`` is available.
        """
        trainer = self.trainer
        if trainer.max_steps is not None and trainer.max_steps > 0:
            return int(trainer.max_steps)
        datamodule = getattr(trainer, "datamodule", None)
        steps = getattr(datamodule, "steps_per_epoch", None) if datamodule is not None else None
        max_epochs = trainer.max_epochs
        if steps is None or max_epochs is None or max_epochs < 1:
            raise PalUserError(
                "Cannot size the learning-rate schedule: set trainer.max_steps, or train with a DataModule "
                "that has `steps_per_epoch` and set trainer.max_epochs."
            )
        accumulate = max(1, int(trainer.accumulate_grad_batches))
        return max(1, math.ceil(int(steps) / accumulate) * int(max_epochs))

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over :meth:`parameter_groups` with a per-step :func:`linear_warmup_decay` schedule."""
        groups = self.parameter_groups()
        if not groups:
            raise PalUserError(
                "No trainable parameters: freeze_encoder with adapter='none' and frozen heads?"
            )
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        total = self.total_training_steps()
        warmup = self.hparams.warmup_steps
        if warmup is None:
            warmup = int(round(self.hparams.warmup_ratio * total))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, partial(linear_warmup_decay, warmup=warmup, total=total)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }


def _task_name(task: Any) -> str:
    return str(task.get("name")) if isinstance(task, Mapping) else str(task)


def _plain(value: Any) -> Any:
    """Tuples as lists and mappings as dicts, so saved and configured values compare equal."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same_encoder(a: str, b: str) -> bool:
    """Whether two encoder names resolve to the same local folder (e.g. a hub id and its cached copy)."""
    try:
        return resolve_encoder(a) == resolve_encoder(b)
    except PalUserError:
        return False
