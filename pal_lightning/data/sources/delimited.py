"""Tab-separated files with a header row, read with :mod:`csv`: ``cs224n`` (CSV quoting, as the starter code
reads them; extra unnamed test columns are ignored) and ``glue_tsv`` (no quote processing). Bytes that are
not UTF-8 are kept as surrogate escapes, so only their row is bad."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.registry import Location, Row, RowSource
from pal_lightning.tasks.catalogue import BUILTIN_TASKS
from pal_lightning.tasks.specs import TaskSpec

STARTER_DATA = (
    "the data/ folder of the CS224N starter code (github.com/gpoesia/minbert-default-final-project)"
)


def tsv_records(
    path: str, fix: str, quoted: bool = False, as_dicts: bool = False, encoding: str = "utf-8"
) -> Iterator[Any]:
    """``(line number, record, header)`` of a tab-separated file: records as lists of fields, or
    (``as_dicts``) as :class:`csv.DictReader` rows under the first line's header (else ``[]``). Text that
    :mod:`csv` cannot read is a PalUserError naming the line, then ``fix``."""
    with open(path, encoding=encoding, errors="surrogateescape", newline="") as f:
        make = csv.DictReader if as_dicts else csv.reader
        reader = make(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
        try:  # csv.Error stops the reader: no later row is safe
            header = list(reader.fieldnames or []) if isinstance(reader, csv.DictReader) else []
            for record in reader:
                yield reader.line_num, record, header
        except csv.Error as err:
            raise PalUserError(
                f"{path}, line {reader.line_num}: cannot be read as tab-separated text ({err}). {fix}"
            ) from err


class DelimitedFiles(RowSource):
    """Tab-separated files; ``quoted``: CSV quoting; ``origin``: where the built-in tasks' files are."""

    def __init__(self, quoted: bool, origin: str = "") -> None:
        self.quoted, self.origin = quoted, origin

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        fix = "Fix the file (a field this long usually means a quote that is never closed)."
        return tsv_records(loc.location, fix, quoted=self.quoted, as_dicts=True)

    def has_header(self, loc: Location) -> bool:
        with open(loc.location, encoding="utf-8", errors="surrogateescape") as f:
            return bool(f.readline().strip())

    def missing_hint(self, spec: TaskSpec, data_dir: Path) -> str:
        return f" {self.origin}" if self.origin and BUILTIN_TASKS.get(spec.name) == spec else ""


CS224N = DelimitedFiles(quoted=True, origin=f"The CS224N files are in {STARTER_DATA}.")
GLUE_TSV = DelimitedFiles(quoted=False)
