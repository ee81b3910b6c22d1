"""GEM and A-GEM as a Lightning callback: memories filled from training batches, each update projected."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn

from pal_lightning.core import distributed
from pal_lightning.core.batch import INDICES, TASK
from pal_lightning.core.contracts import (
    BatchLossModel,
    TrainBatchSource,
    datamodule_of,
    missing_members,
    satisfies,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.gem.gradients import MemorySource, constraint_gradients
from pal_lightning.gem.gram import Grads
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.projection import DEFAULT_EPS
from pal_lightning.gem.step_projector import StepProjector, wants_flat_rows

__all__ = ["CONSTRAINTS", "MODES", "PARAMETERS", "GEMCallback", "participating_parameters"]

MODES = ("gem", "agem")
CONSTRAINTS = ("others", "past")
PARAMETERS = ("shared", "all")


def check_options(
    memory_batch_size: int,
    margin: float,
    mode: str,
    constraints: str,
    parameters: str,
    refresh_every: int,
    eps: float,
) -> None:
    """Raise :class:`PalUserError` naming the first bad :class:`GEMCallback` option and its valid values."""
    for name, value, choices in (
        ("mode", mode, MODES),
        ("constraints", constraints, CONSTRAINTS),
        ("parameters", parameters, PARAMETERS),
    ):
        if value not in choices:
            raise PalUserError(f"GEMCallback {name}={value!r} is not supported: choose one of {choices}.")
    if memory_batch_size < 1:
        raise PalUserError(f"GEMCallback memory_batch_size must be >= 1, got {memory_batch_size}.")
    if refresh_every < 1:
        raise PalUserError(f"GEMCallback refresh_every must be >= 1, got {refresh_every}.")
    if not (margin >= 0 and np.isfinite(margin)):
        raise PalUserError(f"GEMCallback margin must be a finite number >= 0, got {margin}.")
    if not (eps > 0 and np.isfinite(eps)):
        raise PalUserError(f"GEMCallback eps must be a finite number > 0, got {eps}.")


def participating_parameters(module: nn.Module, parameters: str) -> list[nn.Parameter]:
    """Trainable parameters GEM projects: the shared encoder's (``"shared"``) or all (``"all"``).

    "Shared" means what every task updates: with a layer-sharing regime the embeddings and the S
    layers (``encoder.shared_parameters()``; F layers do not require gradients, and a task's own
    copies of I layers cannot conflict with another task's, like adapters and heads).

    Raises:
        PalUserError: for ``"shared"`` when the module has no ``encoder.pretrained_parameters()``.
    """
    if parameters == "all":
        return [p for p in module.parameters() if p.requires_grad]
    encoder = getattr(module, "encoder", None)
    shared = getattr(encoder, "shared_parameters", None) or getattr(encoder, "pretrained_parameters", None)
    if encoder is None or not callable(shared):
        raise PalUserError(
            "GEMCallback(parameters='shared') needs module.encoder.pretrained_parameters() "
            "(pal_lightning.modeling.MultiTaskBert): use parameters='all' for another model."
        )
    return [p for _, p in shared() if p.requires_grad]


def _counter(name: str) -> Any:
    """The :class:`StepProjector` counter ``name`` as an attribute of the callback (read and set)."""
    return property(
        lambda cb: getattr(cb.projector, name),
        lambda cb, value: setattr(cb.projector, name, value),
        doc=f"Cumulative ``{name}`` of the projection steps (:class:`StepProjector`; saved in checkpoints).",
    )


class GEMCallback(pl.Callback):
    """Gradient Episodic Memory (or A-GEM) for multi-task and continual training.

    Memories: one :class:`EpisodicMemory` reservoir per task, filled in ``on_train_batch_start``
    from every training batch's ``batch["indices"]`` (under DDP the indices of all ranks are
    gathered first, in rank order, so every rank stores the same global examples). The window's
    current tasks (those of the micro-batches since the last optimizer step) are recorded there
    too: ``on_before_optimizer_step`` runs inside the last micro-batch, before any batch-end hook.

    Projection: in ``on_before_optimizer_step`` (gradients complete, DDP-averaged and unscaled,
    before clipping), once per accumulation window:

    1. constraining tasks ``K``: ``"others"`` = every task with a memory that is not current;
       ``"past"`` = tasks first trained before the (latest-seen) current one, not current;
    2. memory gradients ``g_k`` (``k`` in ``K``) with ``torch.autograd.grad`` of
       ``pl_module.batch_loss`` on the unwrapped module (or of ``pl_module.mixed_losses`` of one mixed
       batch of every task's examples, ``one_pass``) under the precision plugin's
       ``forward_context()``: ``memory_batch_size * world_size`` remembered examples are drawn
       with a generator seeded by ``(seed, global_step, k)`` (fewer when the memory holds fewer),
       each rank takes its disjoint share, the gradients are summed across ranks weighted by
       each share's size (the gradient of the mean loss of the whole draw);
    3. ``M = [g, G][g, G]^T`` from per-tensor dot products on the gradients' device
       (:func:`~pal_lightning.gem.gram.gram_matrix`), broadcast from rank 0 so every rank takes the
       same decision;
    4. if some ``<g, g_k> < 0``: ``v`` from the dual QP
       (:func:`~pal_lightning.gem.projection.gem_coefficients`) and ``g~ = g + sum_k v_k g_k`` written in
       place into the participating ``p.grad``.

    The callback chooses the constraining tasks and the participating parameters (1); steps 2 to 4,
    the rows' cache and the counters are its :attr:`projector`'s
    (:class:`~pal_lightning.gem.step_projector.StepProjector`).

    A-GEM (``mode="agem"``): one reference gradient of a batch split over the constraining
    memories (example-weighted mean loss), ``g~ = g - (g.g_ref / g_ref.g_ref) g_ref`` when
    ``g.g_ref < 0``.

    Never writes non-finite values: a non-finite ``g`` or memory gradient leaves ``g`` alone
    (the module's guard, if any, deals with the step) and is counted in ``gem/skipped_nonfinite``.

    Logged each optimizer step (``on_step``): ``gem/constraints`` (rows of ``G``; 0 = nothing to do),
    ``gem/violated`` (0/1), ``gem/min_cosine`` (smallest ``cos(g, g_k)``; A-GEM: ``cos(g, g_ref)``;
    only when there are non-zero rows), ``gem/projection_ms`` (all of GEM's work this step: memory
    gradients, QP, write-back), ``gem/fallbacks`` and ``gem/skipped_nonfinite`` (cumulative), and for
    GEM ``gem/violation`` (the residual ``max_k -<g~, g_k> / (|g_k| |g~|)`` after the projection, 0
    when exact).

    Duck-typed contract: the data module (``trainer.datamodule``, or the ``data`` argument of
    :meth:`project_step`) has ``train_batch(task, indices) -> batch`` that rebuilds a training
    batch of ``task``'s train-split positions ``indices`` (CPU tensors are fine, the callback moves
    them), and the module has ``batch_loss(batch) -> Tensor``; with ``parameters="shared"`` the
    module also has ``encoder.pretrained_parameters()`` (:class:`~pal_lightning.modeling.MultiTaskBert`).
    Training batches carry ``batch["task"]`` and ``batch["indices"]``.

    Args:
        memory_size: examples remembered per task.
        memory_batch_size: remembered examples per constraining task and rank for each memory gradient
            (A-GEM: in all, split over the constraining tasks).
        margin: GEM's ``memory_strength`` gamma (the dual's lower bound on ``v``).
        mode: ``"gem"`` (QP) or ``"agem"`` (one reference gradient).
        constraints: ``"others"`` (interleaved multi-task training) or ``"past"`` (continual training).
        parameters: ``"shared"`` (the pretrained encoder: task-specific adapters and heads cannot
            conflict) or ``"all"`` trainable parameters.
        refresh_every: recompute memory gradients every ``k`` optimizer steps (in between, and while
            the constraining set is unchanged, the last ones are reused; they are kept on the device).
        eps: relative ridge: ``eps * trace(GG^T) / t`` is added to the diagonal of ``GG^T``.
        seed: seed of the memories' reservoir draws and of the memory batches.
        batch_tasks: GEM's memory gradients of all constraining tasks from one backward (exact;
            :mod:`pal_lightning.gem.gradients`) instead of one backward per task, which holds
            fewer activations at once. Used where ``one_pass`` is off or does not apply.
        one_pass: the remembered examples of all constraining tasks as one mixed batch (per-example task
            routing, :mod:`pal_lightning.gem.one_pass`): A-GEM's reference gradient from one forward and
            one backward; GEM's rows from one forward and one backward per task (each backward over the
            whole mixed batch). The same rows as the per-task path (``False``: one forward per task) up to
            float rounding. Where the module cannot run it (no ``mixed_losses``, an override of
            ``batch_loss``, a compiled encoder, an encoder that runs a mixed batch one task at a time;
            :func:`~pal_lightning.gem.one_pass.one_pass_applies`) the per-task path runs anyway. ``None``
            (default): A-GEM always (the same arithmetic in fewer operators); GEM on CUDA devices only
            (its ``t`` backwards over the mixed batch are more arithmetic: on a CPU at the quickstart
            shape 1.4-1.6 times slower than per task; on a GPU a step waits for the host's operators).
        flat_rows: the Gram matrix and the write-back over one float64 copy of the rows
            (:mod:`pal_lightning.gem.flat_rows`: a few kernels instead of one per parameter tensor and
            product; ``t + 1`` copies of the participating parameters in memory) instead of tensor by
            tensor. ``None`` (default): flat on CUDA devices, where a step is bound by the host issuing
            operators, per tensor elsewhere. Sparse rows (A-GEM's embedding tables) stay per tensor.
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
        check_options(memory_batch_size, margin, mode, constraints, parameters, refresh_every, eps)
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
        #: The step itself (rows of ``G``, their cache, the projection) and its counters.
        self.projector = StepProjector()
        self.last_stats: dict[str, float] = {}
        """What the last optimizer step logged (for inspection and tests)."""
        self._window_step: int | None = None
        self._window_tasks: list[str] = []

    fallbacks = _counter("fallbacks")
    skipped_nonfinite = _counter("skipped_nonfinite")
    violations = _counter("violations")
    projections = _counter("projections")

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        counters = self.projector.counters()
        return {"memory": self.memory.state_dict(), "task_order": list(self.task_order), **counters}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.memory.load_state_dict(state_dict["memory"])
        self.task_order = [str(t) for t in state_dict.get("task_order", [])]
        self.projector.load_counters(state_dict)

    # ------------------------------------------------------------------ hooks

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # a subclass may switch the member off with `train_batch = None`: missing, for the contract
        if not satisfies(datamodule_of(trainer), TrainBatchSource):
            raise PalUserError(
                "GEMCallback needs a data module with train_batch(task, indices) to rebuild remembered "
                "examples (e.g. pal_lightning.MultiTaskDataModule): pass datamodule= to Trainer.fit."
            )
        if missing_members(pl_module, BatchLossModel):
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
            datamodule_of(trainer),
            step=trainer.global_step,
            current=self._window_tasks,
            forward_context=trainer.precision_plugin.forward_context,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
        )
        for key, value in stats.items():
            pl_module.log(key, value, on_step=True, on_epoch=False, batch_size=1)

    # ------------------------------------------------------------------ pieces

    def participating_parameters(self, module: nn.Module) -> list[nn.Parameter]:
        """Trainable parameters GEM projects (:func:`participating_parameters`, by ``parameters``)."""
        return participating_parameters(module, self.parameters)

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
        return constraint_gradients(
            source,
            self.memory,
            self.mode,
            tasks,
            step,
            self.memory_batch_size,
            params,
            self.batch_tasks,
            self.one_pass,
        )

    def wants_flat_rows(self, params: list[nn.Parameter]) -> bool:
        """Whether this callback takes the flat path (:mod:`pal_lightning.gem.flat_rows`) for ``params``:
        as ``flat_rows`` says, or by default on a CUDA device."""
        return wants_flat_rows(self, params)

    # ------------------------------------------------------------------ the step

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
        """Project ``module``'s gradients in place for an optimizer step on the tasks ``current``.

        What ``on_before_optimizer_step`` runs; callable without a Trainer (benchmarks, custom
        loops): ``data`` is anything with ``train_batch(task, indices)``. Under DDP every rank
        must call it with the same arguments except ``rank``.

        Returns:
            The step's statistics (the logged ``gem/...`` values).
        """
        tasks = self.constraining_tasks(current)
        source = MemorySource(module, data, forward_context, rank, world_size)
        stats = self.projector.step(
            self,
            tasks,
            step,
            params=lambda: self.participating_parameters(module),
            # looked up at each call: tests and pal_lightning.testing wrap _constraint_gradients
            memory_gradients=lambda params: self._constraint_gradients(source, tasks, step, params),
        )
        self.last_stats = stats
        return stats
