"""GEM and A-GEM as a Lightning callback: memories filled from training batches, each update projected."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor, nn
from torch.profiler import record_function

from pal_lightning.core import contracts, distributed
from pal_lightning.core.batch import INDICES, TASK
from pal_lightning.core.errors import PalUserError
from pal_lightning.gem.gram import Grads, GramRows, Rows
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.projection import DEFAULT_EPS, step_coefficients
from pal_lightning.gem.rows import MemorySource, constraint_gradients

__all__ = ["CONSTRAINTS", "COUNTERS", "MODES", "PARAMETERS", "GEMCallback"]

MODES = ("gem", "agem")
CONSTRAINTS = ("others", "past")
PARAMETERS = ("shared", "all")
#: The callback's cumulative counts of projection steps (saved in checkpoints).
COUNTERS = ("fallbacks", "skipped_nonfinite", "violations", "projections")


class GEMCallback(pl.Callback):
    """Gradient Episodic Memory (or A-GEM) for multi-task and continual training.

    Fills one :class:`EpisodicMemory` per task from every training batch's ``batch["indices"]`` (under DDP
    those of all ranks, so every rank stores the same), and once per optimizer step (in
    ``on_before_optimizer_step``: gradients complete, averaged and unscaled, before clipping) projects the
    participating ``p.grad`` against the constraining tasks' memory gradients: those of ``"others"`` (every
    task with a memory, not current) or ``"past"`` (first trained before the current one). The rows come
    from :mod:`~pal_lightning.gem.rows`, ``M = [g, G][g, G]^T`` from :mod:`~pal_lightning.gem.gram` (rank
    0's, broadcast), the coefficients from :func:`~pal_lightning.gem.projection.step_coefficients`. A
    non-finite ``M`` leaves ``g`` alone.

    Logged each step: ``gem/constraints`` (rows), ``gem/violated`` (0/1), ``gem/min_cosine``,
    ``gem/projection_ms``, ``gem/fallbacks`` and ``gem/skipped_nonfinite`` (cumulative), and for GEM
    ``gem/violation`` (the residual ``max_k -<g~, g_k> / (|g_k| |g~|)``).

    Needs a data module with ``train_batch(task, indices)``, a module with ``batch_loss(batch)`` (and
    ``encoder.pretrained_parameters()`` for ``parameters="shared"``), batches with ``task`` and ``indices``.

    Args:
        memory_size: examples remembered per task.
        memory_batch_size: remembered examples per constraining task and rank for each memory gradient
            (A-GEM: in all, split over the constraining tasks).
        margin: GEM's ``memory_strength`` gamma (the dual's lower bound on ``v``).
        mode: ``"gem"`` (QP) or ``"agem"`` (one reference gradient).
        constraints: ``"others"`` (interleaved multi-task training) or ``"past"`` (continual training).
        parameters: ``"shared"`` (the pretrained encoder) or ``"all"`` trainable parameters.
        refresh_every: recompute memory gradients every ``k`` optimizer steps (in between, while the
            constraining set is unchanged, the last ones are reused, kept on the device; not checkpointed:
            a resume inside a window recomputes them, docs/gem.md).
        eps: relative ridge: ``eps * trace(GG^T) / t`` is added to the diagonal of ``GG^T``.
        seed: seed of the memories' reservoir draws and of the memory batches.
        batch_tasks: GEM's rows of all tasks from one backward (exact) instead of one per task, which holds
            fewer activations at once. Used where ``one_pass`` is off or does not apply.
        one_pass: the remembered examples of all constraining tasks as one mixed batch (the same rows up to
            float rounding; per task where the module cannot run it). ``None``: A-GEM always, GEM on CUDA
            only (its ``t`` backwards over the mixed batch are more arithmetic).
        flat_rows: the Gram matrix and the write-back over one float64 copy of the rows (a few kernels
            instead of one per tensor; ``t + 1`` copies of the parameters). ``None``: on CUDA only.
    """

    def __init__(
        self,
        memory_size: int = 256,
        memory_batch_size: int = 16,
        margin: float = 0.5,
        mode: str = "gem",
        constraints: str = "others",
        parameters: str = "shared",
        refresh_every: int = 1,
        eps: float = DEFAULT_EPS,
        seed: int = 0,
        batch_tasks: bool = True,
        flat_rows: bool | None = None,
        one_pass: bool | None = None,
    ) -> None:
        super().__init__()
        for name, value, choices in (
            ("mode", mode, MODES),
            ("constraints", constraints, CONSTRAINTS),
            ("parameters", parameters, PARAMETERS),
        ):
            if value not in choices:
                raise PalUserError(f"GEMCallback {name}={value!r} is not supported: choose one of {choices}.")
        for name, number, ok, need in (
            ("memory_batch_size", memory_batch_size, memory_batch_size >= 1, "be >= 1"),
            ("refresh_every", refresh_every, refresh_every >= 1, "be >= 1"),
            ("margin", margin, margin >= 0 and np.isfinite(margin), "be a finite number >= 0"),
            ("eps", eps, eps > 0 and np.isfinite(eps), "be a finite number > 0"),
        ):
            if not ok:
                raise PalUserError(f"GEMCallback {name} must {need}, got {number}.")
        self.memory_size = int(memory_size)
        self.memory_batch_size = int(memory_batch_size)
        self.margin = float(margin)
        self.mode = mode
        self.constraints = constraints
        self.parameters = parameters
        self.refresh_every = int(refresh_every)
        self.eps = float(eps)
        self.seed = int(seed)
        self.batch_tasks = bool(batch_tasks)
        self.flat_rows = None if flat_rows is None else bool(flat_rows)
        self.one_pass = None if one_pass is None else bool(one_pass)
        self.memory = EpisodicMemory(memory_size, seed)
        self.task_order: list[str] = []
        """Tasks in the order they were first trained on (what ``constraints="past"`` looks at)."""
        self.fallbacks = self.skipped_nonfinite = self.violations = self.projections = 0
        #: ``((tasks, is_gem), step, rows, GG^T)`` of the last rows, kept only when ``refresh_every > 1``
        self._cache: tuple[tuple[tuple[str, ...], bool], int, Rows, Tensor] | None = None
        self._gram = GramRows()
        self.last_stats: dict[str, float] = {}
        """What the last optimizer step logged."""
        self._window_step: int | None = None
        self._window_tasks: list[str] = []

    def state_dict(self) -> dict[str, Any]:
        counters = {key: getattr(self, key) for key in COUNTERS}
        return {"memory": self.memory.state_dict(), "task_order": list(self.task_order), **counters}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.memory.load_state_dict(state_dict["memory"])
        self.task_order = [str(t) for t in state_dict.get("task_order", [])]
        for key in COUNTERS:
            setattr(self, key, int(state_dict.get(key, 0)))
        self._cache = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # a subclass may switch the member off with `train_batch = None`: missing, for the contract
        if not contracts.satisfies(contracts.datamodule_of(trainer), contracts.TrainBatchSource):
            raise PalUserError(
                "GEMCallback needs a data module with train_batch(task, indices) to rebuild remembered "
                "examples (e.g. pal_lightning.MultiTaskDataModule): pass datamodule= to Trainer.fit."
            )
        if contracts.missing_members(pl_module, contracts.BatchLossModel):
            raise PalUserError(
                "GEMCallback needs a LightningModule with batch_loss(batch) (e.g. pal_lightning.MultiTaskModule)."
            )
        if not self.participating_parameters(pl_module):
            raise PalUserError(
                f"GEMCallback(parameters={self.parameters!r}) found no trainable parameters to project "
                "(frozen encoder?): use parameters='all' or unfreeze the encoder."
            )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        try:
            task, indices = str(batch[TASK]), [int(i) for i in batch[INDICES]]
        except (KeyError, TypeError):
            raise PalUserError(
                "GEMCallback needs training batches with 'task' and 'indices' (positions in the train "
                "split), as pal_lightning.MultiTaskDataModule makes them."
            ) from None
        if trainer.global_step != self._window_step:  # a new accumulation window
            self._window_step = trainer.global_step
            self._window_tasks = []
        if task not in self._window_tasks:
            self._window_tasks.append(task)
        if task not in self.task_order:
            self.task_order.append(task)
        # every rank stores the global batch, in rank order, so the memories are the same on all ranks
        self.memory.add(task, [i for part in distributed.gather_objects(indices) for i in part])

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        stats = self.project_step(
            pl_module,
            contracts.datamodule_of(trainer),
            step=trainer.global_step,
            current=self._window_tasks,
            forward_context=trainer.precision_plugin.forward_context,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
        )
        for key, value in stats.items():
            pl_module.log(key, value, on_step=True, on_epoch=False, batch_size=1)

    def participating_parameters(self, module: nn.Module) -> list[nn.Parameter]:
        """Trainable parameters GEM projects: all (``parameters="all"``), or what every task updates
        (``"shared"``: ``encoder.shared_parameters()``, else ``encoder.pretrained_parameters()``)."""
        if self.parameters == "all":
            return [p for p in module.parameters() if p.requires_grad]
        encoder = getattr(module, "encoder", None)  # None: neither attribute below, refused
        shared = getattr(encoder, "shared_parameters", None) or getattr(
            encoder, "pretrained_parameters", None
        )
        if not callable(shared):
            raise PalUserError(
                "GEMCallback(parameters='shared') needs module.encoder.pretrained_parameters() "
                "(pal_lightning.modeling.MultiTaskEncoder): use parameters='all' for another model."
            )
        return [p for _, p in shared() if p.requires_grad]

    def constraining_tasks(self, current: Sequence[str]) -> list[str]:
        """Tasks whose memories constrain a step on ``current`` (in first-seen order)."""
        with_memory = set(self.memory.tasks())
        if self.constraints == "others":
            return [t for t in self.task_order if t in with_memory and t not in current]
        positions = [self.task_order.index(t) for t in current if t in self.task_order]
        # a current task not seen yet (project_step called directly) comes after every known one
        last = max(positions, default=len(self.task_order))
        return [t for t in self.task_order[:last] if t in with_memory and t not in current]

    def _constraint_gradients(
        self, source: MemorySource, tasks: list[str], step: int, params: list[nn.Parameter]
    ) -> list[Grads]:
        """Rows of ``G``: one per task (GEM), or the single A-GEM reference gradient."""
        options = (self.memory_batch_size, params, self.batch_tasks, self.one_pass)
        return constraint_gradients(source, self.memory, self.mode, tasks, step, *options)

    def project_step(
        self,
        module: nn.Module,
        data: Any,
        step: int,
        current: Sequence[str],
        forward_context: Callable[[], Any] = contextlib.nullcontext,
        rank: int = 0,
        world_size: int = 1,
    ) -> dict[str, float]:
        """Project ``module``'s gradients in place for an optimizer step on the tasks ``current`` and return
        the step's ``gem/...`` statistics. Callable without a Trainer (``data``: anything with
        ``train_batch``); under DDP every rank calls it with the same arguments except ``rank``."""
        tasks = self.constraining_tasks(current)
        start = time.perf_counter()
        stats: dict[str, float] = {"gem/constraints": 0.0, "gem/violated": 0.0}
        if tasks:
            params = self.participating_parameters(module)
            source = MemorySource(module, data, forward_context, rank, world_size)
            rows, GGt = self._rows(source, tasks, step, params)
            self._project(params, rows, GGt, stats)
        stats["gem/projection_ms"] = (time.perf_counter() - start) * 1000.0
        stats["gem/fallbacks"] = float(self.fallbacks)
        stats["gem/skipped_nonfinite"] = float(self.skipped_nonfinite)
        self.last_stats = stats
        return stats

    def _rows(
        self, source: MemorySource, tasks: list[str], step: int, params: list[nn.Parameter]
    ) -> tuple[Rows, Tensor]:
        """The rows of ``G`` and ``GG^T``: the cached ones while fresh (``refresh_every``), else new."""
        key = (tuple(tasks), self.mode == "gem")
        cached = self._cache
        if cached is not None and cached[0] == key and step - cached[1] < self.refresh_every:
            return cached[2], cached[3]
        with record_function("gem/memory_gradients"):  # profiler labels (benchmarks/profile_step.py)
            grads = self._constraint_gradients(source, tasks, step, params)
        with record_function("gem/gram"):
            rows, GGt = self._gram.rows(grads, params, self.flat_rows)
        self._cache = (key, step, rows, GGt) if self.refresh_every > 1 else None
        return rows, GGt

    def _project(self, params: list[nn.Parameter], rows: Rows, GGt: Tensor, stats: dict[str, float]) -> None:
        """Decide from ``M = [g, G][g, G]^T`` (rank 0's) and write ``g~`` into ``p.grad``; a non-finite
        ``M`` leaves ``g`` alone (counted in ``skipped_nonfinite``)."""
        with record_function("gem/gram"):
            rows, M_device = self._gram.bordered(params, rows, GGt)
        # rank 0's M for every rank: one decision for all, even if their float sums differ
        M = distributed.broadcast(M_device).cpu().numpy()
        stats["gem/constraints"] = float(len(rows))
        if not np.all(np.isfinite(M)):
            self.skipped_nonfinite += 1
            self._cache = None  # the rows themselves may be what is not finite: computed afresh next step
            return
        result = step_coefficients(M, self.mode, margin=self.margin, eps=self.eps)
        self.fallbacks += result.fallbacks
        if self.mode == "gem":
            stats["gem/violation"] = float(result.violation or 0.0)
        stats["gem/violated"] = float(result.violated)
        if result.min_cosine is not None:
            stats["gem/min_cosine"] = float(result.min_cosine)
        self.violations += int(result.violated)
        if result.v is None:
            return
        self.projections += 1
        with record_function("gem/write_back"):
            self._gram.add(params, rows, result.v.tolist())
