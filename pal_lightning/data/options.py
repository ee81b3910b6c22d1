"""The options of :class:`~pal_lightning.data.MultiTaskDataModule`, documented once.

:class:`DataConfig` is the one place an option is declared and documented: the data module takes its
fields as keyword arguments (:func:`pal_lightning.core.config_fields.takes_fields`), so LightningCLI shows
each as ``--data.<field>`` with the docstring below it, and ``DataConfig.hparams`` is what the data
module saves as hyper-parameters. Checks that need only the options themselves run when a
``DataConfig`` is built; the ones that need the task list run in the data module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import DEFAULT_ENCODER
from pal_lightning.data.sampling.per_task import BATCH_MIXINGS, MIXED
from pal_lightning.data.sampling.phase_plan import SEQUENTIAL, check_task_schedule
from pal_lightning.data.sampling.schedules import SAMPLING_SCHEDULES, SamplingSchedule
from pal_lightning.data.sources.locate import SPLITS
from pal_lightning.data.sources.registry import source_for
from pal_lightning.data.sources.validate import BAD_ROW_POLICIES, DEFAULT_MAX_BAD_FRACTION
from pal_lightning.data.tokenize import default_cache_dir
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks, task_to_hparam

__all__ = ["DataConfig", "check_at_least", "check_batch_mixing", "resolve_cache_dir"]


@dataclass
class DataConfig:
    """The data module's options, as given (the data module resolves them against the tasks).

    Raises:
        PalUserError: for an unknown ``sampling``, ``on_bad_row``, ``schedule``, ``batch_mixing``, task format or
            predict split, a size below its minimum, options of one task schedule given to the other, or mixed batches
            with an option they have no form of.
    """

    tasks: Sequence[str | TaskSpec | dict[str, Any]] = ("sst", "qqp", "sts")
    """Task names, :class:`~pal_lightning.tasks.specs.TaskSpec` objects or dicts of TaskSpec fields."""

    tokenizer: str = DEFAULT_ENCODER
    """Encoder name or path whose (fast) tokenizer is used."""

    data_dir: str | os.PathLike[str] | None = None
    """Folder of the data files; default ``$PAL_DATA_DIR``, else ``./data``. When none of the three is
    there, the built-in tasks with a public Hugging Face copy read it through ``datasets``
    (``pal_lightning.data.sources.hf``; ``demo`` is the small set shipped with the package)."""

    batch_size: int | dict[str, int] = 32
    """Training batch size per rank, one int or a ``task -> int`` mapping."""

    eval_batch_size: int | dict[str, int] = 128
    """Validation/test/predict batch size per rank (int or mapping)."""

    max_length: int = 128
    """Longest tokenised sequence (special tokens included); longer ones are truncated."""

    pair_encoding: str | dict[str, str] = "cross"
    """``cross`` or ``siamese``, or a per-task mapping (see ``batch.resolve_pair_encoding``)."""

    sampling: str = "annealed"
    """``proportional`` | ``sqrt`` | ``uniform`` | ``round_robin`` | ``annealed`` | ``weights``."""

    task_weights: dict[str, float] | None = None
    """Per-task weights for ``sampling="weights"``."""

    task_multipliers: dict[str, float] | None = None
    """Per-task factors on the sampling probabilities of any random schedule, renormalised
    (``p'_i = m_i p_i / sum_j m_j p_j``; tasks not named keep 1), e.g. to draw a large auxiliary task
    less often: ``{sst2: 0.1}``. The same pure function of the epoch on every rank, so DDP ranks still
    draw the same task."""

    steps_per_epoch: int | None = None
    """Training steps per epoch per rank; ``None`` = one pass over the data
    (``sum_t ceil(N_t / (B_t * world_size))``)."""

    anneal_epochs: int | None = None
    """Annealing horizon ``E``; ``None`` = ``trainer.max_epochs`` (from ``max_steps`` when training is
    step-based; 1 without a trainer)."""

    on_bad_row: str = "skip"
    """``skip`` (drop and warn once per file) or ``error``."""

    max_bad_rows_fraction: float = DEFAULT_MAX_BAD_FRACTION
    """The share of a split's rows that ``skip`` may drop (0.05: 5 %); a split with more bad rows (and more
    than 2) stops the run with one line naming the count, the file and the first bad lines, since that many
    usually means a wrong setting (label_column, num_labels, label_names) rather than a few broken rows.
    ``1`` never stops; ``on_bad_row: error`` stops at the first bad row."""

    detokenize: bool = True
    """Undo PTB tokens for tasks that ask for it (SST)."""

    group_by_length: bool = False
    """Batch training examples of similar length together (less padding). With ``batch_mixing: mixed`` the
    rows' drawn tasks stay as drawn and each task's long examples go to the same steps."""

    pad_to_multiple_of: int = 1
    """Pad every batch's sequence length up to a multiple of this: 8 keeps a GPU's half-precision matmuls
    on tensor-core shapes (the GPU configs set it); 1 pads to the batch's longest example only, best on a
    CPU, where every padded position is computed. Padded positions are masked: the results do not change."""

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
    """Order of the sequential phases; default the task list. Any subset of the tasks, each at most
    once (tasks left out are never trained)."""

    steps_per_task: int | dict[str, int] | None = None
    """Training batches per phase (int, or ``task -> int`` with an optional ``default``)."""

    epochs_per_task: int | float | None = None
    """Passes over each task's training data per phase (``ceil(e * ceil(N_t / (B_t W)))`` batches); the
    default (1) when neither this nor ``steps_per_task`` is given."""

    tokenizer_revision: str | None = None
    """Hub branch, tag or commit of ``tokenizer`` (linked to the model's ``encoder_revision`` by the
    CLI)."""

    validation_fraction: float | None = None
    """Carve a validation split out of every task's train split: this share of its rows (``0.1``), drawn by
    ``validation_seed``; training uses the rest. The validation loop (and so the best checkpoint and early
    stopping) then scores that split and never reads the dev files, and ``test`` scores the dev files, once,
    at the end (``pal_lightning.data.stage_splits``). ``None``: validate on the dev files."""

    validation_seed: int | None = None
    """Seed of the validation carve-out; ``None``: ``seed``. The rows depend only on it, the task's name
    and its train split, so every rank, process and resumed run carves the same ones."""

    batch_mixing: str = "per_task"  # PER_TASK
    """How a training batch is made: ``per_task`` (every batch holds one task's rows; ``sampling`` draws the
    task of each step) or ``mixed`` (every row draws its own task with the same probabilities, annealing
    included; the loss is the mean over the batch's rows, whose expected gradient is the per-task
    schedule's ``sum_t p_t grad L_t``: ``docs/design.md`` §3, "Mixed batches"). ``mixed`` needs one
    ``batch_size`` for all tasks and the interleaved schedule, and has no ``round_robin`` form; its
    ``group_by_length`` keeps every batch's drawn task mix and deals each task's long examples to the same
    steps."""

    def __post_init__(self) -> None:
        check_batch_mixing(self.batch_mixing, self.schedule, self.sampling)
        if self.sampling not in SAMPLING_SCHEDULES:
            raise PalUserError(
                f"Unknown sampling {self.sampling!r}; choose one of {', '.join(SAMPLING_SCHEDULES)}."
            )
        for spec in resolve_tasks(self.tasks) if self.tasks else ():
            source_for(spec)  # an unknown format stops here, before any file is read
        if self.on_bad_row not in BAD_ROW_POLICIES:
            raise PalUserError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {self.on_bad_row!r}.")
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
        return SamplingSchedule(
            self.sampling,
            num_epochs=num_epochs,
            weights=self.task_weights,
            multipliers=self.task_multipliers or None,
        )

    def hparams(self) -> dict[str, Any]:
        """The options as plain values (lists, dicts, strings), so checkpoints load with
        ``weights_only=True``; the tasks as given (names stay names), not as read."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        plain.update(
            tasks=[task_to_hparam(s) for s in resolve_tasks(self.tasks)],
            tokenizer=str(self.tokenizer),
            data_dir=None if self.data_dir is None else str(self.data_dir),
            task_weights=None if self.task_weights is None else dict(self.task_weights),
            task_multipliers=dict(self.task_multipliers) if self.task_multipliers else None,
            cache_dir=self.cache_dir
            if self.cache_dir is None or isinstance(self.cache_dir, bool)
            else str(self.cache_dir),
            predict_splits=list(self.predict_splits),
            task_order=None if self.task_order is None else [str(t) for t in self.task_order],
            steps_per_task=dict(self.steps_per_task)
            if isinstance(self.steps_per_task, Mapping)
            else self.steps_per_task,
        )
        return plain


