"""Where a task's rows come from: one :class:`RowSource` per ``TaskSpec.format``, registered by name:
``cs224n`` and ``glue_tsv`` (:mod:`.delimited`), ``hf`` (GLUE's download :mod:`.glue_data`, a hub dataset
or folder or local files :mod:`.hf`); the row checks and text clean-up while reading."""

from pal_lightning.data.sources.delimited import CS224N, GLUE_TSV
from pal_lightning.data.sources.hf import HFFormat
from pal_lightning.data.sources.registry import RowSource, register_source

register_source("cs224n", CS224N)
register_source("glue_tsv", GLUE_TSV)
register_source("hf", HFFormat())

__all__ = ["RowSource", "register_source"]
