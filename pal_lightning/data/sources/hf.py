"""The ``format: hf`` source: GLUE's download for an unchanged built-in GLUE task (:mod:`.glue_data`); a hub
id (cached, then read offline), a ``save_to_disk`` folder (:func:`dataset_task`) or a folder in the hub's
layout (working directory first, then the data folder) when ``hf_path`` names one; else the local files of
``files`` read through ``datasets`` by the builder ``hf_path`` names or by suffix (a tab-separated file
without quote processing, unless ``delimiter``/``quoting`` say otherwise). And the public copies of the
built-in tasks, read when no data folder is given."""

from __future__ import annotations

import csv
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import file_fingerprint
from pal_lightning.data.sources import glue_data
from pal_lightning.data.sources.delimited import STARTER_DATA
from pal_lightning.data.sources.registry import Location, Row, RowSource
from pal_lightning.data.sources.validate import names_of_values
from pal_lightning.tasks.catalogue import BUILTIN_TASKS
from pal_lightning.tasks.specs import TaskSpec

log = logging.getLogger(__name__)

HF_FILE_BUILDERS = ("csv", "json", "parquet", "text")
HF_DEFAULT_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_SAVED_MARKERS = ("dataset_dict.json", "state.json")
#: every split of one dataset is read once per process
_LOADED: dict[tuple[str, str | None], Mapping[str, Any]] = {}


def _hub_copy(
    name: str, hf_path: str, hf_name: str | None, text_columns: tuple[str, ...], **kw: object
) -> TaskSpec:
    return BUILTIN_TASKS[name].replace(
        format="hf",
        hf_path=hf_path,
        hf_name=hf_name,
        files=dict(HF_DEFAULT_SPLITS),
        text_columns=text_columns,
        label_column="label",
        **{"id_column": "idx", **kw},
    )


#: The public copy of each built-in task that has one, read when no data folder is given (other splits).
HUB_COPIES: dict[str, TaskSpec] = {
    "sst": _hub_copy("sst", "SetFit/sst5", None, ("text",), id_column=None),
    "qqp": _hub_copy("qqp", "nyu-mll/glue", "qqp", ("question1", "question2"), unquote=False),
    "sts": _hub_copy("sts", "nyu-mll/glue", "stsb", ("sentence1", "sentence2")),
    "sst2": _hub_copy("sst2", "nyu-mll/glue", "sst2", ("sentence",)),
}


def with_hub_copies(specs: Sequence[TaskSpec], data_dir: str | os.PathLike[str] | None) -> list[TaskSpec]:
    """``specs`` with each unchanged built-in task read from its :data:`HUB_COPIES` entry when no data
    folder is given (a changed one was meant for files)."""
    given = data_dir is not None and str(data_dir) != ""
    if given or os.environ.get("PAL_DATA_DIR", "").strip() or Path("data").is_dir():
        return list(specs)
    out = []
    for spec in specs:
        copy = HUB_COPIES.get(spec.name)
        if copy is not None and BUILTIN_TASKS.get(spec.name) == spec:
            log.info(
                "No data folder given (--data.data_dir, PAL_DATA_DIR, ./data): task %s reads the Hugging Face "
                "dataset %s%s.",
                spec.name,
                copy.hf_path,
                f" ({copy.hf_name})" if copy.hf_name else "",
            )
            spec = copy
        out.append(spec)
    return out


def _describe(spec: TaskSpec) -> str:
    return f"{spec.hf_path}" + (f" (config {spec.hf_name})" if spec.hf_name else "")


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _load_error(spec: TaskSpec, err: BaseException) -> PalUserError:
    why = "offline (HF_HUB_OFFLINE is set) and not in the Hugging Face cache" if _offline() else one_line(err)
    if HUB_COPIES.get(spec.name) == spec:
        return PalUserError(
            f"Task {spec.name!r} has no data: no data folder is given (--data.data_dir, PAL_DATA_DIR and ./data "
            f"are all absent) and its Hugging Face dataset {_describe(spec)} could not be loaded: {why}. Either "
            f"point --data.data_dir PATH (or PAL_DATA_DIR) at a folder of the CS224N files ({STARTER_DATA}), or "
            f"go online once so that `datasets` downloads {spec.hf_path} into its cache (later runs read it "
            "offline); --data.data_dir demo runs the small demo set shipped with the package."
        )
    return PalUserError(
        f"Could not load the dataset {_describe(spec)} of task {spec.name!r}: {why}. Check the hub id and "
        "hf_name, go online once so that `datasets` caches it (later runs read it offline), or point hf_path at "
        "a local copy (a folder of its data files, or one written by save_to_disk)."
    )


def load_splits(spec: TaskSpec, data_dir: Path) -> Mapping[str, Any]:
    """Every split of ``spec``'s dataset by its split names (PalUserError when it cannot be loaded)."""
    assert spec.hf_path is not None
    import datasets

    path = Path(spec.hf_path).expanduser()  # a folder: the working directory's, then data_dir's
    folder = next((c for c in (path, data_dir / path) if c.is_dir()), None)
    key = (str(folder.resolve()) if folder is not None else spec.hf_path, spec.hf_name)
    if key in _LOADED:
        return _LOADED[key]
    try:
        if folder is not None and any((folder / marker).is_file() for marker in _SAVED_MARKERS):
            loaded = datasets.load_from_disk(str(folder))
        else:
            loaded = datasets.load_dataset(str(folder) if folder is not None else spec.hf_path, spec.hf_name)
    except Exception as err:  # noqa: BLE001 - hub, network and format errors come in many types
        raise _load_error(spec, err) from err
    # a saved single Dataset is the training split
    splits = dict(loaded) if isinstance(loaded, Mapping) else {"train": loaded}
    _LOADED[key] = splits
    return splits