def check_batch_mixing(batch_mixing: str, schedule: str, sampling: str) -> None:
    """Refuse a ``batch_mixing`` value, or ``mixed`` with an option it has no form of.

    Raises:
        PalUserError: naming the option and the fix.
    """
    if batch_mixing not in BATCH_MIXINGS:
        raise PalUserError(
            f"Unknown batch_mixing {batch_mixing!r}; choose one of {', '.join(BATCH_MIXINGS)}."
        )
    if batch_mixing != MIXED:
        return
    if schedule == SEQUENTIAL:
        raise PalUserError(
            "batch_mixing 'mixed' draws every row's task from the interleaved sampling schedule; the sequential "
            "schedule trains one task after another. Use --data.batch_mixing per_task, or --data.schedule "
            "interleaved."
        )
    if sampling == "round_robin":
        raise PalUserError(
            "sampling 'round_robin' cycles through whole batches, one task each; with batch_mixing 'mixed' every "
            "row draws its task. Use --data.sampling uniform (the same frequencies), or --data.batch_mixing "
            "per_task."
        )


def check_at_least(name: str, value: int | None, low: int, optional: bool = True) -> None:
    """Raise a :class:`PalUserError` naming option ``name`` when ``value`` is below ``low``
    (``None`` passes: an option left unset)."""
    if value is not None and value < low:
        raise PalUserError(f"{name} must be >= {low}{' or None' if optional else ''}, got {value}.")


def resolve_cache_dir(value: bool | str | os.PathLike[str] | None) -> Path | None:
    """The cache folder, or ``None`` when caching is off.

    ``None``/``True`` pick :func:`~pal_lightning.data.tokenize.default_cache_dir`; ``False`` turns the
    cache off. Strings spelling these values (``"false"``, ``"null"``, as config parsers may hand
    them over) mean the same, so no folder named ``False`` is ever created.
    """
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("false", "off", "no", "0"):
            return None
        if word in ("", "none", "null", "true", "on", "yes", "1"):
            return default_cache_dir()
    if value is False:
        return None
    if value is None or value is True:
        return default_cache_dir()
    return Path(value).expanduser()
