"""Which splits each stage serves, the check that their files are there, and the evaluation loaders. With
``validation_fraction``, validation is carved out of train and the dev files are read by ``test`` alone."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.loaders import BatchListDataset, MultiTaskDataset
from pal_lightning.data.options import DataConfig, check_at_least
from pal_lightning.data.sampling.per_task import eval_batches
from pal_lightning.data.sources.readers import SPLITS, check_files_exist
from pal_lightning.data.split_cache import SplitCache
from pal_lightning.data.tokenize import Encoded, TokenizedSplit
from pal_lightning.tasks.specs import EvalView, TaskSpec, with_views

__all__ = ["PREPARE", "VALIDATION", "StageSplits", "carve", "take_rows"]

#: The pseudo-stage of ``prepare_data``: only the tasks' own train and dev files must be there.
PREPARE = "prepare"
#: The split carved out of train by ``validation_fraction``.
VALIDATION = "validation"


def carve(size: int, fraction: float, seed: int, task: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``(kept, held out)`` of a train split in file order: ``round(fraction * size)`` held out (at
    least one, one left), seeded by ``seed`` and the task's CRC-32; a PalUserError under two rows."""
    if size < 2:
        raise PalUserError(
            f"Task {task!r} has {size} training row(s): too few to carve a validation split from. Give it "
            "more rows, or set --data.validation_fraction null to validate on the dev files."
        )
    held = min(size - 1, max(1, round(fraction * size)))
    order = np.random.default_rng([int(seed), zlib.crc32(task.encode())]).permutation(size)
    return np.sort(order[held:]), np.sort(order[:held])


def take_rows(data: TokenizedSplit, rows: np.ndarray, split: str) -> TokenizedSplit:
    """The examples of ``data`` at positions ``rows``, in that order, as split ``split``."""
    encodings = {}
    for key, enc in data.encodings.items():
        starts, lengths = enc.offsets[rows], enc.offsets[rows + 1] - enc.offsets[rows]
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # token j of the new flat array is starts[i] + (j - offsets[i]) of the example i holding it
        flat = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)
        encodings[key] = Encoded(enc.input_ids[flat], enc.token_type_ids[flat], offsets)
    labels = None if data.labels is None else data.labels[rows]
    bad = data.bad_rows if split == data.split else []
    return TokenizedSplit(data.task, split, data.ids[rows], labels, encodings, len(rows), bad, data.source)


