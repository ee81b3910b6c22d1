"""Gradient Episodic Memory (GEM, Lopez-Paz & Ranzato, 2017) and A-GEM (Chaudhry et al., 2019).

At each optimizer step with gradient ``g`` GEM takes one memory gradient ``g_k`` per constraining task
(rows of ``G``) and, if some ``<g, g_k> < 0``, replaces ``g`` by the closest ``g~`` with ``G g~ >= 0``,
``g~ = g + G^T v`` from a ``t x t`` dual QP; A-GEM projects against one reference gradient.

Modules: :mod:`~pal_lightning.gem.qp` and :mod:`~pal_lightning.gem.projection` (the maths, on small
matrices or flat tensors), :mod:`~pal_lightning.gem.memory` (:class:`EpisodicMemory`),
:mod:`~pal_lightning.gem.rows` (the rows of ``G`` from remembered examples),
:mod:`~pal_lightning.gem.gram` (their Gram matrix and the write-back) and
:mod:`~pal_lightning.gem.callback` (:class:`GEMCallback` and its step's state). The first three import
no Lightning.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.projection import agem_project, project_gradient

if TYPE_CHECKING:
    from pal_lightning.gem.callback import GEMCallback


def __getattr__(name: str) -> Any:
    # the callback (Lightning) loads on first use, so that `import pal_lightning.gem.qp` stays light
    if name == "GEMCallback":
        return importlib.import_module("pal_lightning.gem.callback").GEMCallback
    raise AttributeError(f"module 'pal_lightning.gem' has no attribute {name!r}")


__all__ = ["EpisodicMemory", "GEMCallback", "agem_project", "project_gradient"]
