"""The multi-task LightningDataModule: reads and validates every task's files, tokenises them once (cached
on disk), and serves training batches drawn by the task schedule (:mod:`pal_lightning.data.sampling`: one
task per step, or mixed rows; the same on every rank; resumable mid-epoch) and evaluation batches covering
every example once across ranks. Batch sizes are per rank; the module shards by itself, so it turns the
Trainer's ``use_distributed_sampler`` off. It wires together the options (:mod:`.options`), the
split cache (:mod:`.split_cache`), the splits of each stage (:mod:`.stage_splits`) and the loaders
(:mod:`.loaders`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.config_fields import bind_fields, takes_fields
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.dataset import MultiTaskDataset
from pal_lightning.data.loaders import ResumableDataLoader, TrainSampling, loader_options
from pal_lightning.data.options import DataConfig, resolve_cache_dir
from pal_lightning.data.sampling.mixed import MixedTaskBatchSampler, one_batch_size
from pal_lightning.data.sampling.per_task import MIXED, MultiTaskBatchSampler, TaskBatch
from pal_lightning.data.sampling.phase_plan import Phase, plan_phases
from pal_lightning.data.sampling.schedules import SamplingSchedule, annealing_horizon
from pal_lightning.data.sampling.sharding import fit_batches_consumed, shard_of, turn_off_distributed_sampler
from pal_lightning.data.sources.hf import with_hub_copies
from pal_lightning.data.sources.readers import resolve_data_dir
from pal_lightning.data.split_cache import SplitCache
from pal_lightning.data.stage_splits import PREPARE, StageSplits
from pal_lightning.data.task_values import per_task
from pal_lightning.data.tokenize import TokenizedSplit
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks
from pal_lightning.tasks.views import eval_views

__all__ = ["MultiTaskDataModule"]

log = logging.getLogger(__name__)


@takes_fields(DataConfig)
class MultiTaskDataModule(pl.LightningDataModule):
    """Data for multi-task training: readers, validation, tokenisation cache, task sampling.

    Takes the fields of :class:`~pal_lightning.data.options.DataConfig` as keyword arguments (below), or a
    whole ``DataConfig`` through :meth:`from_config`; :attr:`config` keeps them as given.
    """

    def __init__(self, *args: Any, **options: Any) -> None:
        # Not super(): it gives methods a __class__ cell, and save_hyperparameters would then read this
        # frame's arguments by the class's signature (the options are not local variables here).
        pl.LightningDataModule.__init__(self)
        #: The options as given.
        self.config = config = bind_fields(DataConfig, args, options)
        given_specs = resolve_tasks(config.tasks)
        self.task_names: list[str] = [t.name for t in given_specs]
        #: The tasks as read: without a data folder, the built-in tasks that have a public Hugging
        #: Face copy read it (pal_lightning.data.sources.hf); the hyper-parameters keep them as given.
        self.task_specs: list[TaskSpec] = with_hub_copies(given_specs, config.data_dir)
        #: More dev/test sets scored by a task's head, by name (pal_lightning.tasks.views: glue_mnli's
        #: mismatched sets and GLUE's diagnostic set); served under their own names, never trained.
        self.eval_views = eval_views(self.task_specs)
        self.phase_plan = plan_phases(
            config.schedule, config.task_order, config.steps_per_task, config.epochs_per_task, self.task_names
        )
        self.data_dir = resolve_data_dir(config.data_dir)
        self.batch_sizes = per_task(config.batch_size, self.task_names, "batch_size")
        self.eval_batch_sizes = per_task(config.eval_batch_size, self.task_names, "eval_batch_size")
        self.pair_encodings = {t: resolve_pair_encoding(config.pair_encoding, t) for t in self.task_names}
        for view in self.eval_views.values():  # a view is batched and encoded as its task is
            self.eval_batch_sizes[view.name] = self.eval_batch_sizes[view.parent]
            self.pair_encodings[view.name] = self.pair_encodings[view.parent]
        self.cache_dir = resolve_cache_dir(config.cache_dir)
        self.tokenizer_name, self.tokenizer_revision = str(config.tokenizer), config.tokenizer_revision
        self.max_length = int(config.max_length)
        self.predict_splits = tuple(config.predict_splits)
        #: ``interleaved`` or ``sequential`` (the ``schedule`` option), and the sequential phases' tasks.
        self.task_schedule, self.task_order = config.schedule, list(self.phase_plan.order)
        #: Every split read, validated and tokenised once (``load_split``).
        self.splits = SplitCache(
            [*self.task_specs, *(v.spec for v in self.eval_views.values())],
            self.data_dir,
            self.cache_dir,
            (self.tokenizer_name, self.tokenizer_revision),
            self.max_length,
            self.pair_encodings,
            config,
        )
        #: Which splits each stage serves (``evaluated``, ``predicted_pairs``) and the check of their files.
        self.stages = StageSplits(
            self.task_specs, self.eval_views, self.splits, self.data_dir, self.eval_batch_sizes, config
        )
        # the sampling options are checked against the tasks now, not at fit time
        config.sampling_schedule(config.anneal_epochs or 1).probabilities(
            dict.fromkeys(self.task_names, 1), 0
        )
        if config.batch_mixing == MIXED:
            one_batch_size(self.batch_sizes)
        # Plain values only, so checkpoints load with weights_only=True.
        self.save_hyperparameters(config.hparams())
        #: Training examples per task (after validation and ``limit_examples``), set by ``setup("fit")``.
        self.train_sizes: dict[str, int] = {}
        #: How tasks are drawn at each step, set by ``setup("fit")``.
        self.sampling_schedule: SamplingSchedule | None = None
        #: The training sampler, its position kept across rebuilt loaders and checkpoints.
        self.train_sampling = TrainSampling()

    @classmethod
    def from_config(cls, config: DataConfig) -> MultiTaskDataModule:
        """The data module of the options ``config``."""
        return cls(**{name: getattr(config, name) for name in config.__dataclass_fields__})

    # ------------------------------------------------------------------ tokenizer and loading

    @property
    def tokenizer(self) -> Any:
        """The encoder's fast tokenizer (loaded on first use, offline-safe via ``resolve_encoder``)."""
        return self.splits.tokenizer

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    def load_split(self, task: str, split: str, report: bool = True) -> TokenizedSplit:
        """Read, validate and tokenise one split (from the cache when possible); with ``validation_fraction``,
        ``train`` is what the carve-out leaves and ``validation`` the carved share."""
        return self.stages.load(task, split, report=report)

    def label_names(self) -> dict[str, list[str]]:
        """The class names of each task whose labels have names: its ``label_names``, else its train split's
        (``ClassLabel`` names, or the label column's words sorted); tasks labelled by numbers are left out."""
        found = {s.name: self.splits.label_names(s) for s in self.task_specs}
        return {task: list(names) for task, names in found.items() if names}

    # ------------------------------------------------------------------ Lightning hooks

    def prepare_data(self) -> None:
        """Tokenise and cache every split once (Lightning calls this on one process per node)."""
        if self.cache_dir is None:
            return
        self.stages.check_files(PREPARE)
        for task, split in self.stages.cached():
            self.load_split(task, split, report=False)
        # Other processes read the cache files; keep nothing tokenised in memory twice.
        self.stages.forget()

    def setup(self, stage: str | None = None) -> None:
        """Load the splits the stage needs and build the training schedule (``fit``)."""
        turn_off_distributed_sampler(self.trainer)
        self.stages.check_files(stage)
        if stage in ("fit", None):
            self.train_sizes = {t: len(self.load_split(t, "train")) for t in self.task_names}
            for pair in self.stages.validation_pairs():
                self.load_split(*pair)
            empty = [t for t, n in self.train_sizes.items() if n == 0]
            if empty:
                raise PalUserError(f"Tasks {empty} have no valid training rows; check their train files.")
            self.sampling_schedule = self.config.sampling_schedule(self._resolve_anneal_epochs())
        elif stage == "validate":
            for pair in self.stages.validation_pairs():
                self.load_split(*pair)

    def _resolve_anneal_epochs(self) -> int:
        if self.config.anneal_epochs is not None:
            return int(self.config.anneal_epochs)
        trainer = self.trainer
        if trainer is None:
            return 1
        # called by setup("fit") once the training sizes are known, so steps_per_epoch can be computed
        return annealing_horizon(trainer.max_epochs, trainer.max_steps, lambda: self.steps_per_epoch)

    @property
    def phases(self) -> list[Phase]:
        """The phases of a sequential schedule, ``Phase(task, start, end)`` in training batches (empty for the
        interleaved schedule; with ``epochs_per_task`` valid after ``setup("fit")``)."""
        world, _ = shard_of(self.trainer)
        return self.phase_plan.phases(self.train_sizes, self.batch_sizes, world)

    @property
    def steps_per_epoch(self) -> int:
        """Training batches per epoch per rank (valid after ``setup("fit")``)."""
        if not self.train_sizes:
            raise RuntimeError(
                "steps_per_epoch is known after setup('fit') (the training data must be loaded)."
            )
        world, _ = shard_of(self.trainer)
        return self.phase_plan.steps_per_epoch(
            self.config.steps_per_epoch, self.train_sizes, self.batch_sizes, world
        )

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        """Sampling probability of each task at 0-based ``epoch`` (valid after ``setup("fit")``)."""
        if self.sampling_schedule is None or not self.train_sizes:
            raise RuntimeError("task_probabilities_for_epoch needs setup('fit') first.")
        return self.sampling_schedule.probabilities(self.train_sizes, epoch)

    # ------------------------------------------------------------------ loaders

    def _loader_kwargs(self) -> dict[str, Any]:
        return loader_options(int(self.config.num_workers), int(self.config.seed))

    def train_dataloader(self) -> ResumableDataLoader:
        """One task per step, the same on all ranks (``mixed``: rows of several tasks); resumable."""
        if self.sampling_schedule is None:
            self.setup("fit")
        assert self.sampling_schedule is not None
        world, rank = shard_of(self.trainer)
        splits = {(t, "train"): self.load_split(t, "train") for t in self.task_names}
        sampler = self._train_sampler(splits, world, rank)
        sampler.position_fn = lambda: fit_batches_consumed(self.trainer)
        dataset = MultiTaskDataset(splits, self.pad_token_id, self.config.pad_to_multiple_of)
        epoch = None if self.trainer is None else self.trainer.current_epoch
        return self.train_sampling.loader(sampler, dataset, epoch, self._loader_kwargs())

    def _train_sampler(
        self, splits: dict[tuple[str, str], TokenizedSplit], world: int, rank: int
    ) -> MultiTaskBatchSampler:
        assert self.sampling_schedule is not None
        common: dict[str, Any] = {
            "steps_per_epoch": self.config.steps_per_epoch,
            "num_replicas": world,
            "rank": rank,
            "seed": int(self.config.seed),
        }
        args = (self.train_sizes, self.batch_sizes, self.sampling_schedule)
        by_length = self.config.group_by_length
        if self.config.batch_mixing == MIXED:
            # a mixed batch pads to its longest row, so the key is each example's longer side
            widths = {t: splits[(t, "train")].widths for t in self.task_names} if by_length else None
            return MixedTaskBatchSampler(*args, **common, lengths=widths)
        return MultiTaskBatchSampler(
            *args,
            **common,
            lengths={t: splits[(t, "train")].lengths for t in self.task_names} if by_length else None,
            phases=self.phase_plan.lengths(self.train_sizes, self.batch_sizes, world) or None,
        )

    def _eval_loader(
        self, pairs: Sequence[tuple[str, str]], limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        shard = shard_of(self.trainer)
        return self.stages.loader(pairs, shard, self.pad_token_id, self._loader_kwargs(), limit_examples)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        """Every dev example exactly once across ranks, one task (or evaluation view) per batch; with
        ``validation_fraction``, the carved validation share of every task instead."""
        return self._eval_loader(self.stages.validation_pairs())

    def eval_dataloader(
        self, split: str = "dev", tasks: Sequence[str] | None = None, limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        """Like :meth:`val_dataloader` for any labelled ``split`` and some ``tasks`` (default all), each cut
        to its first ``limit_examples`` (the continual evaluation's cheap score after each phase)."""
        return self._eval_loader(self.stages.requested(split, tasks, limit_examples), limit_examples)

    def test_dataloader(self) -> torch.utils.data.DataLoader:
        """The labelled ``test`` splits (unlabelled test-student files are for ``predict``); with
        ``validation_fraction``, the dev sets (scored once, at the end).

        Raises:
            PalUserError: when no task has a labelled test split (and no carve-out).
        """
        return self._eval_loader(self.stages.test_pairs())

    def predict_dataloader(self) -> torch.utils.data.DataLoader:
        """The ``predict_splits`` (default dev and test) of every task and evaluation view that has them,
        each example once across ranks."""
        return self._eval_loader(self.predicted_pairs())

    def predicted_pairs(self) -> list[tuple[str, str]]:
        """``(task or view, split)`` of everything ``predict`` serves: each task's ``predict_splits``, then
        those of its evaluation views that the view has."""
        return self.stages.predicted()

    def train_batch(self, task: str, indices: Sequence[int]) -> dict[str, Any]:
        """The padded CPU batch of ``task``'s train examples at ``indices`` (GEM rebuilds its memories so)."""
        if task not in self.task_names:
            raise PalUserError(f"Unknown task {task!r}; this data module serves {self.task_names}.")
        split = self.load_split(task, "train")
        dataset = MultiTaskDataset(
            {(task, "train"): split}, self.pad_token_id, self.config.pad_to_multiple_of
        )
        return dataset.__getitems__(TaskBatch(task, "train", tuple(int(i) for i in indices)))

    def example_ids(self, task: str, split: str) -> list[str]:
        """Ids of a loaded split in file order (the prediction writer writes rows in this order)."""
        return self.load_split(task, split).ids.tolist()

    # ------------------------------------------------------------------ resume

    @property
    def train_batch_sampler(self) -> MultiTaskBatchSampler | None:
        """The batch sampler of the last train loader built (``None`` before the first)."""
        return self.train_sampling.sampler

    def state_dict(self) -> dict[str, Any]:
        """The training sampler's position (also saved through the train loader)."""
        return self.train_sampling.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler position (applied when the train loader is built, or now if it exists)."""
        self.train_sampling.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tasks={self.task_names}, data_dir={str(self.data_dir)!r}, "
            f"sampling={self.config.sampling!r}, schedule={self.task_schedule!r}, batch_size={self.batch_sizes})"
        )
