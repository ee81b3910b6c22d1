"""Where :class:`GEMCallback` and GEM's maths used to live: they are now the package :mod:`pal_lightning.gem`.

Every name importable from here before stays importable (the same objects, re-exported with the rest
of the package's names). To replace a solver in a test, patch it where it is looked up:
``pal_lightning.gem.qp.solve_gem_dual``.
"""

from __future__ import annotations

from pal_lightning import gem as _package
from pal_lightning.gem import *  # noqa: F403

__all__ = list(_package.__all__)
