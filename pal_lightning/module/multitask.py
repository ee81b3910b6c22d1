"""The multi-task LightningModule: one PAL-augmented encoder, one head per task.

Every batch holds one task (see :mod:`pal_lightning.core.batch`); the module reads
``batch["task"]``, runs the encoder with that task's adapter, pools, applies
the task's head and its loss. A mixed training batch (``data.batch_mixing: mixed``) holds rows of
several tasks and trains on the mean of its rows' losses (:class:`MixedStepMixin`). Validation and test keep one torchmetrics
collection per task and stage and log ``val/<task>/<metric>`` and
``val/overall`` (``test/...`` likewise) at the end of the epoch; an evaluation that reached only
some of the :attr:`~MultiTaskModule.scored_tasks` logs ``val/overall_partial`` instead.

Subclassing: override any of

* :meth:`MultiTaskModule.build_heads` -> ``nn.ModuleDict`` of heads keyed by task,
* :meth:`MultiTaskModule.encode` -> pooled vectors ``(u, v)`` (``v`` only for siamese pairs),
* :meth:`MultiTaskModule.forward` -> the head's output,
* :meth:`MultiTaskModule.compute_loss` -> the loss of one batch,

e.g. to try another head or loss without touching the library.

The training concerns live in :mod:`pal_lightning.module`, one unit each, mixed in here: the optimizer
and its schedule (:mod:`~pal_lightning.module.optim`), the numerical guard
(:mod:`~pal_lightning.module.nonfinite_guard`), the checkpoint check
(:mod:`~pal_lightning.module.checkpoint_check`), evaluation (:mod:`~pal_lightning.module.evaluation`)
and SimCSE (:mod:`~pal_lightning.module.simcse_step`).

Two safety nets:

* a numerical guard: an optimizer step whose gradients are not all finite is skipped (no weight
  moves) and counted; ``max_nonfinite_steps`` such steps in a row stop the run with a
  :class:`NonFiniteTrainingError` naming the tasks and the step;
* a checkpoint check: loading a checkpoint trained for other tasks, another encoder or another
  adapter shape stops with a message saying what differs (:meth:`MultiTaskModule.on_load_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
from torch import Tensor, nn

from pal_lightning.core.batch import (
    IDS,
    LABELS,
    PREDICTIONS,
    PROBABILITIES,
    SPLIT,
    TASK,
    TASKS,
)
from pal_lightning.core.contracts import datamodule_of
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
from pal_lightning.modeling.encoder import MultiTaskBert
from pal_lightning.modeling.heads import POOLING_MODES, check_loss, predict, task_loss
from pal_lightning.modeling.methods import AdapterConfig, AdapterSpec
from pal_lightning.modeling.pair_heads import build_task_heads
from pal_lightning.modeling.simcse import SimCSEConfig, as_simcse_config
from pal_lightning.module.checkpoint_check import CheckpointCompatMixin
from pal_lightning.module.compile import (
    EncoderCall,
    check_compile_options,
    compile_backend,
    warn_cuda_graphs_without_buckets,
)
from pal_lightning.module.encoding import PairEncodingMixin, TaskRows
from pal_lightning.module.evaluation import EvaluationMixin
from pal_lightning.module.inference import InferenceMixin, probabilities_from_output
from pal_lightning.module.init_weights import load_initial_weights
from pal_lightning.module.nonfinite_guard import NonFiniteGuardMixin, check_max_nonfinite_steps
from pal_lightning.module.optim import (
    OptimizerMixin,
    check_rates,
    check_schedule_options,
)
from pal_lightning.module.pretrained import PretrainedMixin
from pal_lightning.module.simcse_step import SimCSEStepMixin
from pal_lightning.tasks.auxiliary import check_auxiliary
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks, task_to_hparam
from pal_lightning.tasks.views import eval_views

__all__ = ["TASK_LOSSES", "MultiTaskModule", "check_mixed_training", "check_model_options", "is_mixed_batch"]


def check_model_options(
    specs: Mapping[str, TaskSpec],
    simcse: SimCSEConfig | None,
    pooling: str,
    freeze_encoder: bool,
    layer_sharing: str | None,
    max_nonfinite_steps: int,
) -> None:
    """Refuse model options that cannot work together, at construction rather than at the first batch.

    Raises:
        PalUserError: naming the option and the fix.
    """
    if pooling not in POOLING_MODES:
        raise PalUserError(f"Unknown pooling {pooling!r}: choose one of {POOLING_MODES}.")
    if simcse is not None:
        simcse.check(specs)
    if freeze_encoder and isinstance(layer_sharing, str) and "I" in layer_sharing.upper():
        raise PalUserError(
            f"layer_sharing {layer_sharing!r} has individual (I) layers, which freeze_encoder would freeze: "
            "set freeze_encoder: false (mark the layers to keep fixed with F), or use F/S letters only."
        )
    check_max_nonfinite_steps(max_nonfinite_steps)
    for spec in specs.values():
        check_loss(spec)


if TYPE_CHECKING:
    _MixinBase = pl.LightningModule
else:
    _MixinBase = object

#: The key of the present tasks' detached losses in what a mixed training step returns (``{"loss", TASK_LOSSES}``).
TASK_LOSSES = "task_losses"


def is_mixed_batch(batch: Any) -> bool:
    """Whether ``batch`` holds rows of several tasks (a ``tasks`` key) rather than one task's."""
    return isinstance(batch, Mapping) and TASKS in batch


