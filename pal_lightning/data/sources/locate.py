"""Where a task's rows are: the data folder, and a relative file name looked up there, then in the working
directory (only there beside the packaged demo set)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pal_lightning.data.sources.demo import DEMO_DATA, demo_data_dir

if TYPE_CHECKING:
    from pal_lightning.data.sources.registry import RowSource

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
