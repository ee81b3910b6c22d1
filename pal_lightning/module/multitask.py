"""The multi-task LightningModule: one PAL-augmented encoder, one head per task.

A batch holds one task (:mod:`pal_lightning.core.batch`), or rows of several (:mod:`~pal_lightning.module.mixed`).
Override :meth:`~MultiTaskModule.build_heads`, :meth:`~MultiTaskModule.encode`, :meth:`~MultiTaskModule.forward`
or :meth:`~MultiTaskModule.compute_loss` to try another head or loss. The training concerns are parts in
:mod:`pal_lightning.module`, plain objects and functions that take what they need: ``optim``, ``nonfinite_guard``,
``checkpoint_check``, ``evaluation``, ``simcse_step``, ``encoding``, ``inference``, ``pretrained``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar, overload

import torch
from torch import Tensor, nn

from pal_lightning.core.batch import IDS, LABELS, PREDICTIONS, PROBABILITIES, SPLIT, TASK
from pal_lightning.core.contracts import datamodule_of
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
from pal_lightning.core.private_api import attached_trainer
from pal_lightning.core.strategies import prepare_strategy
from pal_lightning.core.version import __version__
from pal_lightning.modeling.encoder import MultiTaskEncoder
from pal_lightning.modeling.heads import predict, task_loss
from pal_lightning.modeling.methods import AdapterConfig, AdapterSpec
from pal_lightning.modeling.pair_heads import build_task_heads
from pal_lightning.modeling.simcse import SimCSEConfig, as_simcse_config
from pal_lightning.module import compile as compiling
from pal_lightning.module import encoding, evaluation, inference, mixed, optim, pretrained, simcse_step
from pal_lightning.module.checkpoint_check import (
    VERSION_KEY,
    check_checkpoint,
    checkpoint_differences,
    load_initial_weights,
)
from pal_lightning.module.checks import check_model_options
from pal_lightning.module.mixed import TASK_LOSSES, check_mixed_training, is_mixed_batch
from pal_lightning.module.nonfinite_guard import NonFiniteGuard
from pal_lightning.module.optim_config import DEFAULT_OPTIM, OptimConfig, loading_saved_hparams, optim_of
from pal_lightning.tasks.specs import TaskSpec, check_auxiliary, eval_views, resolve_tasks, task_to_hparam

__all__ = ["TASK_LOSSES", "MultiTaskModule", "check_mixed_training", "check_model_options", "is_mixed_batch"]

M = TypeVar("M", bound="MultiTaskModule")


class MultiTaskModule(optim.FusedClippingMixin):
    """Multi-task fine-tuning of one pretrained encoder with a per-task method (PALs, LoRA, ...) and heads.

    Args:
        tasks: task names (``sst``, ``qqp``, ``sts``, ...) or :class:`~pal_lightning.tasks.specs.TaskSpec` objects.
        encoder: hub id or local folder of an encoder of a registered family; unused with ``encoder_config``.
        adapter: the per-task method (``method``: ``pal-lightning fit --help`` lists them; ``none``: heads only)
            and its fields (:class:`~pal_lightning.modeling.methods.config.AdapterConfig`); ``null``: PALs.
        layer_sharing: a letter per encoder layer, bottom first: ``F`` frozen, ``S`` shared, ``I`` one per task.
        task_groups: groups of tasks that share their copies of the ``I`` layers, e.g. ``[[sst, qqp]]``.
        pooling: the sentence vector: ``mean`` over non-padding tokens, or ``cls``.
        pair_encoding: ``cross`` (one sequence) or ``siamese`` (each sentence alone), or per task; as the data's.
        heads: per-task head other than the default, e.g. ``{sts: cosine_rescaled}`` (``modeling.pair_heads``).
        dropout: dropout before each head's linear layer.
        optim: learning rates, weight decay, warmup and freezing (``--model.optim.lr``): an
            :class:`~pal_lightning.module.optim_config.OptimConfig`, or a mapping of its options.
        attn_implementation: transformers attention kernel (``sdpa``, ``eager``); ``None`` = library default.
        encoder_config: a ``transformers`` config's keyword arguments: a random encoder of that shape.
        max_nonfinite_steps: skipped non-finite steps in a row before a ``NonFiniteTrainingError``.
        simcse: SimCSE as an auxiliary loss (:class:`~pal_lightning.modeling.simcse.SimCSEConfig`); ``None`` = off.
        auxiliary: tasks trained but left out of ``val/overall`` and ``test/overall``.
        init_from: a checkpoint of this module whose weights ``fit`` starts from (not a resume).
        encoder_revision: hub branch, tag or commit of ``encoder``; ``None``: the packaged or cached copy.
        compile: ``torch.compile`` the encoder: ``true`` (inductor), a backend name, or ``false`` (eager).
        compile_mode: ``torch.compile``'s ``mode`` with inductor, e.g. ``reduce-overhead``; ``null``: default.
        moved: none taken: an option that moved into a group (``lr``: ``optim.lr``) fails, naming its new place.
    """

    #: Longest tokenised sequence at prediction time (the data module's ``max_length`` when known).
    predict_max_length: int = inference.DEFAULT_MAX_LENGTH

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
        optim: OptimConfig = DEFAULT_OPTIM,
        attn_implementation: str | None = None,
        encoder_config: dict[str, Any] | None = None,
        max_nonfinite_steps: int = 10,
        simcse: SimCSEConfig | None = None,
        auxiliary: Sequence[str] | None = None,
        init_from: str | None = None,
        encoder_revision: str | None = None,
        compile: bool | str = False,
        compile_mode: str | None = None,
        **moved: Any,
    ) -> None:
        super().__init__()
        self.optim_config = optim_of(optim, moved, type(self).__qualname__)
        self.task_specs: dict[str, TaskSpec] = {s.name: s for s in resolve_tasks(tasks)}
        #: Evaluation views by name: more dev/test sets scored by a task's head (pal_lightning.tasks.specs)
        self.eval_views = eval_views(self.task_specs.values())
        self.save_hyperparameters(ignore=["tasks", "adapter", "optim", *moved])
        self.adapter_config = AdapterConfig.coerce(adapter)
        self.simcse = as_simcse_config(simcse)
        # tasks and SimCSE are saved as names / plain dicts, not TaskSpec or SimCSEConfig objects, so
        # that checkpoints stay loadable with torch.load(weights_only=True)
        self.save_hyperparameters(
            {
                "tasks": [task_to_hparam(s) for s in self.task_specs.values()],
                "adapter": self.adapter_config.to_dict(),
                "optim": asdict(self.optim_config),
                "simcse": None if self.simcse is None else asdict(self.simcse),
                "auxiliary": check_auxiliary(auxiliary, list(self.task_specs)),
            }
        )
        check_model_options(self.hparams, self.task_specs, self.simcse, self.optim_config)
        self.encoder = self.build_encoder()
        self.heads = self.build_heads()
        self._encoder_call = compiling.EncoderCall(
            self.encoder, compiling.compile_backend(compile), mode=compile_mode
        )
        missing = sorted(set(self.task_specs) - set(self.heads.keys()))
        if missing:
            raise PalUserError(f"build_heads() returned no head for task(s) {missing}.")
        if self.simcse is not None:
            simcse_step.check_simcse(self.simcse, self.task_specs, self.encoder, self._is_siamese)
        self._simcse_view = simcse_step.ViewCapture()
        self.scorers = nn.ModuleDict(
            {s: evaluation.TaskScorer(self.evaluated_specs()) for s in evaluation.STAGES}
        )
        self.last_scores: dict[str, dict[str, float]] = {}  # {stage: {stage/task/metric: value}}
        self.guard = NonFiniteGuard(max_nonfinite_steps)
        self._label_names: dict[str, list[str]] = {}  # given, or found in the data
        if self.optim_config.freeze_encoder:
            for _, p in self.encoder.pretrained_parameters():
                p.requires_grad_(False)
        elif self.optim_config.freeze_embeddings:
            for p in self.encoder.embeddings.parameters():
                p.requires_grad_(False)

    def build_encoder(self) -> MultiTaskEncoder:
        """The shared encoder: ``MultiTaskEncoder`` loaded from ``encoder``, or random from ``encoder_config``."""
        hp = self.hparams
        options = dict(
            attn_implementation=hp["attn_implementation"],
            layer_sharing=hp.get("layer_sharing"),
            task_groups=hp.get("task_groups"),
        )
        specs = list(self.task_specs.values())
        if hp["encoder_config"] is not None:
            return MultiTaskEncoder.from_config(
                dict(hp["encoder_config"]), specs, self.adapter_config, **options
            )
        path = resolve_encoder(hp["encoder"], hp.get("encoder_revision"))
        return MultiTaskEncoder.from_pretrained(path, specs, self.adapter_config, **options)

    def build_heads(self) -> nn.ModuleDict:
        """One head per task, keyed by task name (:func:`pal_lightning.modeling.pair_heads.build_task_heads`)."""
        hp = self.hparams
        specs = list(self.task_specs.values())
        return nn.ModuleDict(
            build_task_heads(
                specs, self.encoder.hidden_size, hp["pair_encoding"], hp["dropout"], hp.get("heads")
            )
        )

    def parameter_report(self) -> Any:
        """Shared, per-task and total parameter counts (:func:`pal_lightning.modeling.parameter_report`)."""
        from pal_lightning.modeling import parameter_report

        return parameter_report(self)

    def setup(self, stage: str) -> None:
        """Refuse a strategy or what cannot train on mixed batches, let plain DDP find unused parameters, warn
        about CUDA graphs over unbucketed lengths, load ``init_from`` before ``fit``, adopt the class names."""
        if (trainer := attached_trainer(self)) is not None:
            prepare_strategy(trainer.strategy)  # before the strategy wraps the model
        if stage == "fit" and trainer is not None:
            mixing = str(getattr(getattr(datamodule_of(trainer), "config", None), "batch_mixing", "per_task"))
            check_mixed_training(mixing, self.simcse, getattr(trainer, "callbacks", []))
        compiling.warn_cuda_graphs_without_buckets(trainer, self._encoder_call)
        if stage == "fit" and self.hparams.get("init_from"):
            load_initial_weights(self, self.hparams["init_from"])
        self.adopt_label_names()

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

    def _is_siamese(self, task: str) -> bool:
        return bool(getattr(self.heads[task], "siamese", False))

    @overload
    def encode(self, sentences: Mapping[str, Any]) -> tuple[Tensor, Tensor | None]: ...

    @overload
    def encode(self, sentences: str | Sequence[str], task: str | None = None, **options: Any) -> Any: ...

    def encode(
        self, sentences: Mapping[str, Any] | str | Sequence[str], task: str | None = None, **options: Any
    ) -> Any:
        """The pooled vectors ``(u, None)`` of a batch (``(u, v)`` for a siamese pair), which :meth:`forward`
        calls; or embeddings of plain sentences, as sentence-transformers' ``encode``
        (:func:`~pal_lightning.module.encoding.encode_sentences`: ``task``, ``batch_size``,
        ``normalize_embeddings``, ``convert_to_numpy``, ``convert_to_tensor``)."""
        if isinstance(sentences, Mapping):
            return (
                self._encode_siamese(sentences)
                if self._is_siamese(sentences[TASK])
                else self._encode_batch(sentences)
            )
        return encoding.encode_sentences(self, sentences, task, **options)

    def _encode_batch(self, batch: Mapping[str, Any]) -> tuple[Tensor, None]:
        pooled = encoding.encode_task_batch(self._encoder_call, batch, self.hparams["pooling"], False)
        if not self.task_specs[batch[TASK]].is_pair:  # a cross pair's vector is not a sentence's
            self._simcse_view.offer(pooled)
        return pooled, None

    def _encode_siamese(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        pooled = encoding.encode_task_batch(self._encoder_call, batch, self.hparams["pooling"], True)
        self._simcse_view.offer(pooled)  # [a; b]: the sentence order SimCSE uses
        u, v = pooled.chunk(2)
        return u, v

    def forward(self, batch: Mapping[str, Any]) -> Tensor:
        """The head output of one batch: logits ``[B, C]`` (``[B, 1]`` for bce), or scores ``[B]`` in 0..1."""
        spec = self.spec_of(batch[TASK])
        if spec.name in self.eval_views:  # a view's batch goes through its task's adapters and head
            batch = {**batch, TASK: self.eval_views[spec.name].parent}
        u, v = self.encode(batch)
        task = batch[TASK]
        return self.heads[task](u, v) if self._is_siamese(task) else self.heads[task](u)

    def forward_mixed(self, batch: Mapping[str, Any]) -> dict[str, encoding.TaskRows]:
        """Each row's head output of a mixed batch (rows of several tasks), from one eager encoder pass with
        per-row task routing: ``{task: TaskRows(rows, output)}`` in the order tasks first appear (a view's
        rows keyed by the view)."""
        return encoding.forward_mixed(
            self.encoder, self.heads, self.hparams["pooling"], batch, self._parent_task
        )

    def _parent_task(self, name: str) -> str:
        self.spec_of(name)  # an unknown name: one message naming the model's tasks
        return str(self.eval_views[name].parent) if name in self.eval_views else name

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        """The loss of one batch of ``task`` (:func:`pal_lightning.modeling.heads.task_loss`)."""
        return task_loss(self.spec_of(task), output, labels)

    def mixed_losses(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        """Per task present in a labelled mixed batch, the loss of its rows."""
        return {task: loss for task, (loss, _) in mixed.mixed_losses(self, batch).items()}

    def predict_from_output(self, task: str, output: Tensor) -> Tensor:
        """Class indices, or scores on the task's scale (:func:`pal_lightning.modeling.heads.predict`)."""
        return predict(self.spec_of(task), output)

    def batch_loss(self, batch: Mapping[str, Any]) -> Tensor:
        """Forward and loss of a labelled batch (also what GEM-style callbacks call on memory batches)."""
        spec = self.spec_of(batch[TASK])
        if LABELS not in batch:
            raise PalUserError(f"A {spec.name!r} batch without labels cannot be trained on.")
        return self.compute_loss(spec.name, self(batch), batch[LABELS])

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | dict[str, Any]:
        """The loss of one task's batch; a mixed batch returns ``{"loss", "task_losses"}``
        (:func:`~pal_lightning.module.mixed.mixed_training_step`)."""
        if is_mixed_batch(batch):
            return self._mixed_training_step(batch)
        task = self.spec_of(batch[TASK]).name
        use_simcse = self.simcse_active(task)
        with self._simcse_view.capture(use_simcse):
            loss = self.batch_loss(batch)
        size = len(batch[IDS])
        # logger=False: Lightning would repeat every task's last loss on every metrics.csv row;
        # TrainingLog writes the trained task's loss alone
        self.log(f"train/{task}/loss", loss, batch_size=size, logger=False)
        if use_simcse:  # part of this step's gradient only: GEM's memories call batch_loss, without it
            assert self.simcse is not None
            auxiliary = self.simcse_loss(batch, first_view=self._simcse_view.take())
            self.log("train/simcse_loss", auxiliary, batch_size=size)
            loss = loss + self.simcse.weight * auxiliary
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        # Always return the loss, even a NaN one: returning None would skip backward on this rank
        # only and hang DDP's gradient all-reduce. The guard in on_before_optimizer_step decides.
        self.guard.note(task, loss)
        return loss

    def _mixed_training_step(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        return mixed.mixed_training_step(self, batch)

    def simcse_active(self, task: str) -> bool:
        """Whether this training step of ``task`` adds the SimCSE loss."""
        return simcse_step.simcse_active(self.simcse, self.task_specs, task, self.global_step)

    def simcse_loss(self, batch: Mapping[str, Any], first_view: Tensor | None = None) -> Tensor:
        """The SimCSE loss of a batch's sentences (``first_view``: already pooled by the task forward)."""
        assert self.simcse is not None, "simcse_loss needs a SimCSEConfig (--model.simcse)"
        spec = self.spec_of(batch[TASK])
        return simcse_step.simcse_loss(
            self.encoder, self.hparams["pooling"], spec, self.simcse, batch, first_view
        )

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Skip a step whose gradients are not all finite (:class:`~pal_lightning.module.nonfinite_guard.NonFiniteGuard`)."""
        self.guard.before_optimizer_step(self)

    def parameter_groups(self) -> list[dict[str, Any]]:
        """AdamW parameter groups (:func:`pal_lightning.module.optim.parameter_groups`)."""
        return optim.parameter_groups(self, self.encoder, self.optim_config)

    def parameter_group_of(self, name: str, parameter: nn.Parameter) -> optim.Placement:
        """Override to place a trainable parameter: ``None`` (default) puts it by where it sits (unknown
        parts: the heads' group, with a warning at fit start); ``"pretrained"``, ``"adapters"`` or ``"heads"``
        into that group; :class:`~pal_lightning.modeling.param_groups.OwnGroup` into a group of its own."""
        return None

    def on_fit_start(self) -> None:
        """Print the optimizer's groups and warn about parameters no part claims (``module.optim``)."""
        optim.report_parameter_groups(self, optim.unplaced_parameters(self, self.encoder))

    def total_training_steps(self) -> int:
        """Optimizer steps of the whole run."""
        return optim.total_training_steps(self.trainer)

    def configure_optimizers(self) -> Any:
        """AdamW over :meth:`parameter_groups` with a per-step linear warmup and decay."""
        return optim.configure_optimizers(
            self, self.parameter_groups(), self.total_training_steps, self.optim_config
        )

    def evaluated_specs(self) -> list[TaskSpec]:
        """The tasks and their evaluation views: what is scored."""
        return [*self.task_specs.values(), *(v.spec for v in self.eval_views.values())]

    @property
    def scored_tasks(self) -> list[str]:
        """The tasks the overall score covers: all but the auxiliary ones, each with its evaluated views."""
        auxiliary = getattr(self, "auxiliary", None)
        auxiliary = self.hparams.get("auxiliary") if auxiliary is None else auxiliary
        return evaluation.scored_tasks(self.task_specs.values(), self.eval_views, auxiliary)

    def _scorer(self, stage: str) -> evaluation.TaskScorer:
        scorer = self.scorers[stage]
        assert isinstance(scorer, evaluation.TaskScorer)
        return scorer

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.spec_of(batch[TASK])  # a task the model was not built for stops here, with a clear message
        evaluation.score_batch(self, self._scorer("val"), batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.spec_of(batch[TASK])
        evaluation.score_batch(self, self._scorer("test"), batch)

    def on_validation_epoch_start(self) -> None:
        self._scorer("val").reset()

    def on_test_epoch_start(self) -> None:
        self._scorer("test").reset()

    def on_validation_epoch_end(self) -> None:
        self._end_eval_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_eval_epoch("test")

    def _end_eval_epoch(self, stage: str) -> None:
        scores, specs = self._scorer(stage).compute(self.device), self.evaluated_specs()
        self.last_scores[stage] = evaluation.log_scores(self, stage, scores, specs, self.scored_tasks)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the library version and the class names set on this module."""
        checkpoint[VERSION_KEY] = __version__
        if self._label_names:
            checkpoint[inference.LABEL_NAMES_KEY] = {task: list(n) for task, n in self._label_names.items()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint that does not fit this model; take back its class names."""
        check_checkpoint(
            checkpoint, self.hparams, list(self.task_specs.values()), type(self), attached_trainer(self)
        )
        saved = checkpoint.get(inference.LABEL_NAMES_KEY)
        if isinstance(saved, Mapping):
            self.set_label_names({t: list(n) for t, n in saved.items() if t in self.task_specs})

    def checkpoint_differences(self, saved: Mapping[str, Any], resuming: bool = False) -> list[str]:
        """What a checkpoint's ``hyper_parameters`` ``saved`` say differently from this model, as phrases."""
        return checkpoint_differences(saved, self.hparams, list(self.task_specs.values()), resuming)

    @property
    def label_names(self) -> dict[str, list[str]]:
        """Class names per classification task: given or found in the data, else the task's, else built-in."""
        return inference.label_names_of(self.task_specs, self._label_names)

    def set_label_names(self, names: Mapping[str, Sequence[str]]) -> None:
        """Name the classes of tasks (``{"my_task": ["no", "yes"]}``); saved by ``save_pretrained``."""
        self._label_names = {**self._label_names, **inference.checked_label_names(self.task_specs, names)}

    def adopt_label_names(self, datamodule: Any = None) -> None:
        """Name the classes as the data module (default: the trainer's) read them, keeping given names."""
        if datamodule is None:
            datamodule = getattr(attached_trainer(self), "datamodule", None)
        found = getattr(datamodule, "label_names", None)
        if callable(found):
            names = {t: n for t, n in found().items() if t in self.task_specs and t not in self._label_names}
            if names:
                self.set_label_names(names)

    def predict_spec(self, task: str) -> TaskSpec:
        """The :class:`~pal_lightning.tasks.specs.TaskSpec` of ``task``; an unknown task is one user error."""
        return inference.predict_spec(self.task_specs, task)

    @overload
    def predict(
        self, task: str, texts: Sequence[str] | Sequence[tuple[str, str]] | str, batch_size: int = 64
    ) -> inference.TaskPredictions: ...

    @overload
    def predict(
        self, task: Sequence[tuple[str, str | tuple[str, str]]], texts: None = None, batch_size: int = 64
    ) -> list[inference.Prediction]: ...

    def predict(
        self, task: Any, texts: Any = None, batch_size: int = 64
    ) -> inference.TaskPredictions | list[inference.Prediction]:
        """Predict ``task`` for sentences (pairs as tuples): :class:`~pal_lightning.module.inference.TaskPredictions`;
        or one :class:`~pal_lightning.module.inference.Prediction` per pair of a list of ``(task, text)``."""
        return inference.predict(self, task, texts, batch_size)

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """``{"task", "split", "ids", "predictions"}`` (and class ``"probabilities"`` for classification)."""
        spec = self.spec_of(batch[TASK])
        output = self(batch)
        predictions = self.predict_from_output(spec.name, output).detach().cpu().tolist()
        out = {TASK: spec.name, SPLIT: batch.get(SPLIT), IDS: list(batch[IDS]), PREDICTIONS: predictions}
        if not spec.is_regression:
            out[PROBABILITIES] = inference.probabilities_from_output(spec, output.detach()).cpu().tolist()
        return out

    @property
    def tokenizer(self) -> Any:
        """The encoder's fast tokenizer (the saved one after ``from_pretrained``)."""
        if self.__dict__.get("_pal_tokenizer") is None:
            self.__dict__["_pal_tokenizer"] = pretrained.load_tokenizer(self.hparams)
        return self.__dict__["_pal_tokenizer"]

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        self.__dict__["_pal_tokenizer"] = value

    def pretrained_config(
        self, scores: Mapping[str, float] | None = None, max_length: int | None = None
    ) -> dict[str, Any]:
        """The ``config.json`` content of this module."""
        return pretrained.pretrained_config(self, scores, max_length)

    def save_pretrained(self, save_directory: str | os.PathLike[str], **options: Any) -> Path:
        """Write the model into ``save_directory`` (:func:`pal_lightning.module.pretrained.save_pretrained`)."""
        return pretrained.save_pretrained(self, save_directory, **options)

    @classmethod
    def load_from_checkpoint(cls: type[M], checkpoint_path: Any, *args: Any, **kwargs: Any) -> M:
        """Lightning's ``load_from_checkpoint``; a checkpoint saved before ``optim`` grouped the optimizer
        options (flat ``lr``, ``head_lr``, ...) gets them gathered into ``optim``."""
        with loading_saved_hparams(kwargs):
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    @classmethod
    def from_pretrained(cls: type[M], name_or_path: str | os.PathLike[str], **options: Any) -> M:
        """A saved module from a folder or hub id (:func:`pal_lightning.module.pretrained.from_pretrained`)."""
        return pretrained.from_pretrained(cls, name_or_path, **options)

    def push_to_hub(self, repo_id: str, **options: Any) -> str:
        """Upload the model to the hub repository ``repo_id`` (:func:`pal_lightning.module.pretrained.push_to_hub`)."""
        return pretrained.push_to_hub(self, repo_id, **options)
