"""The multi-task LightningDataModule: it wires the options (:mod:`.options`), the split cache
(:mod:`.split_cache`), each stage's splits (:mod:`.stage_splits`), the samplers (:mod:`.sampling`) and the
loaders (:mod:`.loaders`). Batch sizes are per rank: the module shards by itself."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch

from pal_lightning.core import distributed
from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.core.config_fields import bind_fields, takes_fields
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import disable_distributed_sampler
from pal_lightning.data.loaders import MultiTaskDataset, ResumableDataLoader, TrainSampling, loader_options
from pal_lightning.data.options import DataConfig, resolve_cache_dir
from pal_lightning.data.sampling.mixed import MixedTaskBatchSampler, one_batch_size
from pal_lightning.data.sampling.per_task import MIXED, MultiTaskBatchSampler, TaskBatch
from pal_lightning.data.sampling.phase_plan import Phase, per_task, plan_phases
from pal_lightning.data.sampling.schedules import SamplingSchedule, annealing_horizon
from pal_lightning.data.sources.hf import with_hub_copies
from pal_lightning.data.sources.readers import label_names_for, resolve_data_dir
from pal_lightning.data.split_cache import SplitCache
from pal_lightning.data.stage_splits import PREPARE, StageSplits
from pal_lightning.data.tokenize import TokenizedSplit
from pal_lightning.tasks.specs import TaskSpec, eval_views, resolve_tasks

__all__ = ["MultiTaskDataModule", "fit_batches_consumed", "shard_of", "turn_off_distributed_sampler"]

log = logging.getLogger(__name__)


def shard_of(trainer: pl.Trainer | None) -> tuple[int, int]:
    """``(world size, global rank)``: the trainer's, else the process group's, else ``(1, 0)``."""
    if trainer is not None:
        return int(trainer.world_size), int(trainer.global_rank)
    if distributed.is_distributed():
        return distributed.world_size(), distributed.rank()
    return 1, 0


def turn_off_distributed_sampler(trainer: pl.Trainer | None) -> None:
    """Switch the trainer's ``use_distributed_sampler`` off: a ``DistributedSampler`` would duplicate
    evaluation examples and break the task schedule.

    Raises:
        PalUserError: under DDP, when this Lightning version has no such switch to turn off.
    """
    if trainer is None:
        return
    was_on = disable_distributed_sampler(trainer)  # a private Lightning setting (compat.py says why)
    if was_on:
        if distributed.is_main_process():
            log.info("MultiTaskDataModule shards data itself: set Trainer(use_distributed_sampler=False).")
    elif was_on is None and trainer.world_size > 1:
        raise PalUserError(
            "MultiTaskDataModule needs Trainer(use_distributed_sampler=False) under DDP; pass it to the "
            "Trainer (--trainer.use_distributed_sampler false)."
        )


def fit_batches_consumed(trainer: pl.Trainer | None) -> int | None:
    """Training batches of the epoch the Trainer has processed (it prefetches past them), ``None`` outside fit."""
    if trainer is None:
        return None
    try:
        if trainer.state.fn != "fit":
            return None
        return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)  # type: ignore[attr-defined]
    except AttributeError:  # another Lightning layout: the sampler keeps its own count
        return None


@takes_fields(DataConfig)
class MultiTaskDataModule(pl.LightningDataModule):
    """Data for multi-task training: readers, validation, tokenisation cache, task sampling.

    Takes the fields of :class:`~pal_lightning.data.options.DataConfig` as keyword arguments (below), or a
    whole ``DataConfig`` through :meth:`from_config`; :attr:`config` keeps them as given.
    """

    def __init__(self, *args: Any, **options: Any) -> None:
        # Not super(): its __class__ cell would make save_hyperparameters read this frame by the signature.
        pl.LightningDataModule.__init__(self)
        #: The options as given.
        self.config = config = bind_fields(DataConfig, args, options)
        given_specs = resolve_tasks(config.tasks)
        self.task_names: list[str] = [t.name for t in given_specs]
        #: The tasks as read (without a data folder, built-in tasks read their Hugging Face copy).
        self.task_specs: list[TaskSpec] = with_hub_copies(given_specs, config.data_dir)
        #: More dev/test sets scored by a task's head, by name; never trained.
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
        #: ``interleaved`` or ``sequential``, and the sequential phases' tasks.
        self.task_schedule, self.task_order = config.schedule, list(self.phase_plan.order)
        #: Every split read, validated and tokenised once.
        specs = [*self.task_specs, *(v.spec for v in self.eval_views.values())]
        parents = {v.name: v.parent for v in self.eval_views.values()}
        self.splits = SplitCache(specs, self.data_dir, self.cache_dir, self.pair_encodings, config, parents)
        #: Which splits each stage serves.
        self.stages = StageSplits(
            self.task_specs, self.eval_views, self.splits, self.eval_batch_sizes, config
        )
        # the sampling options are checked against the tasks now, not at fit time
        config.sampling_schedule(config.anneal_epochs or 1).probabilities(
            dict.fromkeys(self.task_names, 1), 0
        )
        if config.batch_mixing == MIXED:
            one_batch_size(self.batch_sizes)
        self.save_hyperparameters(config.hparams())  # plain values: checkpoints load with weights_only=True
        #: Training examples per task, set by ``setup("fit")``.
        self.train_sizes: dict[str, int] = {}
        #: How tasks are drawn at each step, set by ``setup("fit")``.
        self.sampling_schedule: SamplingSchedule | None = None
        #: The training sampler, its position kept across rebuilt loaders and checkpoints.
        self.train_sampling = TrainSampling()

    @classmethod
    def from_config(cls, config: DataConfig) -> MultiTaskDataModule:
        """The data module of the options ``config``."""
        return cls(**{name: getattr(config, name) for name in config.__dataclass_fields__})

    @property
    def tokenizer(self) -> Any:
        """The encoder's fast tokenizer (loaded on first use)."""
        return self.splits.tokenizer

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    def load_split(self, task: str, split: str, report: bool = True) -> TokenizedSplit:
        """Read, validate and tokenise one split (from the cache when possible)."""
        return self.stages.load(task, split, report=report)

    def label_names(self) -> dict[str, list[str]]:
        """The class names of each task whose labels have names."""
        found = {s.name: label_names_for(s, self.data_dir) for s in self.task_specs}
        return {task: list(names) for task, names in found.items() if names}

    def prepare_data(self) -> None:
        """Tokenise and cache every split once (Lightning calls this on one process per node)."""
        if self.cache_dir is None:
            return
        self.stages.check_files(PREPARE)
        for task, split in self.stages.cached():
            self.load_split(task, split, report=False)
        self.stages.forget()  # other processes read the cache files

    def setup(self, stage: str | None = None) -> None:
        """Load the splits the stage needs and build the training schedule (``fit``)."""
        turn_off_distributed_sampler(self.trainer)
        self.stages.check_files(stage)
        if stage in ("fit", None):
            self.train_sizes = {t: len(self.load_split(t, "train")) for t in self.task_names}
        if stage in ("fit", None, "validate"):
            for pair in self.stages.validation_pairs():
                self.load_split(*pair)
        if stage in ("fit", None):
            empty = [t for t, n in self.train_sizes.items() if n == 0]
            if empty:
                raise PalUserError(f"Tasks {empty} have no valid training rows; check their train files.")
            self.sampling_schedule = self.config.sampling_schedule(self._resolve_anneal_epochs())

    def _resolve_anneal_epochs(self) -> int:
        if self.config.anneal_epochs is not None:
            return int(self.config.anneal_epochs)
        if self.trainer is None:
            return 1
        return annealing_horizon(
            self.trainer.max_epochs, self.trainer.max_steps, lambda: self.steps_per_epoch
        )

    @property
    def phases(self) -> list[Phase]:
        """The phases of a sequential schedule in training batches (empty when interleaved)."""
        return self.phase_plan.phases(self.train_sizes, self.batch_sizes, shard_of(self.trainer)[0])

    @property
    def steps_per_epoch(self) -> int:
        """Training batches per epoch per rank (valid after ``setup("fit")``)."""
        if not self.train_sizes:
            raise RuntimeError(
                "steps_per_epoch is known after setup('fit') (the training data must be loaded)."
            )
        world = shard_of(self.trainer)[0]
        return self.phase_plan.steps_per_epoch(
            self.config.steps_per_epoch, self.train_sizes, self.batch_sizes, world
        )

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        """Sampling probability of each task at 0-based ``epoch`` (valid after ``setup("fit")``): what the
        training sampler draws the tasks of the epoch with, and what the training log shows as
        ``sampling/p_<task>``. Override it (a pure function of the epoch, the same on every rank) to draw by
        a rule of your own, or register one (``register_sampling_rule``). ``round_robin`` cycles instead."""
        if self.sampling_schedule is None or not self.train_sizes:
            raise RuntimeError("task_probabilities_for_epoch needs setup('fit') first.")
        if self.phase_plan.sequential:  # what is logged is what is drawn: phases draw nothing
            raise RuntimeError(
                "The sequential schedule trains its phases one task after another and draws no tasks: it has "
                "no sampling probabilities (the phases are in the data module's phases)."
            )
        return self.sampling_schedule.probabilities(self.train_sizes, epoch)

    def _loader_kwargs(self) -> dict[str, Any]:
        return loader_options(int(self.config.num_workers), int(self.config.seed))

    def train_dataloader(self) -> ResumableDataLoader:
        """One task per step, the same on all ranks (``mixed``: rows of several tasks); resumable."""
        if self.sampling_schedule is None:
            self.setup("fit")
        assert self.sampling_schedule is not None
        world, rank = shard_of(self.trainer)
        splits = {(t, "train"): self.load_split(t, "train") for t in self.task_names}
        common: dict[str, Any] = {
            "steps_per_epoch": self.config.steps_per_epoch,
            "num_replicas": world,
            "rank": rank,
            "seed": int(self.config.seed),
            # the one source of the task plan: what is logged is what is drawn
            "probabilities": self.task_probabilities_for_epoch,
        }
        args = (self.train_sizes, self.batch_sizes, self.sampling_schedule)
        mixed, lengths = self.config.batch_mixing == MIXED, None
        if self.config.group_by_length:  # a mixed batch pads to its longest row: each example's longer side
            lengths = {t: s.widths if mixed else s.lengths for (t, _), s in splits.items()}
        sampler: MultiTaskBatchSampler
        if mixed:
            sampler = MixedTaskBatchSampler(*args, **common, lengths=lengths)
        else:
            phases = self.phase_plan.lengths(self.train_sizes, self.batch_sizes, world) or None
            sampler = MultiTaskBatchSampler(*args, **common, lengths=lengths, phases=phases)
        sampler.position_fn = lambda: fit_batches_consumed(self.trainer)
        dataset = MultiTaskDataset(splits, self.pad_token_id, self.config.pad_to_multiple_of)
        epoch = None if self.trainer is None else self.trainer.current_epoch
        return self.train_sampling.loader(sampler, dataset, epoch, self._loader_kwargs())

    def _eval_loader(
        self, pairs: Sequence[tuple[str, str]], limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        shard = shard_of(self.trainer)
        return self.stages.loader(pairs, shard, self.pad_token_id, self._loader_kwargs(), limit_examples)

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        """Every dev example (or carved validation row) exactly once across ranks, one task per batch."""
        return self._eval_loader(self.stages.validation_pairs())

    def eval_dataloader(
        self, split: str = "dev", tasks: Sequence[str] | None = None, limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        """Like :meth:`val_dataloader` for any labelled ``split`` of ``tasks``, each cut to ``limit_examples``."""
        return self._eval_loader(self.stages.requested(split, tasks, limit_examples), limit_examples)

    def test_dataloader(self) -> torch.utils.data.DataLoader:
        """The labelled ``test`` splits (with ``validation_fraction``: the dev sets).

        Raises:
            PalUserError: when no task has a labelled test split (and no carve-out).
        """
        return self._eval_loader(self.stages.test_pairs())

    def predict_dataloader(self) -> torch.utils.data.DataLoader:
        """The ``predict_splits`` of every task and evaluation view that has them, once across ranks."""
        return self._eval_loader(self.predicted_pairs())

    def predicted_pairs(self) -> list[tuple[str, str]]:
        """``(task or view, split)`` of everything ``predict`` serves."""
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
        """Ids of a loaded split in file order."""
        return self.load_split(task, split).ids.tolist()

    @property
    def train_batch_sampler(self) -> MultiTaskBatchSampler | None:
        """The batch sampler of the last train loader built (``None`` before the first)."""
        return self.train_sampling.sampler

    def state_dict(self) -> dict[str, Any]:
        """The training sampler's position."""
        return self.train_sampling.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler position (now, or when the train loader is built)."""
        self.train_sampling.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tasks={self.task_names}, data_dir={str(self.data_dir)!r}, "
            f"sampling={self.config.sampling!r}, schedule={self.task_schedule!r}, batch_size={self.batch_sizes})"
        )
