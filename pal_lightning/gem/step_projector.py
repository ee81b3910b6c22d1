"""One GEM or A-GEM optimizer step on gradients already computed, and what it is counted and logged as.

:class:`~pal_lightning.gem.callback.GEMCallback` decides which tasks constrain a step and which parameters
take part (and fills the memories from Lightning's hooks); :class:`StepProjector` does the step itself:

1. the rows of ``G`` (the memory gradients, from a function the callback gives), kept between steps while
   fresh (``refresh_every``), per tensor or as one flat float64 matrix (:mod:`pal_lightning.gem.flat_rows`);
2. ``M = [g, G][g, G]^T`` on the gradients' device, broadcast from rank 0 so every rank decides alike;
3. the coefficients (:func:`~pal_lightning.gem.projection.step_coefficients`) and ``g~`` written into
   ``p.grad``; the counters (``fallbacks``, ``skipped_nonfinite``, ``violations``, ``projections``) and
   the step's ``gem/...`` statistics.

It reads the options from the callback as they are at each step (:class:`StepOptions`), so that changing
one on the callback (tests do) changes the next step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
from torch import Tensor, nn
from torch.profiler import record_function

from pal_lightning.core import distributed
from pal_lightning.gem.flat_rows import (
    FlatLayout,
    add_flat_rows,
    can_flatten,
    flat_bordered_gram,
    flatten,
    flatten_rows,
    has_dense_gradients,
    unflatten_rows,
)
from pal_lightning.gem.gram import Grads, add_rows, bordered_gram, gram_matrix
from pal_lightning.gem.projection import step_coefficients

__all__ = ["COUNTERS", "Rows", "StepOptions", "StepProjector", "wants_flat_rows"]

#: the rows of ``G``: a gradient per row (tensor by tensor), or one ``(t, n)`` float64 matrix (flat_rows)
Rows = list[Grads] | Tensor

#: The cumulative counts a :class:`StepProjector` keeps (and a checkpoint saves).
COUNTERS = ("fallbacks", "skipped_nonfinite", "violations", "projections")


class StepOptions(Protocol):
    """The options a step reads (:class:`~pal_lightning.gem.callback.GEMCallback` has them)."""

    mode: str
    margin: float
    eps: float
    refresh_every: int
    flat_rows: bool | None


def wants_flat_rows(options: StepOptions, params: list[nn.Parameter]) -> bool:
    """Whether a step over ``params`` takes the flat path (:mod:`pal_lightning.gem.flat_rows`): as
    ``options.flat_rows`` says, or by default on a CUDA device (where a step is bound by the host
    issuing one operator per parameter tensor)."""
    if options.flat_rows is not None:
        return options.flat_rows
    return bool(params) and params[0].device.type == "cuda"


class StepProjector:
    """The projection's state across optimizer steps: the cached rows and the counters.

    Attributes:
        cache: ``((tasks, is_gem), step, rows, GG^T)`` of the last rows computed, kept only when
            ``refresh_every > 1`` (``None`` otherwise, and after a non-finite step).
        fallbacks, skipped_nonfinite, violations, projections: the cumulative counters.
    """

    def __init__(self) -> None:
        self.fallbacks = 0
        self.skipped_nonfinite = 0
        self.violations = 0
        self.projections = 0
        self.cache: tuple[tuple[tuple[str, ...], bool], int, Rows, Tensor] | None = None
        self._layout: FlatLayout | None = None

    def layout(self, params: list[nn.Parameter]) -> FlatLayout | None:
        """The flat path's buffer over ``params`` (kept while they stay the same), or ``None`` where one
        buffer cannot hold them (several dtypes or devices)."""
        if self._layout is None or self._layout.key != FlatLayout.key_of(params):
            self._layout = FlatLayout(params) if FlatLayout.fits(params) else None
        return self._layout

    def counters(self) -> dict[str, int]:
        """The counters by name (plain ints: checkpoints load with ``weights_only=True``)."""
        return {key: getattr(self, key) for key in COUNTERS}

    def load_counters(self, state: Mapping[str, Any]) -> None:
        """Restore the counters (0 for one ``state`` lacks) and drop the cached rows."""
        for key in COUNTERS:
            setattr(self, key, int(state.get(key, 0)))
        self.cache = None

    def step(
        self,
        options: StepOptions,
        tasks: list[str],
        step: int,
        params: Callable[[], list[nn.Parameter]],
        memory_gradients: Callable[[list[nn.Parameter]], list[Grads]],
    ) -> dict[str, float]:
        """Project the gradients of ``params()`` against the memories of ``tasks`` (nothing when empty).

        Args:
            options: the callback's options, as they are now.
            tasks: the constraining tasks, in first-seen order.
            step: the optimizer step (seeds the memory batches; dates the cached rows).
            params: the participating parameters (only asked for when there are ``tasks``).
            memory_gradients: the rows of ``G`` for the participating parameters (called when the
                cached rows are stale).

        Returns:
            The step's ``gem/...`` statistics; ``gem/projection_ms`` times all of this step's work.
        """
        start = time.perf_counter()
        stats: dict[str, float] = {"gem/constraints": 0.0, "gem/violated": 0.0}
        if tasks:
            chosen = params()
            rows, GGt = self.rows(options, tasks, step, chosen, memory_gradients)
            self.project(options, chosen, rows, GGt, stats)
        stats["gem/projection_ms"] = (time.perf_counter() - start) * 1000.0
        stats["gem/fallbacks"] = float(self.fallbacks)
        stats["gem/skipped_nonfinite"] = float(self.skipped_nonfinite)
        return stats

    def rows(
        self,
        options: StepOptions,
        tasks: list[str],
        step: int,
        params: list[nn.Parameter],
        memory_gradients: Callable[[list[nn.Parameter]], list[Grads]],
    ) -> tuple[Rows, Tensor]:
        """The memory gradients of ``tasks`` (per tensor, or flat) and their Gram matrix (on the device):
        the cached ones while fresh (``refresh_every``), else new."""
        key = (tuple(tasks), options.mode == "gem")
        cached = self.cache
        if cached is not None and cached[0] == key and step - cached[1] < options.refresh_every:
            return cached[2], cached[3]
        with record_function("gem/memory_gradients"):  # profiler labels (benchmarks/profile_step.py)
            grads = memory_gradients(params)
        rows: Rows = grads
        with record_function("gem/gram"):
            if wants_flat_rows(options, params) and can_flatten(grads, params):
                rows = flatten_rows(grads, params, self.layout(params))
                GGt = rows @ rows.T
            else:
                GGt = gram_matrix(grads)
        self.cache = (key, step, rows, GGt) if options.refresh_every > 1 else None
        return rows, GGt

    def project(
        self,
        options: StepOptions,
        params: list[nn.Parameter],
        rows: Rows,
        GGt: Tensor,
        stats: dict[str, float],
    ) -> None:
        """Decide from ``M = [g, G][g, G]^T`` and write ``g~`` into ``p.grad``; update ``stats`` and the
        counters. A non-finite ``M`` leaves ``g`` alone (counted in ``skipped_nonfinite``)."""
        if isinstance(rows, Tensor) and not has_dense_gradients(params):
            # cached flat rows, and a parameter without a gradient this step: per tensor (it creates one)
            rows = unflatten_rows(rows, params)
        with record_function("gem/gram"):
            if isinstance(rows, Tensor):
                g = flatten([p.grad for p in params], params, self.layout(params))
                M_device = flat_bordered_gram(g, rows, GGt)
            else:
                M_device = bordered_gram([p.grad for p in params], rows, GGt)
        # rank 0's M for every rank: one decision for all, even if their float sums differ
        M = distributed.broadcast(M_device).cpu().numpy()
        stats["gem/constraints"] = float(len(rows))
        if not np.all(np.isfinite(M)):
            self.skipped_nonfinite += 1
            self.cache = None  # the rows themselves may be what is not finite: computed afresh next step
            return
        result = step_coefficients(M, options.mode, margin=options.margin, eps=options.eps)
        self.fallbacks += result.fallbacks
        if options.mode == "gem":
            stats["gem/violation"] = float(result.violation or 0.0)
        stats["gem/violated"] = float(result.violated)
        if result.min_cosine is not None:
            stats["gem/min_cosine"] = float(result.min_cosine)
        self.violations += int(result.violated)
        if result.v is None:
            return
        self.projections += 1
        with record_function("gem/write_back"):
            if isinstance(rows, Tensor):
                add_flat_rows(params, rows, result.v.tolist(), self.layout(params))
            else:
                add_rows(params, rows, result.v.tolist())
