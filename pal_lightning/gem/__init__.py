"""Gradient Episodic Memory (GEM) and A-GEM.

GEM (Lopez-Paz & Ranzato, 2017) keeps a small episodic memory ``M_k`` of every task ``k``. At each
optimizer step with gradient ``g`` it computes one memory gradient ``g_k`` per constraining task (rows
of ``G``) and requires ``<g~, g_k> >= 0``: the update must not increase any remembered task's loss (to
first order). When ``g`` already satisfies every constraint, ``g~ = g``; otherwise ``g~`` is the closest
vector to ``g`` that does, found through the ``t x t`` dual QP::

    minimise_v  1/2 v^T (G G^T + eps I) v + (G g)^T v      subject to  v >= margin
    g~ = g + G^T v

By the KKT conditions ``G g~ = lambda - eps v``, so the ridged solution violates the constraints by up
to ``eps v``; the un-ridged dual is therefore also solved exactly (non-negative least squares) and the
better of the two kept. A-GEM (Chaudhry et al., 2019) replaces the QP by one reference gradient
``g_ref`` of a batch drawn across the memories. See docs/design.md for the traps.

Modules, one idea each (the first three import no Lightning):

* :mod:`~pal_lightning.gem.qp`: the dual QP's solvers (ridged quadprog, exact NNLS);
* :mod:`~pal_lightning.gem.projection`: projection coefficients from the Gram matrix, and the
  projections of flat tensors (:func:`project_gradient`, :func:`agem_project`);
* :mod:`~pal_lightning.gem.gram`: gradients as lists of tensors, their Gram matrix, the write-back;
* :mod:`~pal_lightning.gem.flat_rows`: the same over one ``(t, n)`` float64 matrix (few kernels: GPUs);
* :mod:`~pal_lightning.gem.memory`: :class:`EpisodicMemory`, one reservoir of example indices per task;
* :mod:`~pal_lightning.gem.gradients`: the rows of ``G`` from remembered examples;
* :mod:`~pal_lightning.gem.one_pass`: the same from one mixed batch of every task's remembered examples;
* :mod:`~pal_lightning.gem.sparse_embeddings`: embedding tables' memory gradients as sparse rows (A-GEM);
* :mod:`~pal_lightning.gem.step_projector`: one optimizer step's projection, its cached rows and counters;
* :mod:`~pal_lightning.gem.callback`: :class:`GEMCallback`, the Lightning callback.

The package exports what a user needs: the callback, the memory and the projections of flat tensors;
everything else is imported from the module that defines it (``pal_lightning.gem.projection.DEFAULT_EPS``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.projection import agem_project, project_gradient

if TYPE_CHECKING:
    from pal_lightning.gem.callback import GEMCallback


def __getattr__(name: str) -> Any:
    # The maths above loads without Lightning; the callback (which uses it) loads on first use, so
    # `import pal_lightning.gem.qp` stays light.
    if name == "GEMCallback":
        return importlib.import_module("pal_lightning.gem.callback").GEMCallback
    raise AttributeError(f"module 'pal_lightning.gem' has no attribute {name!r}")


__all__ = ["EpisodicMemory", "GEMCallback", "agem_project", "project_gradient"]