def check_mixed_training(batch_mixing: str, simcse: object | None, callbacks: Iterable[object]) -> None:
    """Refuse what cannot train on mixed batches: GEM / A-GEM callbacks and SimCSE.

    Raises:
        PalUserError: naming the feature and the fix.
    """
    if batch_mixing != "mixed":
        return
    from pal_lightning.gem.callback import GEMCallback

    if any(isinstance(cb, GEMCallback) for cb in callbacks):
        raise PalUserError(
            "GEM and A-GEM project each step's gradient against the memories of the tasks that step does not "
            "train; a mixed batch trains every task it holds, usually all of them, so nothing is left to project "
            "against. Drop the GEM callback (configs/gem.yaml), or use --data.batch_mixing per_task."
        )
    if simcse is not None:
        raise PalUserError(
            "SimCSE's auxiliary loss is computed on a one-task batch's sentence vectors; a mixed batch runs "
            "several tasks in one pass. Drop --model.simcse, or use --data.batch_mixing per_task."
        )


class MixedStepMixin(_MixinBase):
    """The training step of a mixed batch (``--data.batch_mixing mixed``): rows of several tasks in one step.

    The batch comes from :class:`~pal_lightning.data.sampling.mixed.MixedTaskBatchSampler` (every row's
    task drawn from the schedule's ``p_t``) and runs through one encoder pass with per-example task routing
    (:meth:`forward_mixed`). The step's loss is the mean of the rows' losses, ``sum_t (n_t / B) L_t`` with
    ``L_t`` the mean loss of task ``t``'s ``n_t`` rows: its expected gradient is the per-task schedule's
    ``sum_t p_t grad L_t`` (the argument is in ``docs/design.md`` §3, "Mixed
    batches"). Each present task's ``L_t`` is logged as ``train/<task>/loss``, the total as ``train/loss``.

    Two training features need one task per batch, so a fit with mixed batches refuses them at setup
    (:func:`check_mixed_training`): GEM and A-GEM project the step's gradient against the memories of the
    tasks *not* being trained, and a mixed batch usually holds every task (nothing would be left to
    protect); SimCSE's auxiliary loss reads the pooled vectors of a one-task forward.
    """

    if TYPE_CHECKING:  # provided by the module
        simcse: Any

        def forward_mixed(self, batch: Mapping[str, Any]) -> dict[str, TaskRows]: ...

        def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor: ...

        def _note_training_loss(self, task: str, loss: Tensor) -> None: ...

    def _check_mixed_training(self) -> None:
        """At ``setup("fit")``: refuse GEM and SimCSE when the data module serves mixed batches."""
        trainer = self._trainer
        if trainer is None:
            return
        config = getattr(datamodule_of(trainer), "config", None)
        mixing = str(getattr(config, "batch_mixing", "per_task"))
        check_mixed_training(mixing, self.simcse, getattr(trainer, "callbacks", []))

    def _mixed_training_step(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The loss of a mixed batch, the mean over its rows; logs each present task's loss and the total."""
        if LABELS not in batch:
            raise PalUserError(
                "A mixed batch without labels cannot be trained on: add 'labels' (one per row)."
            )
        if self.simcse is not None:
            check_mixed_training("mixed", self.simcse, ())
        labels = batch[LABELS]
        rows = len(batch[TASKS])
        total: Tensor | None = None
        losses: dict[str, Tensor] = {}
        for task, out in self.forward_mixed(batch).items():
            loss = self.compute_loss(task, out.output, labels.to(out.rows.device)[out.rows])
            count = int(out.rows.numel())
            # logger=False, as for a one-task batch: TrainingLog writes each present task's loss once
            self.log(f"train/{task}/loss", loss, batch_size=count, logger=False)
            self._note_training_loss(task, loss)
            losses[task] = loss.detach()
            part = loss * (count / rows)
            total = part if total is None else total + part
        assert total is not None  # a batch has at least one row
        self.log("train/loss", total, prog_bar=True, batch_size=rows)
        # Always the loss, even a NaN one (the guard decides): see MultiTaskModule.training_step
        return {"loss": total, TASK_LOSSES: losses}


class MultiTaskModule(
    MixedStepMixin,
    PairEncodingMixin,
    PretrainedMixin,
    InferenceMixin,
    SimCSEStepMixin,
    NonFiniteGuardMixin,
    CheckpointCompatMixin,
    EvaluationMixin,
    OptimizerMixin,
    pl.LightningModule,
):
    """Multi-task fine-tuning of a BERT encoder with task-specific adapters (PALs) and heads.

    Args:
        tasks: task names (``sst``, ``qqp``, ``sts``, ...) or :class:`~pal_lightning.tasks.specs.TaskSpec` objects.
        encoder: hub id or local directory of a BERT-family encoder (resolved offline by
            :func:`pal_lightning.core.hub.resolve_encoder`); ignored when ``bert_config`` is given.
        adapter: the per-task modules: ``method`` (``pals``, ``lora``, ... ``none``: only the heads are
            task-specific; ``pal-lightning fit --help`` lists them with their options) and that method's
            options (:class:`~pal_lightning.modeling.methods.config.AdapterConfig` and the method's
            subclass of it): ``size``, ``num_heads``, ``placement``, ``num_layers``, ``init``,
            ``activation``, and e.g. ``alpha`` for ``lora``; an option the method lacks is refused. On the
            command line: ``--model.adapter.method lora --model.adapter.size 16``; ``null``: PALs. From
            Python also a method name or a config.
        layer_sharing: layer-sharing regime, one letter per encoder layer, bottom first: ``F`` frozen,
            ``S`` shared, ``I`` individual (a copy per task starting from the pretrained layer), e.g.
            ``FFSSII``; ``None``: all shared (:mod:`pal_lightning.modeling.sharing`).
        task_groups: groups of related tasks that share their copies of the ``I`` layers, e.g.
            ``[[sst, qqp]]``; a task in no group has its own copies.
        pooling: sentence vector: ``mean`` over non-padding tokens (what all-MiniLM-L6-v2 was trained
            with) or ``cls``.
        pair_encoding: ``cross`` (both sentences in one sequence) or ``siamese`` (each alone), or a
            per-task mapping with an optional ``default``; must match the data module's setting.
        heads: per-task head other than the default of the task's kind and pair encoding, e.g.
            ``{sts: cosine_rescaled, qqp: concat}``: ``cosine_rescaled``, ``concat`` (``[u, v]``) or ``sum``
            (``u + v``), all on siamese pairs (:mod:`pal_lightning.modeling.pair_heads`); ``None``: defaults.
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
        compile: call the encoder through ``torch.compile`` (:mod:`pal_lightning.module.compile`):
            ``true`` with torch's default backend (inductor: fastest on GPUs, needs a C compiler), a
            backend name such as ``aot_eager`` or ``cudagraphs``, ``false`` (default) eagerly. Where
            compiling fails, one warning and the eager encoder. Checkpoints are the same either way.
        compile_mode: ``torch.compile``'s ``mode`` with ``compile`` on inductor: ``reduce-overhead``
            records CUDA graphs on a GPU (pad batches to a few lengths with ``data.pad_to_multiple_of``),
            ``max-autotune`` searches kernels longer; ``null`` (default) is torch's default mode.
    """

    def __init__(
        self,
        tasks: Sequence[str | TaskSpec] = ("sst", "qqp", "sts"),
        encoder: str = DEFAULT_ENCODER,
        adapter: AdapterSpec = None,
        layer_sharing: str | None = None,
        task_groups: list[list[str]] | None = None,
        pooling: str = "mean",
        pair_encoding: str | dict[str, str] = "cross",
        heads: dict[str, str] | None = None,
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
        compile: bool | str = False,
        compile_mode: str | None = None,
    ) -> None:
        super().__init__()
        self.task_specs: dict[str, TaskSpec] = {s.name: s for s in resolve_tasks(tasks)}
        #: Evaluation views by name: more dev/test sets scored by a task's head (pal_lightning.tasks.views)
        self.eval_views = eval_views(self.task_specs.values())
        self.save_hyperparameters(ignore=["tasks", "adapter"])
        self.adapter_config = AdapterConfig.coerce(adapter)
        self.simcse = as_simcse_config(simcse)
        # tasks and SimCSE are saved as names / plain dicts, not TaskSpec or SimCSEConfig objects, so
        # that checkpoints stay loadable with torch.load(weights_only=True)
        self.save_hyperparameters(
            {
                "tasks": [task_to_hparam(s) for s in self.task_specs.values()],
                "adapter": self.adapter_config.to_dict(),
                "simcse": None if self.simcse is None else asdict(self.simcse),
                "auxiliary": check_auxiliary(auxiliary, list(self.task_specs)),
            }
        )
        check_compile_options(compile, compile_mode)
        check_schedule_options(warmup_ratio, warmup_steps, layer_lr_decay)
        check_rates(lr=lr, head_lr=head_lr, adapter_lr=adapter_lr, weight_decay=weight_decay, dropout=dropout)
        check_model_options(
            self.task_specs, self.simcse, pooling, freeze_encoder, layer_sharing, max_nonfinite_steps
        )

        self.encoder = self.build_encoder()
        self.heads = self.build_heads()
        self._encoder_call = EncoderCall(self.encoder, compile_backend(compile), mode=compile_mode)
        missing = sorted(set(self.task_specs) - set(self.heads.keys()))
        if missing:
            raise PalUserError(f"build_heads() returned no head for task(s) {missing}.")
        self._init_simcse()
        self._init_evaluation()
        self._init_guard()
        self._apply_freezing()

    # ------------------------------------------------------------------ building

    def build_encoder(self) -> MultiTaskBert:
        """The shared encoder: ``MultiTaskBert`` loaded from ``encoder``, or random from ``bert_config``."""

        hp = self.hparams
        specs = list(self.task_specs.values())
        if hp["bert_config"] is not None:
            return MultiTaskBert.from_config(
                dict(hp["bert_config"]),
                specs,
                self.adapter_config,
                attn_implementation=hp["attn_implementation"],
                layer_sharing=hp.get("layer_sharing"),
                task_groups=hp.get("task_groups"),
            )
        return MultiTaskBert.from_pretrained(
            resolve_encoder(hp["encoder"], hp.get("encoder_revision")),
            specs,
            self.adapter_config,
            attn_implementation=hp["attn_implementation"],
            layer_sharing=hp.get("layer_sharing"),
            task_groups=hp.get("task_groups"),
        )

    def build_heads(self) -> nn.ModuleDict:
        """One head per task, keyed by task name: the default of its kind, or the one ``heads`` names
        (:func:`pal_lightning.modeling.pair_heads.build_task_heads`)."""
        hp = self.hparams
        specs = list(self.task_specs.values())
        return nn.ModuleDict(
            build_task_heads(
                specs, self.encoder.hidden_size, hp["pair_encoding"], hp["dropout"], hp.get("heads")
            )
        )

    def _apply_freezing(self) -> None:
        if self.hparams["freeze_encoder"]:
            for _, p in self.encoder.pretrained_parameters():
                p.requires_grad_(False)
        elif self.hparams["freeze_embeddings"]:
            for p in self.encoder.embeddings.parameters():
                p.requires_grad_(False)

    def parameter_report(self) -> Any:
        """Shared, per-task and total parameter counts (:func:`pal_lightning.modeling.parameter_report`)."""
        from pal_lightning.modeling import parameter_report

        return parameter_report(self)

    def setup(self, stage: str) -> None:
        """Copy ``init_from``'s weights in before ``fit`` (a resumed fit then restores its own over them);
        name the classes as the data module read them (:meth:`adopt_label_names`); refuse what cannot train
        on mixed batches when the data module serves them (:class:`MixedStepMixin`); warn where CUDA graphs
        (``compile_mode``) would meet batches of every length."""
        if stage == "fit":
            self._check_mixed_training()
        warn_cuda_graphs_without_buckets(self._trainer, self._encoder_call)
        if stage == "fit" and self.hparams.get("init_from"):
            load_initial_weights(self, self.hparams["init_from"])
        self.adopt_label_names()

    # ------------------------------------------------------------------ model

    def _spec(self, batch: Mapping[str, Any]) -> TaskSpec:
        return self.spec_of(batch[TASK])

    def spec_of(self, task: str) -> TaskSpec:
        """The spec of a task, or of an evaluation view (scored by its task's head), by name."""
        if task in self.eval_views:
            return self.eval_views[task].spec
        try:
            return self.task_specs[task]
        except KeyError:
            raise PalUserError(
                f"Batch of task {task!r}, but the model was built for {sorted(self.task_specs)}. "
                "Use the same task list for the model and the data."
            ) from None

    def forward(self, batch: Mapping[str, Any]) -> Tensor:
        """The head output of one batch: logits ``[B, C]`` (``[B, 1]`` for bce), or scores ``[B]`` in 0..1."""
        spec = self._spec(batch)
        if spec.name in self.eval_views:  # a view's batch goes through its task's adapters and head
            batch = {**batch, TASK: self.eval_views[spec.name].parent}
        u, v = self.encode(batch)
        task = batch[TASK]
        return self.heads[task](u, v) if self._is_siamese(task) else self.heads[task](u)

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        """The loss of one batch of ``task`` (:func:`pal_lightning.modeling.heads.task_loss`)."""
        return task_loss(self.spec_of(task), output, labels)

    def predict_from_output(self, task: str, output: Tensor) -> Tensor:
        """Class indices, or scores on the task's scale (:func:`pal_lightning.modeling.heads.predict`)."""
        return predict(self.spec_of(task), output)

    def batch_loss(self, batch: Mapping[str, Any]) -> Tensor:
        """Forward and loss of a labelled batch (also what GEM-style callbacks call on memory batches)."""
        spec = self._spec(batch)
        if LABELS not in batch:
            raise PalUserError(f"A {spec.name!r} batch without labels cannot be trained on.")
        return self.compute_loss(spec.name, self(batch), batch[LABELS])

    # ------------------------------------------------------------------ steps

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | dict[str, Any]:
        """The loss of one task's batch; a mixed batch (rows of several tasks, ``data.batch_mixing: mixed``)
        returns ``{"loss", "task_losses"}`` (:class:`MixedStepMixin`)."""
        if is_mixed_batch(batch):
            return self._mixed_training_step(batch)
        task = self._spec(batch).name
        use_simcse = self.simcse_active(task)
        with self._simcse_view_capture(use_simcse):
            loss = self.batch_loss(batch)
        size = len(batch[IDS])
        # logger=False: Lightning would repeat every task's last loss on every metrics.csv row;
        # TrainingLog writes the trained task's loss alone
        self.log(f"train/{task}/loss", loss, batch_size=size, logger=False)
        if use_simcse:
            # part of this step's gradient only: GEM's memories call batch_loss, without it
            loss = loss + self._simcse_term(batch, size)
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        # Always return the loss, even a NaN one: returning None would skip backward on this rank
        # only and hang DDP's gradient all-reduce. The guard in on_before_optimizer_step decides.
        self._note_training_loss(task, loss)
        return loss

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """``{"task", "split", "ids", "predictions"}``: class ints, or float scores on the task's scale; a
        classification task's class probabilities ``[B, C]`` too (``"probabilities"``)."""
        spec = self._spec(batch)
        output = self(batch)
        predictions = self.predict_from_output(spec.name, output).detach().cpu().tolist()
        out = {TASK: spec.name, SPLIT: batch.get(SPLIT), IDS: list(batch[IDS]), PREDICTIONS: predictions}
        if not spec.is_regression:
            out[PROBABILITIES] = probabilities_from_output(spec, output.detach()).cpu().tolist()
        return out
