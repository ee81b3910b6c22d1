"""``my_mtl``: a small project built on pal-lightning, as a user would write one outside the library; the
suite drives it through ``pal-lightning`` command lines (tests/downstream/test_downstream_project.py).

Importing it registers its sampling rule, ``capped_inverse``, so ``data.init_args.sampling: capped_inverse``
works in a config whose ``model.class_path`` or ``data.class_path`` names this package."""

from my_mtl.callbacks import TaskVarianceLog
from my_mtl.data import FlooredData
from my_mtl.model import MLPHead, UncertaintyWeighted
from my_mtl.sampling import CAP, capped_inverse

__all__ = ["CAP", "FlooredData", "MLPHead", "TaskVarianceLog", "UncertaintyWeighted", "capped_inverse"]
