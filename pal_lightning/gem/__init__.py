"""Gradient Episodic Memory (GEM, Lopez-Paz & Ranzato, 2017) and A-GEM (Chaudhry et al., 2019).

Each optimizer step, a gradient ``g`` with some ``<g, g_k> < 0`` against a constraining task's memory
gradient ``g_k`` (rows of ``G``) becomes the closest ``g~ = g + G^T v`` with ``G g~ >= 0`` (GEM, a
``t x t`` dual QP), or is projected against one reference gradient (A-GEM). The maths (:mod:`.qp`,
:mod:`.projection`) and :mod:`.memory` import no Lightning; :mod:`.rows`, :mod:`.gram` and
:mod:`.callback` (:class:`GEMCallback`) build on them.
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
