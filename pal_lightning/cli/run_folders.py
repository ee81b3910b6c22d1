"""Where a command's files go, and which checkpoint ``--ckpt_path last`` / ``best`` means.

A *run folder* is ``<default_root_dir>/version_N``: ``config.yaml``, ``metrics.csv``,
``checkpoints/`` (``best-step...ckpt``, its alias ``best.ckpt`` and ``last.ckpt``), predictions.

* ``validate``/``test``/``predict`` of a checkpoint inside a run folder log into that run:
  ``<run>/validate/version_N`` (``test``, ``predict`` likewise; predictions go to
  ``<run>/predictions``), not into a new run of their own (:func:`evaluation_log_root`);
* ``--ckpt_path last`` (``best``) together with a run's own ``config.yaml`` means that run's
  ``last.ckpt`` (``best.ckpt``); with any other config, the newest such file under
  ``trainer.default_root_dir`` (:func:`resolve_named_checkpoint`);
* a folder a failed command created is removed again unless it holds results: a checkpoint,
  predictions or logged metrics (:func:`discard_unused`), so a refused command leaves nothing behind
  while a run that failed after training some steps keeps its logs.

Pure path logic: no Lightning import.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from pal_lightning.core.errors import PalUserError

#: ``--ckpt_path`` values that name a checkpoint of a run rather than a file.
NAMED_CHECKPOINTS = {"last": "last*.ckpt", "best": "best.ckpt"}
#: Sub-folders of a run that hold results a user keeps, even from a failed command.
_KEEP = ("*.ckpt", "predictions/*")


def _version(path: Path) -> int:
    match = re.fullmatch(r"version_(\d+)", path.name)
    return int(match.group(1)) if match else -1


def next_version_dir(root: str | os.PathLike[str]) -> str:
    """The ``version_N`` name after the highest one used under ``root`` (``version_0`` for a new root)."""
    root = Path(root)
    used = [_version(child) for child in root.iterdir()] if root.is_dir() else []
    return f"version_{max(used, default=-1) + 1}"


def claim_version_dir(root: str | os.PathLike[str]) -> Path:
    """Create the next free ``<root>/version_N`` folder and return it.

    Creating a folder fails when the name exists, so two runs started at the same moment into the
    same root get different folders: the one that loses the race takes the next number.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    while True:
        folder = root / next_version_dir(root)
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # another run took this number between the scan and the mkdir
        return folder


def find_newest(root: str | os.PathLike[str], pattern: str) -> Path | None:
    """The newest file matching ``pattern`` in ``<root>/*/checkpoints/`` or ``<root>/checkpoints/``.

    Newest by modification time, ties broken by the higher ``version_N``.
    """
    root = Path(root)
    found = [p for sub in (f"*/checkpoints/{pattern}", f"checkpoints/{pattern}") for p in root.glob(sub)]
    files = [p for p in found if p.is_file()]
    return max(files, key=lambda p: (p.stat().st_mtime_ns, _version(p.parent.parent))) if files else None


def run_folder_of(config_files: Iterable[str | os.PathLike[str]]) -> Path | None:
    """The run folder a ``--config`` file was saved into (its folder holds ``checkpoints/``), if any.

    The last such file wins, as the last ``--config`` wins in the configuration.
    """
    found = None
    for config in config_files:
        folder = Path(config).resolve().parent
        if (folder / "checkpoints").is_dir():
            found = folder
    return found


def resolve_named_checkpoint(name: str, root: str | os.PathLike[str], run: Path | None) -> Path:
    """The file ``--ckpt_path last`` / ``best`` stands for: in ``run`` when given, else newest under ``root``.

    Raises:
        PalUserError: when there is no such file, saying where it looked and what to do.
    """
    pattern = NAMED_CHECKPOINTS[name]
    if run is not None:
        files = [p for p in (run / "checkpoints").glob(pattern) if p.is_file()]
        if files:
            return max(files, key=lambda p: p.stat().st_mtime_ns)
        where = f"{run / 'checkpoints'} (the run of the --config file)"
    else:
        found = find_newest(root, pattern)
        if found is not None:
            return found
        where = f"under {Path(root)} (--ckpt_path {name} looks for */checkpoints/{pattern} there)"
    why = (
        "best.ckpt is written when a validation that covers every scored task improves val/overall"
        if name == "best"
        else "last.ckpt is written at every validation"
    )
    what = "last.ckpt to resume from" if name == "last" else "best.ckpt to load from"
    raise PalUserError(
        f"No {what} {where}: {why}. Pass a checkpoint file to --ckpt_path, point "
        "--trainer.default_root_dir at the folder holding the run's version_N folders, or use the "
        "config.yaml saved in the run folder."
    )


def evaluation_log_root(ckpt: str | os.PathLike[str], subcommand: str) -> Path | None:
    """``<run>/<subcommand>`` for a checkpoint in ``<run>/checkpoints/``, else ``None`` (a run of its own).

    Also ``None`` when this user cannot write into ``<run>`` (a colleague's run, read-only): the
    evaluation then logs into a new run folder under ``trainer.default_root_dir``.
    """
    folder = Path(ckpt).resolve().parent
    if folder.name != "checkpoints" or not os.access(folder.parent, os.W_OK):
        return None
    return folder.parent / subcommand


def discard_unused(folder: str | os.PathLike[str], stop: str | os.PathLike[str] | None = None) -> bool:
    """Remove ``folder`` (a run's log folder made by a failed command) unless it holds results.

    Results are checkpoints, prediction files and a ``metrics.csv`` with at least one row (a run
    that failed after logging some steps). Empty parents up to (not including) ``stop`` go too.
    Returns whether the folder was removed.
    """
    folder = Path(folder)
    if not folder.is_dir() or any(any(folder.rglob(pattern)) for pattern in _KEEP):
        return False
    if any(_has_rows(p) for p in folder.rglob("metrics.csv")):
        return False
    shutil.rmtree(folder, ignore_errors=True)
    parent = folder.parent
    while stop is not None and parent != Path(stop) and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
    return not folder.exists()


def _has_rows(csv_file: Path) -> bool:
    """Whether a CSV file holds a row below its header."""
    try:
        with open(csv_file, encoding="utf-8") as f:
            return sum(1 for line in f if line.strip()) > 1
    except OSError:
        return False