def clear_loaded() -> None:
    """Forget the datasets read so far."""
    _LOADED.clear()


def load_split(spec: TaskSpec, hf_split: str, data_dir: Path, our_split: str) -> Any:
    """Split ``hf_split`` (our ``our_split``) of ``spec``'s dataset (PalUserError naming those it has)."""
    splits = load_splits(spec, data_dir)
    if hf_split not in splits:
        raise PalUserError(
            f"The dataset {_describe(spec)} of task {spec.name!r} has no split {hf_split!r} (asked for as its "
            f"{our_split} split); its splits are {', '.join(sorted(splits)) or 'none'}. Name one of them in the "
            f"task's files (files: {{{our_split}: <split>}}), or leave {our_split} out of files."
        )
    return splits[hf_split]


def fingerprint(spec: TaskSpec, hf_split: str, data_dir: Path, our_split: str) -> str:
    """SHA-256 of the Arrow files a split is read from (their folder names the hub revision), or of its
    table when held only in memory."""
    ds = load_split(spec, hf_split, data_dir, our_split)
    digest = hashlib.sha256(f"{spec.hf_path}\0{spec.hf_name}\0{hf_split}".encode())
    files = [f["filename"] for f in ds.cache_files]
    if files:
        for name in files:
            digest.update(file_fingerprint(name).encode())
    else:
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, ds.data.schema) as writer:
            writer.write_table(ds.data.table)
        digest.update(sink.getvalue().to_pybytes())
    return digest.hexdigest()


def dataset_rows(ds: Any, first: int) -> Iterator[Row]:
    """The rows of a ``datasets.Dataset``, numbered from ``first``."""
    columns = list(ds.column_names)
    for i, row in enumerate(ds):
        yield i + first, row, columns


def dataset_label_names(ds: Any, column: str) -> tuple[str, ...]:
    """A ``ClassLabel``'s names, else the column's words sorted."""
    if ds is None or column not in ds.column_names:
        return ()
    names = getattr(ds.features.get(column), "names", None)
    return tuple(str(n) for n in names) if names else names_of_values(ds[column])


class HubDataset(RowSource):
    """A hub dataset or a local dataset folder; ``files`` maps our splits to its splits."""

    kind = "hub"

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        assert spec.hf_path is not None
        hf_split = spec.files.get(split, HF_DEFAULT_SPLITS[split] if not spec.files else None)
        return None if hf_split is None else Location(self.kind, spec.hf_path, self, hf_split)

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        return dataset_rows(load_split(spec, str(loc.hf_split), data_dir, split), 1)

    def exists(self, spec: TaskSpec, loc: Location, data_dir: Path) -> bool:
        return str(loc.hf_split) in load_splits(spec, data_dir)

    def missing(self, spec: TaskSpec, split: str, loc: Location, data_dir: Path) -> str | None:
        load_split(spec, str(loc.hf_split), data_dir, split)  # one line when the split is missing
        return None

    def fingerprint(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> str:
        return "hf:" + fingerprint(spec, str(loc.hf_split), data_dir, split)

    def label_names(self, spec: TaskSpec, loc: Location, data_dir: Path) -> tuple[str, ...]:
        return dataset_label_names(
            load_split(spec, str(loc.hf_split), data_dir, "train"), str(spec.label_column)
        )


def dataset_task(dataset: Any, folder: str | os.PathLike[str], **fields: Any) -> TaskSpec:
    """A ``format="hf"`` task reading a ``datasets.DatasetDict`` (or one ``Dataset``: its training split),
    saved to ``folder`` so that checkpoints name a folder; ``fields``: the other ``TaskSpec`` fields.

    Raises:
        PalUserError: when ``folder`` exists and is not empty (nothing is overwritten).
    """
    import datasets

    if not isinstance(dataset, (datasets.DatasetDict, datasets.Dataset)):
        raise PalUserError(
            f"dataset_task needs a datasets.DatasetDict or Dataset, got {type(dataset).__name__}."
        )
    path = Path(folder).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise PalUserError(
            f"{path} already exists and is not empty; dataset_task writes the dataset there. Give a new folder, "
            "or use TaskSpec(format='hf', hf_path=...) to read a folder saved before."
        )
    dataset.save_to_disk(str(path))
    return TaskSpec(format="hf", hf_path=str(path), **fields)


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
    # only an empty field is missing: pandas would also read None, NA, null, ... so (a text or class lost)
    options: dict[str, Any] = {"keep_default_na": False, "na_values": [""]}
    # ids and texts as written, not as numbers (007 -> 7, or 7.0 beside an empty field)
    options["converters"] = dict.fromkeys(
        [*spec.text_columns, *([spec.id_column] if spec.id_column else [])], str
    )
    options.update({} if delimiter == "," else {"delimiter": delimiter})
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
