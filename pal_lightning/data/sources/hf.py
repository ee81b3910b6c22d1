"""``format: hf`` datasets: a hub id (``hf_name`` its configuration; downloaded once into the Hugging Face
cache, then read offline too), a folder written by ``save_to_disk`` (:func:`dataset_task`), or another local
folder of data files in the hub's layout; and the public copies of the built-in tasks, read when no data
folder is given. A relative folder is looked up in the working directory, then in the data folder.
Local files (``hf_path`` a file builder, or none) are :mod:`~pal_lightning.data.sources.hf_files`'.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import file_fingerprint
from pal_lightning.data.sources.delimited import STARTER_DATA
from pal_lightning.data.sources.labels import names_of_values
from pal_lightning.data.sources.locate import Location
from pal_lightning.data.sources.registry import Row, RowSource
from pal_lightning.tasks.catalogue import BUILTIN_TASKS
from pal_lightning.tasks.specs import TaskSpec

log = logging.getLogger(__name__)

#: Builders of ``datasets`` that read local files (an ``hf_path`` that names one reads ``files``).
HF_FILE_BUILDERS = ("csv", "json", "parquet", "text")
#: Default hub split name for each of our splits.
HF_DEFAULT_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
#: Files that mark a folder written by ``save_to_disk`` (a ``DatasetDict``'s, a ``Dataset``'s).
_SAVED_MARKERS = ("dataset_dict.json", "state.json")
#: Loaded datasets by (location, configuration): every split of one source is read once per process.
_LOADED: dict[tuple[str, str | None], Mapping[str, Any]] = {}


def _hub_copy(
    name: str, hf_path: str, hf_name: str | None, text_columns: tuple[str, ...], **kw: object
) -> TaskSpec:
    """Built-in task ``name`` read from its public Hugging Face copy (same kind, labels and metrics)."""
    return BUILTIN_TASKS[name].replace(
        format="hf",
        hf_path=hf_path,
        hf_name=hf_name,
        files=dict(HF_DEFAULT_SPLITS),
        text_columns=text_columns,
        label_column="label",
        **kw,
    )


#: The public Hugging Face dataset of each built-in task that has one, as a ``format="hf"`` task of the same
#: name, read when no data folder is given (:func:`with_hub_copies`); their splits are not the CS224N files'.
HUB_COPIES: dict[str, TaskSpec] = {
    # test labels: SetFit/sst5's are given; GLUE hides them as -1
    "sst": _hub_copy("sst", "SetFit/sst5", None, ("text",), id_column=None),
    "qqp": _hub_copy(
        "qqp", "nyu-mll/glue", "qqp", ("question1", "question2"), id_column="idx", unquote=False
    ),
    "sts": _hub_copy("sts", "nyu-mll/glue", "stsb", ("sentence1", "sentence2"), id_column="idx"),
    "sst2": _hub_copy("sst2", "nyu-mll/glue", "sst2", ("sentence",), id_column="idx"),
}


def data_folder_given(data_dir: str | os.PathLike[str] | None) -> bool:
    """Whether the user named a data folder: ``data_dir``, ``$PAL_DATA_DIR``, or an existing ``./data``."""
    if data_dir is not None and str(data_dir) != "":
        return True
    if os.environ.get("PAL_DATA_DIR", "").strip():
        return True
    return Path("data").is_dir()


def with_hub_copies(specs: Sequence[TaskSpec], data_dir: str | os.PathLike[str] | None) -> list[TaskSpec]:
    """``specs`` with each unchanged built-in task that has a public hub copy read from that copy, when
    no data folder is given (:func:`data_folder_given`); otherwise ``specs`` as they are.

    A built-in task the user changed (other files, columns) is kept: the change was meant for files.
    """
    if data_folder_given(data_dir):
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


def local_folder(hf_path: str, data_dir: Path) -> Path | None:
    """The local folder ``hf_path`` names (working directory first, then ``data_dir``), or ``None``."""
    path = Path(hf_path).expanduser()
    candidates = [path] if path.is_absolute() else [path, data_dir / path]
    return next((c for c in candidates if c.is_dir()), None)


def is_saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk`` (read back with ``load_from_disk``)."""
    return any((folder / marker).is_file() for marker in _SAVED_MARKERS)


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