@dataclass(frozen=True)
class StageSplits:
    """The ``(task or view, split)`` pairs each stage serves, and their loaders."""

    task_specs: Sequence[TaskSpec]
    """The tasks, as read."""
    eval_views: dict[str, EvalView]
    """Their evaluation views, by name."""
    splits: SplitCache
    """Where the splits are read from."""
    eval_batch_sizes: dict[str, int]
    """Evaluation batch size per rank of every task and view."""
    config: DataConfig
    """The data options."""
    _carved: dict[tuple[str, str], TokenizedSplit] = field(default_factory=dict, repr=False)

    @property
    def carves(self) -> bool:
        """Whether validation is carved out of train (``validation_fraction`` is set)."""
        return self.config.validation_fraction is not None

    def load(self, task: str, split: str, report: bool = True) -> TokenizedSplit:
        """A split through the cache; with the carve-out, ``train`` is what it leaves and :data:`VALIDATION` the
        carved share."""
        if not self.carves or split not in ("train", VALIDATION):
            return self.splits.load(task, split, report=report)
        if (task, split) not in self._carved:
            whole = self.splits.load(task, "train", report=report)
            fraction = float(self.config.validation_fraction or 0)
            seed = self.config.seed if self.config.validation_seed is None else self.config.validation_seed
            kept, held = carve(len(whole), fraction, int(seed), task)
            self._carved[(task, "train")] = take_rows(whole, kept, "train")
            self._carved[(task, VALIDATION)] = take_rows(whole, held, VALIDATION)
        return self._carved[(task, split)]

    def forget(self) -> None:
        """Drop the splits held in memory."""
        self.splits.forget()
        self._carved.clear()

    def validation_pairs(self) -> list[tuple[str, str]]:
        """What the validation loop scores: the carved shares, or the dev sets."""
        if self.carves:
            return [(s.name, VALIDATION) for s in self.task_specs]
        return [(s.name, "dev") for s in self.evaluated("dev")]

    def test_pairs(self) -> list[tuple[str, str]]:
        """What ``test`` scores: with the carve-out the dev sets, else the labelled test splits."""
        if self.carves:
            return [(s.name, "dev") for s in self.evaluated("dev")]
        return self.labelled_test()

    def evaluated(self, split: str) -> list[TaskSpec]:
        """The tasks, each followed by its evaluation views that have ``split``."""
        return with_views(self.task_specs, self.eval_views, split)

    def check_files(self, stage: str | None) -> None:
        """Check that the files ``stage`` (``None``: fit) reads are there; a PalUserError lists the missing."""
        train = [(s, "train") for s in self.task_specs]
        dev = [(s, "dev") for s in self.evaluated("dev")]
        groups = []
        if stage in (PREPARE, "fit", None) and self.carves:  # the dev files are for test alone
            groups = [train]
        elif stage in (PREPARE, "fit", None):
            groups = [[(s, sp) for s in self.task_specs for sp in ("train", "dev")]]
            if stage != PREPARE:
                groups.append([(v.spec, "dev") for v in self.eval_views.values() if v.has("dev")])
        elif stage == "validate":
            groups = [train if self.carves else dev]
        elif stage == "test":
            groups = [
                dev if self.carves else [(s, "test") for s in self.evaluated("test") if "test" in s.files]
            ]
        elif stage == "predict":
            groups = [[(s, sp) for sp in self.config.predict_splits for s in self.evaluated(sp)]]
        for group in groups:
            check_files_exist(group, self.splits.data_dir)

    def cached(self) -> list[tuple[str, str]]:
        """What ``prepare_data`` tokenises: every split a task has and its views' dev sets (with the carve-out
        no dev set)."""
        splits = [sp for sp in SPLITS if not (self.carves and sp == "dev")]
        pairs = [(s.name, sp) for s in self.task_specs for sp in splits if self.splits.exists(s, sp)]
        return pairs + [(v.name, "dev") for v in self.eval_views.values() if v.has("dev") and not self.carves]

    def requested(
        self, split: str, tasks: Sequence[str] | None, limit_examples: int | None
    ) -> list[tuple[str, str]]:
        """``split`` of ``tasks`` (default all); a PalUserError for an unknown task or ``limit_examples < 1``."""
        served = [s.name for s in self.task_specs]
        names = list(tasks) if tasks is not None else served
        unknown = [t for t in names if t not in served]
        if unknown:
            raise PalUserError(f"Unknown tasks {unknown}; this data module serves {served}.")
        check_at_least("limit_examples", limit_examples, 1)
        return [(t, split) for t in names]

    def labelled_test(self) -> list[tuple[str, str]]:
        """The test splits that exist and carry labels, in order; a PalUserError when there is none."""
        pairs = [
            (spec.name, "test")
            for spec in self.evaluated("test")
            if self.splits.exists(spec, "test") and self.splits.load(spec.name, "test").labels is not None
        ]
        if not pairs:
            raise PalUserError(
                "No task has a labelled test split (CS224N test-student files carry no labels). Use "
                "`validate` for dev scores, or `predict` to write test predictions."
            )
        return pairs

    def predicted(self) -> list[tuple[str, str]]:
        """Each task's ``predict_splits``, then those of its evaluation views that the view has."""
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
        """This rank's share (``shard``: world, rank) of the splits ``pairs``, each cut to ``limit_examples``."""
        splits = {p: self.load(*p).head(limit_examples) for p in pairs}
        sizes, lengths = {p: len(d) for p, d in splits.items()}, {p: d.lengths for p, d in splits.items()}
        batches = eval_batches(sizes, self.eval_batch_sizes, *shard, lengths)
        dataset = MultiTaskDataset(splits, pad_token_id, self.config.pad_to_multiple_of)
        return DataLoader(BatchListDataset(dataset, batches), batch_size=None, shuffle=False, **options)
