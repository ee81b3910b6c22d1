"""The multi-task LightningDataModule.

Reads every task's files (validated row by row), tokenises them once with the
encoder's fast tokenizer (cached on disk), and serves

* training batches of one task per step, drawn by a sampling schedule
  (:mod:`pal_lightning.data.sampling`), the same task on every rank, resumable
  mid-epoch (:mod:`pal_lightning.data.samplers`);
* validation (dev), test (labelled test splits) and prediction (dev and
  test-student) batches covering every example exactly once across ranks.

An epoch is ``steps_per_epoch`` steps (default: one pass, ``sum_t ceil(N_t / (B_t W))``).

``schedule="sequential"`` trains the tasks one after another instead (continual learning):
phase ``i`` trains ``task_order[i]`` for ``steps_per_task`` training batches (or
``epochs_per_task`` passes over it, one pass being ``ceil(N_t / (B_t W))`` batches).
The whole continual run is one epoch by default (``steps_per_epoch`` = the sum of the
phases), so ``trainer.max_epochs: 1`` (or ``max_steps`` = that sum) sizes the
learning-rate schedule; :attr:`MultiTaskDataModule.phases` says where each phase starts and ends.
Tasks drawn more often than they have batches do not run dry: each task's examples
are used without replacement and reshuffled when used up (a new random permutation
per pass), continuing across epochs.

``batch_size`` and ``eval_batch_size`` are per rank (per device), like every
Lightning batch size. Lightning must not wrap the loaders in a
``DistributedSampler`` (this module shards by itself): :meth:`setup` switches the
Trainer's ``use_distributed_sampler`` off, or fails with a clear message when it
cannot.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from pal_lightning.batch import resolve_pair_encoding
from pal_lightning.data import hf_sources
from pal_lightning.data.dataset import BatchListDataset, MultiTaskDataset, ResumableDataLoader, passthrough
from pal_lightning.data.hf_sources import with_hub_copies
from pal_lightning.data.readers import (
    BAD_ROW_POLICIES,
    SPLITS,
    check_files_exist,
    rank_zero,
    read_split,
    resolve_data_dir,
    resolve_source,
    source_exists,
)
from pal_lightning.data.samplers import (
    MultiTaskBatchSampler,
    Phase,
    TaskBatch,
    default_steps_per_epoch,
    eval_batches,
    make_phases,
)
from pal_lightning.data.sampling import SCHEDULES, SamplingSchedule
from pal_lightning.data.tokenize import (
    TokenizedSplit,
    cache_key,
    cache_path,
    default_cache_dir,
    encode_split,
    file_fingerprint,
    load_cached,
    save_cached,
    tokenizer_fingerprint,
)
from pal_lightning.errors import PalUserError
from pal_lightning.hub import DEFAULT_ENCODER
from pal_lightning.tasks import TaskSpec, resolve_tasks, task_to_hparam

log = logging.getLogger(__name__)

#: Task schedules: ``interleaved`` (one drawn task per step, see ``sampling``) or ``sequential``.
TASK_SCHEDULES = ("interleaved", "sequential")


def _per_task(value: int | Mapping[str, int], tasks: Sequence[str], what: str) -> dict[str, int]:
    """Expand an int or a ``task -> int`` mapping (optionally with ``default``) to every task."""
    if isinstance(value, Mapping):
        default = value.get("default")
        unknown = [k for k in value if k != "default" and k not in tasks]
        missing = [t for t in tasks if t not in value and default is None]
        if unknown or missing:
            raise PalUserError(
                f"{what} (--data.{what}) per task must name the tasks {list(tasks)} (or give a 'default'); "
                f"unknown {unknown}, missing {missing}."
            )
        out = {t: int(value.get(t, default)) for t in tasks}  # type: ignore[arg-type]
    else:
        out = dict.fromkeys(tasks, int(value))
    bad = {t: b for t, b in out.items() if b < 1}
    if bad:
        # name the option as the user wrote it, and the value they gave (not the per-task expansion)
        given = bad if isinstance(value, Mapping) else value
        raise PalUserError(
            f"{what} (--data.{what}) must be at least 1, got {given!r}. Give a positive number."
        )
    return out


def _resolve_cache_dir(value: bool | str | os.PathLike[str] | None) -> Path | None:
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


class MultiTaskDataModule(pl.LightningDataModule):
    """Data for multi-task training: readers, validation, tokenisation cache, task sampling.

    Args:
        tasks: task names, :class:`~pal_lightning.tasks.TaskSpec` objects or dicts of TaskSpec fields.
        tokenizer: encoder name or path whose (fast) tokenizer is used.
        data_dir: folder of the data files; default ``$PAL_DATA_DIR``, else ``./data``. When none of the
            three is there, the built-in tasks with a public Hugging Face copy read it through ``datasets``
            (``pal_lightning.data.hf_sources``; ``demo`` is the small set shipped with the package).
        batch_size: training batch size per rank, one int or a ``task -> int`` mapping.
        eval_batch_size: validation/test/predict batch size per rank (int or mapping).
        max_length: longest tokenised sequence (special tokens included); longer ones are truncated.
        pair_encoding: ``cross`` or ``siamese``, or a per-task mapping (see ``batch.resolve_pair_encoding``).
        sampling: ``proportional`` | ``sqrt`` | ``uniform`` | ``round_robin`` | ``annealed`` | ``weights``.
        task_weights: per-task weights for ``sampling="weights"``.
        task_multipliers: per-task factors on the sampling probabilities of any random schedule,
            renormalised (``p'_i = m_i p_i / sum_j m_j p_j``; tasks not named keep 1), e.g. to draw a
            large auxiliary task less often: ``{sst2: 0.1}``. The same pure function of the epoch on
            every rank, so DDP ranks still draw the same task.
        steps_per_epoch: training steps per epoch per rank; ``None`` = one pass over the data
            (``sum_t ceil(N_t / (B_t * world_size))``).
        anneal_epochs: annealing horizon ``E``; ``None`` = ``trainer.max_epochs`` (from ``max_steps`` when
            training is step-based; 1 without a trainer).
        on_bad_row: ``skip`` (drop and warn once per file) or ``error``.
        detokenize: undo PTB tokens for tasks that ask for it (SST).
        group_by_length: batch training examples of similar length together (less padding).
        cache_dir: tokenisation cache folder; ``None`` = ``$PAL_CACHE_DIR`` or ``~/.cache/pal_lightning``;
            ``False`` disables the cache.
        num_workers: DataLoader worker processes.
        seed: seed of the task and example order (with the epoch).
        predict_splits: splits served by ``predict_dataloader`` (``dev`` and/or ``test``).
        limit_examples: keep only the first N examples of every split of every task (quick runs).
        schedule: ``interleaved`` (every step draws a task by ``sampling``) or ``sequential`` (continual
            learning: the tasks of ``task_order`` one after another; ``sampling`` is not used).
        task_order: order of the sequential phases; default the task list. Any subset of the tasks, each
            at most once (tasks left out are never trained).
        steps_per_task: training batches per phase (int, or ``task -> int`` with an optional ``default``).
        epochs_per_task: passes over each task's training data per phase (``ceil(e * ceil(N_t / (B_t W)))``
            batches); the default (1) when neither this nor ``steps_per_task`` is given.
        tokenizer_revision: hub branch, tag or commit of ``tokenizer`` (linked to the model's
            ``encoder_revision`` by the CLI).
    """

    def __init__(
        self,
        tasks: Sequence[str | TaskSpec | dict[str, Any]] = ("sst", "qqp", "sts"),
        tokenizer: str = DEFAULT_ENCODER,
        data_dir: str | os.PathLike[str] | None = None,
        batch_size: int | dict[str, int] = 32,
        eval_batch_size: int | dict[str, int] = 128,
        max_length: int = 128,
        pair_encoding: str | dict[str, str] = "cross",
        sampling: str = "annealed",
        task_weights: dict[str, float] | None = None,
        task_multipliers: dict[str, float] | None = None,
        steps_per_epoch: int | None = None,
        anneal_epochs: int | None = None,
        on_bad_row: str = "skip",
        detokenize: bool = True,
        group_by_length: bool = False,
        cache_dir: bool | str | os.PathLike[str] | None = None,
        num_workers: int = 0,
        seed: int = 42,
        predict_splits: Sequence[str] = ("dev", "test"),
        limit_examples: int | None = None,
        schedule: str = "interleaved",
        task_order: Sequence[str] | None = None,
        steps_per_task: int | dict[str, int] | None = None,
        epochs_per_task: int | float | None = None,
        tokenizer_revision: str | None = None,
    ) -> None:
        super().__init__()
        self.task_specs: list[TaskSpec] = resolve_tasks(tasks)
        self.task_names: list[str] = [t.name for t in self.task_specs]
        if sampling not in SCHEDULES:
            raise PalUserError(f"Unknown sampling {sampling!r}; choose one of {', '.join(SCHEDULES)}.")
        if on_bad_row not in BAD_ROW_POLICIES:
            raise PalUserError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}.")
        bad_splits = [s for s in predict_splits if s not in SPLITS]
        if bad_splits:
            raise PalUserError(f"predict_splits must be among {SPLITS}, got {list(predict_splits)}.")
        if steps_per_epoch is not None and steps_per_epoch < 1:
            raise PalUserError(f"steps_per_epoch must be >= 1 or None, got {steps_per_epoch}.")
        self.task_schedule = schedule
        self.task_order, self.steps_per_task = self._check_continual(
            schedule, task_order, steps_per_task, epochs_per_task
        )
        self.epochs_per_task = (
            float(epochs_per_task)
            if epochs_per_task is not None
            else (1.0 if schedule == "sequential" and steps_per_task is None else None)
        )
        if limit_examples is not None and limit_examples < 1:
            raise PalUserError(f"limit_examples must be >= 1 or None, got {limit_examples}.")
        if max_length < 8:
            raise PalUserError(f"max_length must be >= 8, got {max_length}.")
        self.tokenizer_name = str(tokenizer)
        self.tokenizer_revision = tokenizer_revision
        self.data_dir = resolve_data_dir(data_dir)
        # the tasks as given (saved in the hyper-parameters) and as read: without a data folder, the
        # built-in tasks that have a public Hugging Face copy read it (pal_lightning.data.hf_sources)
        given_specs = self.task_specs
        self.task_specs = with_hub_copies(given_specs, data_dir)
        self.batch_sizes = _per_task(batch_size, self.task_names, "batch_size")
        self.eval_batch_sizes = _per_task(eval_batch_size, self.task_names, "eval_batch_size")
        self.max_length = int(max_length)
        self.pair_encodings = {t: resolve_pair_encoding(pair_encoding, t) for t in self.task_names}
        self.sampling = sampling
        self.task_weights = dict(task_weights) if task_weights is not None else None
        self.task_multipliers = dict(task_multipliers) if task_multipliers else None
        if self.task_multipliers and schedule == "sequential":
            raise PalUserError(
                "task_multipliers scale the draws of the interleaved schedule; the sequential schedule trains "
                "its phases in order. Drop task_multipliers, or use --data.schedule interleaved."
            )
        self.steps_per_epoch_arg = steps_per_epoch
        self.anneal_epochs = anneal_epochs
        self.on_bad_row = on_bad_row
        self.detokenize = detokenize
        self.group_by_length = group_by_length
        self.cache_dir: Path | None = _resolve_cache_dir(cache_dir)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        self.predict_splits = tuple(predict_splits)
        self.limit_examples = limit_examples
        # Validate the sampling options now, not at fit time.
        SamplingSchedule(
            sampling,
            num_epochs=anneal_epochs or 1,
            weights=self.task_weights,
            multipliers=self.task_multipliers,
        ).probabilities(dict.fromkeys(self.task_names, 1), 0)

        # Plain values only, so checkpoints load with weights_only=True.
        self.save_hyperparameters(
            {
                "tasks": [task_to_hparam(s) for s in given_specs],
                "tokenizer": self.tokenizer_name,
                "tokenizer_revision": tokenizer_revision,
                "data_dir": None if data_dir is None else str(data_dir),
                "batch_size": batch_size,
                "eval_batch_size": eval_batch_size,
                "max_length": max_length,
                "pair_encoding": pair_encoding,
                "sampling": sampling,
                "task_weights": self.task_weights,
                "task_multipliers": self.task_multipliers,
                "steps_per_epoch": steps_per_epoch,
                "anneal_epochs": anneal_epochs,
                "on_bad_row": on_bad_row,
                "detokenize": detokenize,
                "group_by_length": group_by_length,
                "cache_dir": cache_dir
                if cache_dir is None or isinstance(cache_dir, bool)
                else str(cache_dir),
                "num_workers": num_workers,
                "seed": seed,
                "predict_splits": list(predict_splits),
                "limit_examples": limit_examples,
                "schedule": schedule,
                "task_order": None if task_order is None else [str(t) for t in task_order],
                "steps_per_task": dict(steps_per_task)
                if isinstance(steps_per_task, Mapping)
                else steps_per_task,
                "epochs_per_task": epochs_per_task,
            }
        )

        self._tokenizer: Any = None
        self._tokenizer_fp: str | None = None
        self._loaded: dict[tuple[str, str], TokenizedSplit] = {}
        # splits whose bad rows were already reported (prepare_data reads, setup reloads from the cache)
        self._bad_rows_reported: set[tuple[str, str]] = set()
        #: Training examples per task (after validation and ``limit_examples``), set by ``setup("fit")``.
        self.train_sizes: dict[str, int] = {}
        self.schedule: SamplingSchedule | None = None
        self.train_batch_sampler: MultiTaskBatchSampler | None = None
        self._pending_sampler_state: dict[str, Any] | None = None

    def _check_continual(
        self,
        schedule: str,
        task_order: Sequence[str] | None,
        steps_per_task: int | Mapping[str, int] | None,
        epochs_per_task: float | None,
    ) -> tuple[list[str], dict[str, int] | None]:
        """Validate the sequential-schedule options; returns the task order and steps per task."""
        if schedule not in TASK_SCHEDULES:
            raise PalUserError(f"Unknown schedule {schedule!r}; choose one of {', '.join(TASK_SCHEDULES)}.")
        if schedule != "sequential":
            given = [
                name
                for name, value in (
                    ("task_order", task_order),
                    ("steps_per_task", steps_per_task),
                    ("epochs_per_task", epochs_per_task),
                )
                if value is not None
            ]
            if given:
                raise PalUserError(
                    f"{', '.join(given)} only apply to schedule='sequential' (--data.schedule sequential); "
                    f"the schedule is {schedule!r}."
                )
            return [], None
        if isinstance(task_order, str):
            task_order = [task_order]
        order = list(task_order) if task_order is not None else list(self.task_names)
        unknown = [t for t in order if t not in self.task_names]
        repeated = sorted({t for t in order if order.count(t) > 1})
        if not order or unknown or repeated:
            raise PalUserError(
                f"task_order must list some of the tasks {self.task_names}, each at most once; got {order} "
                f"(unknown {unknown}, repeated {repeated})."
            )
        if steps_per_task is not None and epochs_per_task is not None:
            raise PalUserError("Give steps_per_task or epochs_per_task for schedule='sequential', not both.")
        if epochs_per_task is not None and not (
            math.isfinite(float(epochs_per_task)) and epochs_per_task > 0
        ):
            raise PalUserError(f"epochs_per_task must be > 0, got {epochs_per_task}.")
        steps = _per_task(steps_per_task, order, "steps_per_task") if steps_per_task is not None else None
        return order, steps

    # ------------------------------------------------------------------ tokenizer and loading

    @property
    def tokenizer(self) -> Any:
        """The encoder's fast tokenizer (loaded on first use, offline-safe via ``resolve_encoder``)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            from pal_lightning.hub import resolve_encoder

            tok = AutoTokenizer.from_pretrained(resolve_encoder(self.tokenizer_name, self.tokenizer_revision))
            if not getattr(tok, "is_fast", False):
                raise PalUserError(
                    f"The tokenizer of {self.tokenizer_name!r} has no fast (Rust) version; pal-lightning needs "
                    "one. Save the encoder with a tokenizer.json, or pick another encoder."
                )
            self._tokenizer = tok
        return self._tokenizer

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else 0

    def _spec(self, task: str) -> TaskSpec:
        return self.task_specs[self.task_names.index(task)]

    def _settings(self, spec: TaskSpec, split: str) -> dict[str, Any]:
        fields = ("format", "kind", "num_labels", "label_range", "text_columns", "label_column", "id_column")
        fields += ("hf_path", "hf_name", "ptb_detokenize", "unquote")
        out: dict[str, Any] = {f: getattr(spec, f, None) for f in fields}
        out["kind"] = spec.kind.value
        out.update(
            split=split,
            max_length=self.max_length,
            pair_encoding=self.pair_encodings[spec.name] if spec.is_pair else None,
            detokenize=self.detokenize,
            on_bad_row=self.on_bad_row,
        )
        return out

    def _source_fingerprint(self, spec: TaskSpec, split: str) -> str:
        src = resolve_source(spec, split, self.data_dir)
        assert src is not None
        if src.is_file:
            return "file:" + file_fingerprint(src.location)
        assert src.hf_split is not None
        return "hf:" + hf_sources.fingerprint(spec, src.hf_split, self.data_dir, split)

    def load_split(self, task: str, split: str, report: bool = True) -> TokenizedSplit:
        """Read, validate and tokenise one split (from the cache when possible); logs row counts.

        ``limit_examples`` is applied to the result. ``report=False`` (``prepare_data`` filling the
        cache) does not repeat the bad-row warning of a split read from the cache: it is given once,
        when the split is read, or when a command first uses it.
        """
        key2 = (task, split)
        if key2 in self._loaded:
            return self._loaded[key2]
        spec = self._spec(task)
        data: TokenizedSplit | None = None
        path = None
        if self.cache_dir is not None:
            if self._tokenizer_fp is None:
                self._tokenizer_fp = tokenizer_fingerprint(self.tokenizer)
            key = cache_key(
                self._source_fingerprint(spec, split), self._tokenizer_fp, self._settings(spec, split)
            )
            path = cache_path(self.cache_dir, task, split, key)
            data = load_cached(path)
        cached = data is not None
        if data is None:
            raw = read_split(spec, split, self.data_dir, self.on_bad_row, self.detokenize)
            self._bad_rows_reported.add(key2)  # read_split warned about its bad rows
            data = encode_split(raw, self.tokenizer, self.max_length, self.pair_encodings[task])
            if path is not None:
                try:
                    save_cached(path, data)
                except OSError as err:  # a read-only cache folder slows runs down but is not fatal
                    log.warning("Could not write the tokenisation cache %s (%s).", path, err)
        elif data.skipped and report and rank_zero() and key2 not in self._bad_rows_reported:
            self._bad_rows_reported.add(key2)
            log.warning(
                "%s: %d bad row(s) of %d were skipped (task %s, %s; first lines %s).",
                Path(data.source).name,
                data.skipped,
                data.rows,
                task,
                split,
                ", ".join(str(line) for line, _ in data.bad_rows[:5]),
            )
        if rank_zero():
            log.info(
                "%s %s: %d rows loaded, %d skipped, of %d in %s%s",
                task,
                split,
                len(data),
                data.skipped,
                data.rows,
                data.source,
                " (tokenised, from cache)" if cached else "",
            )
        data = data.head(self.limit_examples)
        self._loaded[key2] = data
        return data

    def _existing(self, spec: TaskSpec, split: str) -> bool:
        return source_exists(spec, resolve_source(spec, split, self.data_dir), self.data_dir)

    # ------------------------------------------------------------------ Lightning hooks

    def prepare_data(self) -> None:
        """Tokenise and cache every split once (Lightning calls this on one process per node)."""
        if self.cache_dir is None:
            return
        check_files_exist([(s, sp) for s in self.task_specs for sp in ("train", "dev")], self.data_dir)
        for spec in self.task_specs:
            for split in SPLITS:
                if self._existing(spec, split):
                    self.load_split(spec.name, split, report=False)
        # Other processes read the cache files; keep nothing tokenised in memory twice.
        self._loaded.clear()

    def _world(self) -> tuple[int, int]:
        trainer = self.trainer
        if trainer is not None:
            return int(trainer.world_size), int(trainer.global_rank)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size(), torch.distributed.get_rank()
        return 1, 0

    def _disable_distributed_sampler(self) -> None:
        trainer = self.trainer
        if trainer is None:
            return
        connector = getattr(trainer, "_accelerator_connector", None)
        if connector is not None and hasattr(connector, "use_distributed_sampler"):
            if connector.use_distributed_sampler:
                # Lightning would wrap our loaders in a DistributedSampler: duplicated eval examples
                # and a broken task schedule. Our samplers shard by rank themselves.
                connector.use_distributed_sampler = False
                if rank_zero():
                    log.info(
                        "MultiTaskDataModule shards data itself: set Trainer(use_distributed_sampler=False)."
                    )
        elif trainer.world_size > 1:
            raise PalUserError(
                "MultiTaskDataModule needs Trainer(use_distributed_sampler=False) under DDP; pass it to the "
                "Trainer (--trainer.use_distributed_sampler false)."
            )

    def setup(self, stage: str | None = None) -> None:
        """Load the splits the stage needs and build the training schedule (``fit``)."""
        self._disable_distributed_sampler()
        if stage in ("fit", None):
            check_files_exist([(s, sp) for s in self.task_specs for sp in ("train", "dev")], self.data_dir)
            train = {t: self.load_split(t, "train") for t in self.task_names}
            for t in self.task_names:
                self.load_split(t, "dev")
            self.train_sizes = {t: len(d) for t, d in train.items()}
            empty = [t for t, n in self.train_sizes.items() if n == 0]
            if empty:
                raise PalUserError(f"Tasks {empty} have no valid training rows; check their train files.")
            self.schedule = SamplingSchedule(
                self.sampling,
                num_epochs=self._resolve_anneal_epochs(),
                weights=self.task_weights,
                multipliers=self.task_multipliers,
            )
        elif stage == "validate":
            check_files_exist([(s, "dev") for s in self.task_specs], self.data_dir)
            for t in self.task_names:
                self.load_split(t, "dev")
        elif stage == "test":
            check_files_exist([(s, "test") for s in self.task_specs if "test" in s.files], self.data_dir)
        elif stage == "predict":
            check_files_exist([(s, sp) for s in self.task_specs for sp in self.predict_splits], self.data_dir)

    def _resolve_anneal_epochs(self) -> int:
        if self.anneal_epochs is not None:
            return int(self.anneal_epochs)
        trainer = self.trainer
        if trainer is None:
            return 1
        max_epochs = trainer.max_epochs
        if max_epochs is not None and max_epochs > 0:
            return int(max_epochs)
        if trainer.max_steps and trainer.max_steps > 0:
            return max(1, math.ceil(trainer.max_steps / self._compute_steps_per_epoch()))
        return 1

    def _compute_steps_per_epoch(self) -> int:
        if self.steps_per_epoch_arg is not None:
            return int(self.steps_per_epoch_arg)
        if self.task_schedule == "sequential":
            return self.phases[-1].end
        world, _ = self._world()
        return default_steps_per_epoch(self.train_sizes, self.batch_sizes, world)

    def _phase_plan(self) -> list[tuple[str, int]]:
        """``(task, training batches)`` of every sequential phase, in order (empty when interleaved)."""
        if self.task_schedule != "sequential":
            return []
        if self.steps_per_task is not None:
            return [(t, self.steps_per_task[t]) for t in self.task_order]
        if not self.train_sizes:
            raise RuntimeError("The phases of epochs_per_task are known after setup('fit') (they need N_t).")
        assert self.epochs_per_task is not None
        world, _ = self._world()
        # One pass over task t is ceil(N_t / (B_t W)) global batches, as for steps_per_epoch.
        return [
            (
                t,
                max(
                    1,
                    math.ceil(
                        self.epochs_per_task * math.ceil(self.train_sizes[t] / (self.batch_sizes[t] * world))
                        - 1e-9
                    ),
                ),
            )
            for t in self.task_order
        ]

    @property
    def phases(self) -> list[Phase]:
        """The phases of a sequential schedule: ``Phase(task, start, end)`` in training batches.

        Phase ``i`` trains ``task_order[i]`` on global training batches ``start .. end - 1`` (global
        batch = ``epoch * steps_per_epoch + batch_idx``, counted per rank, not in optimizer steps).
        Empty for the interleaved schedule. With ``epochs_per_task`` valid after ``setup("fit")``.
        """
        return make_phases(self._phase_plan())

    @property
    def steps_per_epoch(self) -> int:
        """Training batches per epoch per rank (valid after ``setup("fit")``)."""
        if not self.train_sizes:
            raise RuntimeError(
                "steps_per_epoch is known after setup('fit') (the training data must be loaded)."
            )
        return self._compute_steps_per_epoch()

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        """Sampling probability of each task at 0-based ``epoch`` (valid after ``setup("fit")``)."""
        if self.schedule is None or not self.train_sizes:
            raise RuntimeError("task_probabilities_for_epoch needs setup('fit') first.")
        return self.schedule.probabilities(self.train_sizes, epoch)

    # ------------------------------------------------------------------ loaders

    def _loader_kwargs(self) -> dict[str, Any]:
        return {
            "num_workers": self.num_workers,
            "collate_fn": passthrough,
            "pin_memory": torch.cuda.is_available(),
            "persistent_workers": self.num_workers > 0,
            # Each new DataLoader iterator draws its workers' base seed from this generator; without
            # one it draws from the global torch RNG, so every validation or epoch start would shift
            # the dropout stream and a resumed run could not repeat the uninterrupted one exactly.
            "generator": torch.Generator().manual_seed(self.seed),
        }

    def train_dataloader(self) -> ResumableDataLoader:
        """One task per step, same task on all ranks; resumable (see ``samplers``)."""
        if self.schedule is None:
            self.setup("fit")
        assert self.schedule is not None
        world, rank = self._world()
        splits = {(t, "train"): self.load_split(t, "train") for t in self.task_names}
        lengths = {t: splits[(t, "train")].lengths for t in self.task_names} if self.group_by_length else None
        sampler = MultiTaskBatchSampler(
            self.train_sizes,
            self.batch_sizes,
            self.schedule,
            steps_per_epoch=self.steps_per_epoch_arg,
            num_replicas=world,
            rank=rank,
            seed=self.seed,
            lengths=lengths,
            phases=self._phase_plan() or None,
        )
        sampler.position_fn = self._fit_position
        if self._pending_sampler_state is not None:
            sampler.load_state_dict(self._pending_sampler_state)
            self._pending_sampler_state = None
        elif self.trainer is not None:
            # A loader rebuilt mid-training (reload_dataloaders_every_n_epochs) may be iterated
            # before Lightning calls set_epoch: start it at the right epoch.
            sampler.set_epoch(self.trainer.current_epoch)
        self.train_batch_sampler = sampler
        dataset = MultiTaskDataset(splits, self.pad_token_id)
        return ResumableDataLoader(dataset, batch_sampler=sampler, **self._loader_kwargs())

    def _eval_loader(
        self, pairs: Sequence[tuple[str, str]], limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        world, rank = self._world()
        splits = {p: self.load_split(*p).head(limit_examples) for p in pairs}
        batches = eval_batches(
            {p: len(d) for p, d in splits.items()},
            self.eval_batch_sizes,
            num_replicas=world,
            rank=rank,
            lengths={p: d.lengths for p, d in splits.items()},
        )
        dataset = BatchListDataset(MultiTaskDataset(splits, self.pad_token_id), batches)
        return torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False, **self._loader_kwargs())

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        """Every dev example exactly once across ranks, one task per batch."""
        return self._eval_loader([(t, "dev") for t in self.task_names])

    def eval_dataloader(
        self, split: str = "dev", tasks: Sequence[str] | None = None, limit_examples: int | None = None
    ) -> torch.utils.data.DataLoader:
        """Like :meth:`val_dataloader` for any labelled ``split`` and some ``tasks`` (default all),
        each keeping its first ``limit_examples`` examples (all when ``None``): what the continual
        evaluation uses to score every task cheaply after each phase.
        """
        names = list(tasks) if tasks is not None else list(self.task_names)
        unknown = [t for t in names if t not in self.task_names]
        if unknown:
            raise PalUserError(f"Unknown tasks {unknown}; this data module serves {self.task_names}.")
        if limit_examples is not None and limit_examples < 1:
            raise PalUserError(f"limit_examples must be >= 1 or None, got {limit_examples}.")
        return self._eval_loader([(t, split) for t in names], limit_examples)

    def test_dataloader(self) -> torch.utils.data.DataLoader:
        """The labelled ``test`` splits (unlabelled test-student files are for ``predict``).

        Raises:
            PalUserError: when no task has a labelled test split.
        """
        pairs = []
        for spec in self.task_specs:
            if "test" in spec.files or spec.format == "hf":
                if self._existing(spec, "test") and self.load_split(spec.name, "test").labels is not None:
                    pairs.append((spec.name, "test"))
        if not pairs:
            raise PalUserError(
                "No task has a labelled test split (CS224N test-student files carry no labels). Use "
                "`validate` for dev scores, or `predict` to write test predictions."
            )
        return self._eval_loader(pairs)

    def predict_dataloader(self) -> torch.utils.data.DataLoader:
        """The ``predict_splits`` (default dev and test) of every task, each example once across ranks."""
        return self._eval_loader([(t, s) for t in self.task_names for s in self.predict_splits])

    def train_batch(self, task: str, indices: Sequence[int]) -> dict[str, Any]:
        """The padded training batch of ``task``'s examples at ``indices`` (positions in its train split).

        What GEM's episodic memories use to rebuild remembered examples; the batch follows
        :mod:`pal_lightning.batch` and lives on the CPU.
        """
        if task not in self.task_names:
            raise PalUserError(f"Unknown task {task!r}; this data module serves {self.task_names}.")
        split = self.load_split(task, "train")
        dataset = MultiTaskDataset({(task, "train"): split}, self.pad_token_id)
        return dataset.__getitems__(TaskBatch(task, "train", tuple(int(i) for i in indices)))

    def example_ids(self, task: str, split: str) -> list[str]:
        """Ids of a loaded split in file order (the prediction writer writes rows in this order)."""
        return self.load_split(task, split).ids.tolist()

    # ------------------------------------------------------------------ resume

    def _fit_position(self) -> int | None:
        """Training batches of the current epoch consumed by the Trainer (it prefetches ahead)."""
        trainer = self.trainer
        if trainer is None:
            return None
        try:
            if trainer.state.fn != "fit":
                return None
            return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        except AttributeError:  # another Lightning layout: fall back to the sampler's own count
            return None

    def state_dict(self) -> dict[str, Any]:
        """The training sampler's position (also saved through the train loader)."""
        if self.train_batch_sampler is None:
            return {}
        return {"train_sampler": self.train_batch_sampler.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the sampler position (applied when the train loader is built, or now if it exists)."""
        state = state_dict.get("train_sampler")
        if not state:
            return
        if self.train_batch_sampler is not None:
            self.train_batch_sampler.load_state_dict(state)
        else:
            self._pending_sampler_state = dict(state)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tasks={self.task_names}, data_dir={str(self.data_dir)!r}, "
            f"sampling={self.sampling!r}, schedule={self.task_schedule!r}, batch_size={self.batch_sizes})"
        )
