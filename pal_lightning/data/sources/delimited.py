"""Tab-separated files with a header row, read with :mod:`csv`: the formats ``cs224n`` and ``glue_tsv``.

``cs224n``
    The CS224N minBERT files: tab-separated despite the ``.csv`` name, standard CSV quoting (as the
    starter code reads them, ``csv.DictReader(f, delimiter="\\t")``). Test-student files have no label
    column and may carry extra unnamed index columns, which are ignored.
``glue_tsv``
    GLUE's TSV files (``sentence<TAB>label``, test files ``index<TAB>sentence``), without quote processing.

Bytes that are not UTF-8 are kept as surrogate escapes, so that the row holding them is a bad row with its
line number instead of the whole read failing.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.locate import Location
from pal_lightning.data.sources.registry import Row, RowSource
from pal_lightning.tasks.catalogue import BUILTIN_TASKS
from pal_lightning.tasks.specs import TaskSpec

#: Where the CS224N files are, for messages.
STARTER_DATA = (
    "the data/ folder of the CS224N starter code (github.com/gpoesia/minbert-default-final-project)"
)


class DelimitedFiles(RowSource):
    """Tab-separated files with a header row; ``quoted``: standard CSV quoting, else none; ``origin``: where
    the files of the built-in tasks of this format can be had (for the message about missing ones)."""

    def __init__(self, quoted: bool, origin: str = "") -> None:
        self.quoted, self.origin = quoted, origin

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        return iter_tab_separated(loc.location, self.quoted)

    def has_header(self, loc: Location) -> bool:
        with open(loc.location, encoding="utf-8", errors="surrogateescape") as f:
            return bool(f.readline().strip())

    def missing_hint(self, spec: TaskSpec, data_dir: Path) -> str:
        return f" {self.origin}" if self.origin and BUILTIN_TASKS.get(spec.name) == spec else ""


def iter_tab_separated(path: str, quoted: bool) -> Iterator[Row]:
    """Yield ``(line number, row, header)`` of a tab-separated file with a header row.

    Raises:
        PalUserError: when :mod:`csv` cannot go on (a field over ``csv.field_size_limit()``).
    """
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
        try:  # csv.Error stops the reader: no later row is safe
            header = list(reader.fieldnames or [])
            for row in reader:
                yield reader.line_num, row, header  # the record's last physical line; the header is line 1
        except csv.Error as err:
            raise PalUserError(
                f"{path}, line {reader.line_num}: cannot be read as tab-separated text ({err}). Fix the file "
                "(a field this long usually means a quote that is never closed)."
            ) from err


#: The sources of the two formats.
CS224N = DelimitedFiles(quoted=True, origin=f"The CS224N files are in {STARTER_DATA}.")
GLUE_TSV = DelimitedFiles(quoted=False)
