"""Where a task's rows are and what reads them: the data folder (a relative file name is looked up there, then
in the working directory, only there beside the packaged demo set), and one source per ``TaskSpec.format``,
registered by name (:func:`register_source`). The functions below are what the data module asks; they
never look at a format themselves."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import file_fingerprint
from pal_lightning.data.sources.demo import DEMO_DATA, demo_data_dir
from pal_lightning.data.sources.validate import names_of_values
from pal_lightning.tasks.specs import TaskSpec

SPLITS = ("train", "dev", "test")


@dataclass
class Location:
    """Where one split of one task is read from, and the source that reads it."""

    kind: str
    """``file``, ``glue_data`` (a file of GLUE's download) or ``hub`` (a hub id or dataset folder)."""
    location: str
    """The local path, or the hub id."""
    reader: RowSource
    """The source that reads it."""
    hf_split: str | None = None
    """For hub sources: the split name on the hub."""

    @property
    def is_file(self) -> bool:
        return self.kind != "hub"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """The data directory: the argument, else ``$PAL_DATA_DIR``, else ``./data``; ``demo``: the packaged demo."""
    value = str(data_dir or "") or os.environ.get("PAL_DATA_DIR", "").strip() or "data"
    return demo_data_dir() if value == DEMO_DATA else Path(value).expanduser()


def looked_for(name: str, data_dir: Path) -> list[Path]:
    """The places a task's file ``name`` is looked for, in order."""
    path = Path(name).expanduser()
    if path.is_absolute():
        return [path]
    here = Path.cwd() / path
    if data_dir == demo_data_dir() and not (data_dir / path).is_file():
        return [here]
    return [data_dir / path, here]


def resolve_file(name: str, data_dir: Path) -> Path:
    """The first place ``name`` exists, else the first place looked (so messages name where it belongs)."""
    places = looked_for(name, data_dir)
    return next((p for p in places if p.is_file()), places[0])


#: (line number, or 1-based row number; the row by column name, extra fields under ``None``; the columns)
Row = tuple[int, dict[str | None, Any], list[str]]


class RowSource:
    """Reads the rows of one format; subclass it and :func:`register_source` it. The defaults serve a local
    file named in ``TaskSpec.files``."""

    kind = "file"

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        """Where ``split`` of ``spec`` is read from, or ``None`` when the task has no such split."""
        name = spec.files.get(split)
        if not name:
            return None
        return Location(self.kind, str(resolve_file(name, data_dir)), self)

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        """The rows of the split at ``loc``, in order."""
        raise NotImplementedError

    def exists(self, spec: TaskSpec, loc: Location, data_dir: Path) -> bool:
        """Whether the split at ``loc`` is there."""
        return Path(loc.location).is_file()

    def missing(self, spec: TaskSpec, split: str, loc: Location, data_dir: Path) -> str | None:
        """The split as the missing-files message names it (``None``: it is there)."""
        if self.exists(spec, loc, data_dir):
            return None
        given = spec.files[split]
        if data_dir == demo_data_dir() and not Path(given).expanduser().is_absolute():
            return f"{spec.name}/{split}: {given} (looked for {looked_for(given, data_dir)[0]})"
        return f"{spec.name}/{split}: {given}"

    def missing_hint(self, spec: TaskSpec, data_dir: Path) -> str:
        """Where missing files of ``spec`` can be had (a sentence, or ``""``)."""
        return ""

    def fingerprint(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> str:
        """What identifies the rows at ``loc`` (a changed one is tokenised again)."""
        return "file:" + file_fingerprint(loc.location)

    def label_names(self, spec: TaskSpec, loc: Location, data_dir: Path) -> tuple[str, ...]:
        """The class names the training split at ``loc`` spells."""
        column = spec.label_column
        return names_of_values(row.get(column) for _, row, _ in self.rows(spec, loc, data_dir, "train"))

    def has_header(self, loc: Location) -> bool:
        """Whether the file at ``loc`` has a header row (asked when it has no data row)."""
        return True


_SOURCES: dict[str, RowSource] = {}


def register_source(name: str, source: RowSource, *, overwrite: bool = False) -> RowSource:
    """Make ``source`` read the tasks whose ``format`` is ``name``.

    Raises:
        ValueError: if the name is taken and ``overwrite`` is false.
    """
    if name in _SOURCES and not overwrite:
        raise ValueError(f"Source format {name!r} is already registered; pass overwrite=True to replace it.")
    _SOURCES[name] = source
    return source


def source_for(spec: TaskSpec) -> RowSource:
    """The source registered under ``spec.format`` (PalUserError for an unknown one)."""
    try:
        return _SOURCES[spec.format]
    except KeyError:
        raise PalUserError(
            f"Task {spec.name!r}: unknown format {spec.format!r}; choose from {sorted(_SOURCES)} "
            "(or register a source with pal_lightning.data.sources.register_source)."
        ) from None


def resolve_source(spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
    """Where ``split`` of ``spec`` comes from (``None``: no such split)."""
    return source_for(spec).locate(spec, split, data_dir)


def source_exists(spec: TaskSpec, loc: Location | None, data_dir: Path) -> bool:
    """Whether the split at ``loc`` is there."""
    return loc is not None and loc.reader.exists(spec, loc, data_dir)


def split_fingerprint(spec: TaskSpec, split: str, data_dir: Path) -> str:
    """What identifies the rows of ``split`` of ``spec``."""
    loc = resolve_source(spec, split, data_dir)
    assert loc is not None
    return loc.reader.fingerprint(spec, loc, data_dir, split)


def check_files_exist(requests: Sequence[tuple[TaskSpec, str]], data_dir: Path) -> None:
    """Raise one :class:`PalUserError` listing every missing split of ``requests`` (task, split)."""
    missing: list[str] = []
    hints: dict[str, None] = {}
    for spec, split in requests:
        loc = resolve_source(spec, split, data_dir)
        entry = None if loc is None else loc.reader.missing(spec, split, loc, data_dir)
        if loc is not None and entry is not None:
            missing.append(entry)
            hints[loc.reader.missing_hint(spec, data_dir)] = None
    if not missing:
        return
    where = f" in {data_dir.resolve()} (nor in the working directory {Path.cwd()})"
    where = "" if data_dir == demo_data_dir() else where
    raise PalUserError(
        f"Data files not found{where}: "
        + "; ".join(missing)
        + ". Point at the folder holding them with --data.data_dir PATH (data_dir=... in Python) "
        "or the environment variable PAL_DATA_DIR; without either, ./data is searched. A relative name "
        "in a task's files is looked up in that folder, then in the working directory." + "".join(hints)
    )
