"""Which splits each stage of a run serves, the check that their files are there, and the evaluation loaders.

``fit`` trains on every task's train split and scores the dev sets; ``validate`` scores the dev sets;
``test`` the labelled test splits; ``predict`` the ``predict_splits`` (default dev and test). A task's
evaluation views (:mod:`pal_lightning.tasks.views`: GLUE's mismatched MNLI sets, its diagnostic set) come
right after the task wherever they have the split. :class:`StageSplits` answers these questions from the
task list and builds the evaluation loaders (every example exactly once across ranks); the data module
(:class:`~pal_lightning.data.datamodule.MultiTaskDataModule`) calls it from Lightning's hooks with what
only it knows (the Trainer's ranks, the tokenizer's padding id, the loader options).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.loaders import eval_loader
from pal_lightning.data.options import DataConfig, check_at_least
from pal_lightning.data.sources.readers import SPLITS, check_files_exist
from pal_lightning.data.split_cache import SplitCache
from pal_lightning.tasks.specs import TaskSpec
from pal_lightning.tasks.views import EvalView, with_views

__all__ = ["PREPARE", "StageSplits"]

#: The pseudo-stage of ``prepare_data``: only the tasks' own train and dev files must be there.
PREPARE = "prepare"


@dataclass(frozen=True)
class StageSplits:
    """The ``(task or view, split)`` pairs each stage serves (see the module docstring), and their loaders."""

    task_specs: Sequence[TaskSpec]
    """The tasks, as read."""
    eval_views: dict[str, EvalView]
    """Their evaluation views, by name."""
    splits: SplitCache
    """Where the splits are read from."""
    data_dir: Path
    """The data folder (named when a file is missing)."""
    eval_batch_sizes: dict[str, int]
    """Evaluation batch size per rank of every task and view."""
    config: DataConfig
    """The data options; ``predict_splits`` and ``pad_to_multiple_of`` are used."""

    def evaluated(self, split: str) -> list[TaskSpec]:
        """The tasks, each followed by its evaluation views that have ``split``: what ``split`` serves."""
        return with_views(self.task_specs, self.eval_views, split)

    def check_files(self, stage: str | None) -> None:
        """Check that the files ``stage`` reads are there (``None``: ``fit``; :data:`PREPARE`: the tasks'
        train and dev files, what ``prepare_data`` needs).

        Raises:
            PalUserError: listing every missing file of the first group found wanting (the tasks'
                train and dev files are checked before the views' dev files).
        """
        if stage in (PREPARE, "fit", None):
            check_files_exist([(s, sp) for s in self.task_specs for sp in ("train", "dev")], self.data_dir)
            if stage != PREPARE:
                views = [(v.spec, "dev") for v in self.eval_views.values() if v.has("dev")]
                check_files_exist(views, self.data_dir)
        elif stage == "validate":
            check_files_exist([(s, "dev") for s in self.evaluated("dev")], self.data_dir)
        elif stage == "test":
            check_files_exist(
                [(s, "test") for s in self.evaluated("test") if "test" in s.files], self.data_dir
            )
        elif stage == "predict":
            check_files_exist(
                [(s, sp) for sp in self.config.predict_splits for s in self.evaluated(sp)], self.data_dir
            )

    def cached(self) -> list[tuple[str, str]]:
        """What ``prepare_data`` tokenises once: every split a task has, and its views' dev sets (their
        test sets only when predicting)."""
        pairs = [(s.name, sp) for s in self.task_specs for sp in SPLITS if self.splits.exists(s, sp)]
        return pairs + [(v.name, "dev") for v in self.eval_views.values() if v.has("dev")]

    def requested(
        self, split: str, tasks: Sequence[str] | None, limit_examples: int | None
    ) -> list[tuple[str, str]]:
        """``split`` of ``tasks`` (default every task), checked: what ``eval_dataloader`` serves.

        Raises:
            PalUserError: for a task the data module does not serve, or ``limit_examples < 1``.
        """
        served = [s.name for s in self.task_specs]
        names = list(tasks) if tasks is not None else served
        unknown = [t for t in names if t not in served]
        if unknown:
            raise PalUserError(f"Unknown tasks {unknown}; this data module serves {served}.")
        check_at_least("limit_examples", limit_examples, 1)
        return [(t, split) for t in names]

    def labelled_test(self) -> list[tuple[str, str]]:
        """The test splits that exist and carry labels, in order.

        Raises:
            PalUserError: when there is none (CS224N's test-student files carry no labels: they are for
                ``predict``, never for ``test``).
        """
        pairs = []
        for spec in self.evaluated("test"):
            if "test" in spec.files or spec.format == "hf":
                if (
                    self.splits.exists(spec, "test")
                    and self.splits.load(spec.name, "test").labels is not None
                ):
                    pairs.append((spec.name, "test"))
        if not pairs:
            raise PalUserError(
                "No task has a labelled test split (CS224N test-student files carry no labels). Use "
                "`validate` for dev scores, or `predict` to write test predictions."
            )
        return pairs

    def predicted(self) -> list[tuple[str, str]]:
        """Everything ``predict`` serves: each task's ``predict_splits``, then those of its evaluation
        views that the view has."""
        pairs = []
        for spec in self.task_specs:
            pairs += [(spec.name, split) for split in self.config.predict_splits]
            for view in self.eval_views.values():
                if view.parent == spec.name:
                    pairs += [(view.name, split) for split in self.config.predict_splits if view.has(split)]
        return pairs

    def loader(
        self,
        pairs: Sequence[tuple[str, str]],
        shard: tuple[int, int],
        pad_token_id: int,
        options: dict[str, Any],
        limit_examples: int | None = None,
    ) -> DataLoader:
        """This rank's share of every example of the splits ``pairs`` (each cut to its first
        ``limit_examples``), one task per batch.

        Args:
            pairs: ``(task or view, split)`` to serve, in order.
            shard: ``(world size, rank)`` of this process.
            pad_token_id: the tokenizer's padding id.
            options: the DataLoader options every loader shares (:func:`~pal_lightning.data.loaders.loader_options`).
            limit_examples: examples kept per split (all when ``None``).
        """
        splits = {p: self.splits.load(*p).head(limit_examples) for p in pairs}
        world, rank = shard
        return eval_loader(
            splits, self.eval_batch_sizes, world, rank, pad_token_id, options, self.config.pad_to_multiple_of
        )
