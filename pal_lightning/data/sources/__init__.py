"""Where a task's rows come from: one source per ``TaskSpec.format``, registered by name
(:mod:`~pal_lightning.data.sources.registry`), the row checks, the text clean-up applied while reading and
the packaged demo set.

==========  ==========================================================================================
format      source
==========  ==========================================================================================
cs224n      the CS224N minBERT files: tab-separated, CSV quoting (:mod:`.delimited`)
glue_tsv    tab-separated files without quote processing (:mod:`.delimited`)
hf          ``datasets``: GLUE's download for the built-in GLUE tasks (:mod:`.glue_data`), a hub dataset
            or dataset folder (:mod:`.hf`), local csv/tsv/json/parquet files (:mod:`.hf_files`)
==========  ==========================================================================================
"""

from pal_lightning.data.sources.delimited import CS224N, GLUE_TSV
from pal_lightning.data.sources.hf_files import HFFormat
from pal_lightning.data.sources.registry import RowSource, register_source

register_source("cs224n", CS224N)
register_source("glue_tsv", GLUE_TSV)
register_source("hf", HFFormat())

__all__ = ["RowSource", "register_source"]
