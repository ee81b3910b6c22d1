"""The options of :class:`~pal_lightning.data.MultiTaskDataModule`, declared and documented once in
:class:`DataConfig` (the data module takes its fields as keyword arguments; LightningCLI shows each as
``--data.<field>``). Checks that need only the options run here; those needing the tasks in the module."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER, pal_cache_dir
from pal_lightning.core.plain_values import to_plain
from pal_lightning.data.sampling.mixed import check_batch_mixing
from pal_lightning.data.sampling.phase_plan import SEQUENTIAL, check_task_schedule
from pal_lightning.data.sampling.schedules import (
    DEFAULT_TEMPERATURE,
    SamplingSchedule,
    check_temperature,
    sampling_rules,
    unknown_rule_message,
)
from pal_lightning.data.sources.registry import SPLITS, source_for
from pal_lightning.data.sources.validate import DEFAULT_MAX_BAD_FRACTION, check_on_bad_row
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks, task_to_hparam

__all__ = ["DataConfig", "check_at_least", "resolve_cache_dir"]


@dataclass
class DataConfig:
    """The data module's options, as given.

    Raises:
        PalUserError: for an unknown value, a size below its minimum, or options that do not go together.
    """

    tasks: Sequence[str | TaskSpec | dict[str, Any]] = ("sst", "qqp", "sts")
    """Task names, :class:`~pal_lightning.tasks.specs.TaskSpec` objects or dicts of TaskSpec fields."""

    tokenizer: str = DEFAULT_ENCODER
    """Encoder name or path whose (fast) tokenizer is used."""

    data_dir: str | os.PathLike[str] | None = None
    """Folder of the data files; default ``$PAL_DATA_DIR``, else ``./data``; without any, built-in tasks read
    their public Hugging Face copy. ``demo``: the small set shipped with the package."""

    batch_size: int | dict[str, int] = 32
    """Training batch size per rank, one int or a ``task -> int`` mapping."""

    eval_batch_size: int | dict[str, int] = 128
    """Validation/test/predict batch size per rank (int or mapping)."""

    max_length: int = 128
    """Longest tokenised sequence (special tokens included); longer ones are truncated."""

    pair_encoding: str | dict[str, str] = "cross"
    """``cross`` or ``siamese``, or a per-task mapping (see ``batch.resolve_pair_encoding``)."""

    sampling: str = "annealed"
    """``proportional`` | ``sqrt`` | ``uniform`` | ``round_robin`` | ``annealed`` | ``weights`` |
    ``temperature``, or a rule of your own registered with ``register_sampling_rule``."""

    task_weights: dict[str, float] | None = None
    """Per-task weights for ``sampling="weights"``."""

    task_multipliers: dict[str, float] | None = None
    """Per-task factors on the sampling probabilities, renormalised (tasks not named keep 1), e.g. to draw
    a large auxiliary task less often: ``{sst2: 0.1}``."""

    steps_per_epoch: int | None = None
    """Training steps per epoch per rank; ``None`` = one pass over the data
    (``sum_t ceil(N_t / (B_t * world_size))``)."""

    anneal_epochs: int | None = None
    """Annealing horizon ``E``; ``None`` = ``trainer.max_epochs`` (from ``max_steps`` if step-based)."""

    on_bad_row: str = "skip"
    """``skip`` (drop and warn once per file) or ``error``."""

    max_bad_rows_fraction: float = DEFAULT_MAX_BAD_FRACTION
    """The share of a split's rows that ``skip`` may drop; more (and more than 2) stops the run, since that
    many usually means a wrong setting. ``1`` never stops."""

    detokenize: bool = True
    """Undo PTB tokens for tasks that ask for it (SST)."""

    group_by_length: bool = False
    """Batch training examples of similar length together (less padding)."""

    pad_to_multiple_of: int = 1
    """Pad every batch's length up to a multiple of this (8: tensor-core shapes on a GPU; 1: best on a
    CPU). Padded positions are masked: the results do not change."""

    cache_dir: bool | str | os.PathLike[str] | None = None
    """Tokenisation cache folder; ``None`` = ``$PAL_CACHE_DIR`` or ``~/.cache/pal_lightning``; ``False``
    disables the cache."""

    num_workers: int = 0
    """DataLoader worker processes."""

    seed: int = 42
    """Seed of the task and example order (with the epoch)."""

    predict_splits: Sequence[str] = ("dev", "test")
    """Splits served by ``predict_dataloader`` (``dev`` and/or ``test``)."""

    limit_examples: int | None = None
    """Keep only the first N examples of every split of every task (quick runs)."""

    schedule: str = "interleaved"
    """The task schedule: ``interleaved`` (every step draws a task by ``sampling``) or ``sequential``
    (continual learning: the tasks of ``task_order`` one after another; ``sampling`` is not used)."""

    task_order: Sequence[str] | None = None
    """Order of the sequential phases (any subset of the tasks, each at most once); default the task list."""

    steps_per_task: int | dict[str, int] | None = None
    """Training batches per phase (int, or ``task -> int`` with an optional ``default``)."""

    epochs_per_task: int | float | None = None
    """Passes over each task's training data per phase; 1 when neither this nor ``steps_per_task`` is given."""

    tokenizer_revision: str | None = None
    """Hub branch, tag or commit of ``tokenizer`` (linked to the model's ``encoder_revision``)."""

    validation_fraction: float | None = None
    """Carve this share (``0.1``) of every train split out for validation; ``test`` then scores the dev
    files, once, at the end. ``None``: validate on the dev files."""

    validation_seed: int | None = None
    """Seed of the validation carve-out; ``None``: ``seed``."""

    batch_mixing: str = "per_task"  # PER_TASK
    """``per_task`` (every batch holds one task's rows) or ``mixed`` (every row draws its own task with the
    same probabilities; needs one ``batch_size`` and the interleaved schedule, no ``round_robin``)."""

    sampling_temperature: float = DEFAULT_TEMPERATURE
    """``T`` of ``sampling="temperature"``: ``p_i ~ N_i^(1/T)``, finite and > 0 (1: proportional, 2: square
    root, the best of T5's temperature-scaled mixing; larger: nearer uniform)."""

    def __post_init__(self) -> None:
        check_batch_mixing(self.batch_mixing, self.schedule, self.sampling)
        if self.sampling not in sampling_rules():
            raise PalUserError(unknown_rule_message(self.sampling))
        check_temperature(self.sampling_temperature)
        for spec in resolve_tasks(self.tasks) if self.tasks else ():
            source_for(spec)  # an unknown format stops before any file is read
        check_on_bad_row(self.on_bad_row)
        if not 0 <= self.max_bad_rows_fraction <= 1:
            raise PalUserError(
                f"max_bad_rows_fraction is a share of the rows, from 0 to 1; got {self.max_bad_rows_fraction}."
            )
        if any(s not in SPLITS for s in self.predict_splits):
            raise PalUserError(f"predict_splits must be among {SPLITS}, got {list(self.predict_splits)}.")
        check_at_least("steps_per_epoch", self.steps_per_epoch, 1)
        check_task_schedule(self.schedule, self.task_order, self.steps_per_task, self.epochs_per_task)
        check_at_least("limit_examples", self.limit_examples, 1)
        if self.validation_fraction is not None and not 0 < self.validation_fraction < 1:
            raise PalUserError(
                f"validation_fraction is the share of each train split held out for validation, between 0 and 1 "
                f"(0.1), or null to validate on the dev files; got {self.validation_fraction}."
            )
        check_at_least("max_length", self.max_length, 8, optional=False)
        check_at_least("num_workers", self.num_workers, 0, optional=False)
        check_at_least("pad_to_multiple_of", self.pad_to_multiple_of, 1, optional=False)
        if self.task_multipliers and self.schedule == SEQUENTIAL:
            raise PalUserError(
                "task_multipliers scale the draws of the interleaved schedule; the sequential schedule trains "
                "its phases in order. Drop task_multipliers, or use --data.schedule interleaved."
            )

    def sampling_schedule(self, num_epochs: int) -> SamplingSchedule:
        """How the interleaved schedule draws tasks, annealed over ``num_epochs`` epochs."""
        multipliers = self.task_multipliers or None
        return SamplingSchedule(
            self.sampling,
            num_epochs=num_epochs,
            weights=self.task_weights,
            multipliers=multipliers,
            temperature=self.sampling_temperature,
        )

    def hparams(self) -> dict[str, Any]:
        """The options as plain values (checkpoints load with ``weights_only=True``), names staying names."""
        plain = {f.name: to_plain(getattr(self, f.name)) for f in fields(self)}
        for name in ("tokenizer", "data_dir", "cache_dir"):
            if isinstance(plain[name], os.PathLike):
                plain[name] = os.fspath(plain[name])
        plain["tasks"] = [task_to_hparam(s) for s in resolve_tasks(self.tasks)]
        plain["task_multipliers"] = plain["task_multipliers"] or None
        return plain


def check_at_least(name: str, value: int | None, low: int, optional: bool = True) -> None:
    """Raise a :class:`PalUserError` when ``value`` is below ``low`` (``None`` passes)."""
    if value is not None and value < low:
        raise PalUserError(f"{name} must be >= {low}{' or None' if optional else ''}, got {value}.")


def resolve_cache_dir(value: bool | str | os.PathLike[str] | None) -> Path | None:
    """The cache folder (``None``/``True``: the default), or ``None`` when off (``False``); strings spelling
    these values (``"false"``, ``"null"``) mean the same."""
    word = value.strip().lower() if isinstance(value, str) else value
    if word in (False, "false", "off", "no", "0"):
        return None
    if value is None or isinstance(value, bool) or word in ("", "none", "null", "true", "on", "yes", "1"):
        return pal_cache_dir()
    return Path(value).expanduser()