def load_error(spec: TaskSpec, err: BaseException) -> PalUserError:
    """The one-line error for a hub dataset that could not be loaded, naming both ways to get data."""
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
    """Every split of ``spec``'s dataset, by the dataset's split names (read once per process).

    Raises:
        PalUserError: when the dataset cannot be loaded (one line, naming the ways to get data).
    """
    assert spec.hf_path is not None
    import datasets

    folder = local_folder(spec.hf_path, data_dir)
    key = (str(folder.resolve()) if folder is not None else spec.hf_path, spec.hf_name)
    if key in _LOADED:
        return _LOADED[key]
    try:
        if folder is not None and is_saved_dataset(folder):
            loaded = datasets.load_from_disk(str(folder))
        else:
            loaded = datasets.load_dataset(str(folder) if folder is not None else spec.hf_path, spec.hf_name)
    except Exception as err:  # noqa: BLE001 - hub, network and format errors come in many types
        raise load_error(spec, err) from err
    # a saved single Dataset is one split: the training data
    splits = dict(loaded) if isinstance(loaded, Mapping) else {"train": loaded}
    _LOADED[key] = splits
    return splits


def clear_loaded() -> None:
    """Forget the datasets read so far (a test, or a long-lived process whose data changed)."""
    _LOADED.clear()


def has_split(spec: TaskSpec, hf_split: str, data_dir: Path) -> bool:
    """Whether ``spec``'s dataset has the split ``hf_split``."""
    return hf_split in load_splits(spec, data_dir)


def load_split(spec: TaskSpec, hf_split: str, data_dir: Path, our_split: str) -> Any:
    """The ``datasets.Dataset`` of split ``hf_split`` (our ``our_split``) of ``spec``'s dataset.

    Raises:
        PalUserError: when the dataset lacks that split (naming those it has and how to choose one).
    """
    splits = load_splits(spec, data_dir)
    if hf_split not in splits:
        raise PalUserError(
            f"The dataset {_describe(spec)} of task {spec.name!r} has no split {hf_split!r} (asked for as its "
            f"{our_split} split); its splits are {', '.join(sorted(splits)) or 'none'}. Name one of them in the "
            f"task's files (files: {{{our_split}: <split>}}), or leave {our_split} out of files."
        )
    return splits[hf_split]


def fingerprint(spec: TaskSpec, hf_split: str, data_dir: Path, our_split: str) -> str:
    """What identifies the rows of a split: the SHA-256 of the files ``datasets`` reads it from (the Hugging
    Face cache's Arrow files, whose folder names the hub revision, or a ``save_to_disk`` folder's); a
    dataset held only in memory is hashed through its Arrow table."""
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
    """The class names of a dataset's label ``column``: a ``ClassLabel``'s names, else its words sorted."""
    if ds is None or column not in ds.column_names:
        return ()
    names = getattr(ds.features.get(column), "names", None)
    return tuple(str(n) for n in names) if names else names_of_values(ds[column])


class HubDataset(RowSource):
    """A hub dataset or a local dataset folder, one split per our split (``files`` maps them)."""

    kind = "hub"

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        assert spec.hf_path is not None
        hf_split = spec.files.get(split, HF_DEFAULT_SPLITS[split] if not spec.files else None)
        return None if hf_split is None else Location(self.kind, spec.hf_path, hf_split, reader=self)

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        assert loc.hf_split is not None
        return dataset_rows(load_split(spec, loc.hf_split, data_dir, split), 1)

    def exists(self, spec: TaskSpec, loc: Location, data_dir: Path) -> bool:
        assert loc.hf_split is not None
        return has_split(spec, loc.hf_split, data_dir)

    def missing(self, spec: TaskSpec, split: str, loc: Location, data_dir: Path) -> str | None:
        assert loc.hf_split is not None
        load_split(spec, loc.hf_split, data_dir, split)  # one line when the split is missing
        return None

    def fingerprint(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> str:
        assert loc.hf_split is not None
        return "hf:" + fingerprint(spec, loc.hf_split, data_dir, split)

    def label_names(self, spec: TaskSpec, loc: Location, data_dir: Path) -> tuple[str, ...]:
        assert loc.hf_split is not None
        return dataset_label_names(load_split(spec, loc.hf_split, data_dir, "train"), str(spec.label_column))


def dataset_task(dataset: Any, folder: str | os.PathLike[str], **fields: Any) -> TaskSpec:
    """A ``format="hf"`` task reading a ``datasets.DatasetDict`` (or one ``Dataset``, its training split).

    The dataset is written to ``folder`` with ``save_to_disk`` (a run, its checkpoints and a resumed run then
    name a folder, never an object in memory) and the task reads it back with ``load_from_disk``.
    ``fields`` are the other :class:`~pal_lightning.tasks.specs.TaskSpec` fields (name, kind, columns, ...).

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
