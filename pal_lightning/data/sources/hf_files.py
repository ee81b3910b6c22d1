"""The ``hf`` format: GLUE's download for an unchanged built-in GLUE task (:mod:`.glue_data`), a hub dataset
or folder when ``hf_path`` names one (:mod:`.hf`), else the local files of ``files`` read through
``datasets`` by the builder ``hf_path`` names or by suffix (a tab-separated file without quote processing,
unless ``delimiter``/``quoting`` say otherwise)."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources import glue_data
from pal_lightning.data.sources.hf import (
    HF_FILE_BUILDERS,
    HubDataset,
    dataset_label_names,
    dataset_rows,
    one_line,
)
from pal_lightning.data.sources.locate import Location
from pal_lightning.data.sources.registry import Row, RowSource
from pal_lightning.tasks.specs import TaskSpec

_TAB_SUFFIXES = (".tsv", ".tab")


class DatasetFiles(RowSource):
    """Local csv/tsv/json/parquet files read through ``datasets``."""

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        ds, first = load_file(spec, loc.location, split)
        return iter(()) if ds is None else dataset_rows(ds, first)

    def label_names(self, spec: TaskSpec, loc: Location, data_dir: Path) -> tuple[str, ...]:
        return dataset_label_names(load_file(spec, loc.location, "train")[0], str(spec.label_column))


class HFFormat(RowSource):
    """The source of ``format: hf`` (module docstring)."""

    def __init__(self) -> None:
        self.glue, self.hub, self.files = glue_data.GlueDownload(), HubDataset(), DatasetFiles()

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        glue_file = self.glue.locate(spec, split, data_dir)
        if glue_file is not None:
            return glue_file
        if spec.hf_path and spec.hf_path not in HF_FILE_BUILDERS:
            return self.hub.locate(spec, split, data_dir)
        return self.files.locate(spec, split, data_dir)


def load_file(spec: TaskSpec, path: str, split: str) -> tuple[Any, int]:
    """The ``datasets.Dataset`` of a local file (``None``: a header and no rows) and its first row's line
    (exact for files without multi-line fields).

    Raises:
        PalUserError: an empty file, a ``.csv`` file that looks tab-separated, or one ``datasets`` cannot read.
    """
    import datasets

    builder = spec.hf_path or _builder_for(path)
    first = 2 if builder == "csv" else 1  # the header line
    lines = _first_lines(path, builder)
    fix = f"or leave {split} out of the task's files"
    where = f"{path} (task {spec.name!r}, {split})"
    if not lines:
        csv_file = builder == "csv"
        what = "not even a header row" if csv_file else "no rows"
        put = "a header row, then one example per line," if csv_file else "its rows"
        raise PalUserError(f"{where} is empty: {what}. Put {put} in it, {fix}.")
    kwargs = _csv_options(spec, path, lines[0], where) if builder == "csv" else {}
    if len(lines) == 1 and builder == "csv":
        return None, first
    datasets_log = logging.getLogger("datasets")
    level = datasets_log.level
    datasets_log.setLevel(logging.CRITICAL)  # its own error line would repeat ours
    try:
        ds = datasets.load_dataset(builder, data_files={"data": path}, split="data", **kwargs)
    except Exception as err:  # noqa: BLE001 - pandas, pyarrow and datasets raise many types
        layout = " (or the task's delimiter and quoting)" if builder == "csv" else ""
        raise PalUserError(
            f"{where} cannot be read as {builder}: {one_line(err.__cause__ or err)}. Fix the file (a header row, "
            f"then one example per line){layout}, {fix}."
        ) from err
    finally:
        datasets_log.setLevel(level)
    return ds, first


def _csv_options(spec: TaskSpec, path: str, header: str, where: str) -> dict[str, Any]:
    tabbed = Path(path).suffix.lower() in _TAB_SUFFIXES
    delimiter = spec.delimiter or ("\t" if tabbed else ",")
    if spec.delimiter is None and not tabbed and "\t" in header and "," not in header:
        raise PalUserError(
            f"{where} looks tab-separated (its header has tabs, no comma) but is read as comma-separated: "
            "name it .tsv, or set delimiter: \"\\t\" in the task (delimiter='\\t' in Python)."
        )
    quoting = spec.quoting if spec.quoting is not None else delimiter != "\t"
    options: dict[str, Any] = {} if delimiter == "," else {"delimiter": delimiter}
    return options if quoting else {**options, "quoting": csv.QUOTE_NONE}


def _first_lines(path: str, builder: str) -> list[str]:
    if builder not in ("csv", "json"):  # a binary format: two placeholders
        return ["", ""] if Path(path).stat().st_size else []
    with open(path, encoding="utf-8", errors="replace") as f:
        return list(islice((line for line in f if line.strip()), 2))


_BUILDERS = dict.fromkeys((".csv", *_TAB_SUFFIXES), "csv") | {
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
}


def _builder_for(path: str) -> str:
    builder = _BUILDERS.get(Path(path).suffix.lower())
    if builder:
        return builder
    raise PalUserError(
        f"Cannot tell the format of {path}: set hf_path to 'csv', 'json' or 'parquet' in the TaskSpec."
    )
