"""Run folders (``<default_root_dir>/version_N``) and which checkpoint ``--ckpt_path last`` / ``best`` means."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from pal_lightning.core.distributed import decided_by_rank_zero, is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_via, free_name

NAMED_CHECKPOINTS = {"last": "last*.ckpt", "best": "best.ckpt"}
_KEEP = ("*.ckpt", "predictions/*")


def _version(path: Path) -> int:
    match = re.fullmatch(r"version_(\d+)", path.name)
    return int(match.group(1)) if match else -1


def next_version_dir(root: str | os.PathLike[str]) -> str:
    """The ``version_N`` name after the highest one used under ``root``."""
    root = Path(root)
    used = [_version(child) for child in root.iterdir()] if root.is_dir() else []
    return f"version_{max(used, default=-1) + 1}"


def claim_version_dir(root: str | os.PathLike[str]) -> Path:
    """Create and return the next free ``<root>/version_N`` (``mkdir`` fails on a taken name: no race)."""
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
    """The newest file (by time, then ``version_N``) matching ``pattern`` in ``<root>/[*/]checkpoints/``."""
    root = Path(root)
    found = [p for sub in (f"*/checkpoints/{pattern}", f"checkpoints/{pattern}") for p in root.glob(sub)]
    files = [p for p in found if p.is_file()]
    return max(files, key=lambda p: (p.stat().st_mtime_ns, _version(p.parent.parent))) if files else None


def run_folder_of(config_files: Iterable[str | os.PathLike[str]]) -> Path | None:
    """The run folder (with ``checkpoints/``) of the last such ``--config`` file, if any."""
    runs = [folder for c in config_files if ((folder := Path(c).resolve().parent) / "checkpoints").is_dir()]
    return runs[-1] if runs else None


def resolve_named_checkpoint(name: str, root: str | os.PathLike[str], run: Path | None) -> Path:
    """The file ``--ckpt_path last`` / ``best`` stands for: in ``run`` when given, else the newest under ``root``."""
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
    """``<run>/<subcommand>`` for a checkpoint in a writable ``<run>/checkpoints/``, else ``None``."""
    folder = Path(ckpt).resolve().parent
    if folder.name != "checkpoints" or not os.access(folder.parent, os.W_OK):
        return None
    return folder.parent / subcommand


def discard_unused(folder: str | os.PathLike[str], stop: str | os.PathLike[str] | None = None) -> bool:
    """Remove ``folder`` and its empty parents below ``stop`` unless it holds results; whether it was removed."""
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
    try:
        with open(csv_file, encoding="utf-8") as f:
            return sum(1 for line in f if line.strip()) > 1
    except OSError:
        return False


_SHARED_VERSION = "RUN_VERSION"
# log folders this process created, with the topmost folder it created for each (removed on failure)
_NEW_FOLDERS: list[tuple[Path, Path]] = []


def run_loggers(root_dir: str | os.PathLike[str]) -> list[Any]:
    """CSV and TensorBoard loggers writing into the same fresh ``<root_dir>/version_N`` folder."""
    # absolute: ModelCheckpoint records absolute folders, compared later with --ckpt_path's
    root = os.path.abspath(root_dir)
    # a rank > 0 that torchrun/srun started only peeks: claiming would leave an empty folder
    peek = lambda: next_version_dir(root).split("_")[-1]  # noqa: E731
    version = int(decided_by_rank_zero(_SHARED_VERSION, root, lambda: _new_version(root), peek))
    return [
        CSVLogger(save_dir=root, name="", version=version),
        # no hp_metric: it would stay at its placeholder -1
        TensorBoardLogger(
            save_dir=root, name="", version=version, sub_dir="tensorboard", default_hp_metric=False
        ),
    ]


def _new_version(root: str) -> str:
    top = Path(root)
    while not top.parent.exists() and top.parent != top:
        top = top.parent  # the topmost folder this run creates, when root does not exist yet
    created_root = not Path(root).exists()
    folder = claim_version_dir(root)
    _NEW_FOLDERS.append((folder, top if created_root else folder))
    return folder.name.split("_")[-1]


def discard_new_folders() -> None:
    """Remove the log folders this failed command created, unless they hold results."""
    while _NEW_FOLDERS:
        folder, top = _NEW_FOLDERS.pop()
        discard_unused(folder, stop=top.parent)


class RunConfigSaver(SaveConfigCallback):
    """Save the resolved config into the run folder atomically, as ``config_1.yaml`` ... when taken."""

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        log_dir = None if self.already_saved or not self.save_to_log_dir else trainer.log_dir
        if log_dir is None or self.multifile or "://" in log_dir:
            super().setup(trainer, pl_module, stage)  # Lightning's own writer (several or remote files)
            return
        if is_main_process(trainer):
            name = self.config_filename
            if not self.overwrite:
                stem, suffix = os.path.splitext(name)
                name = free_name(log_dir, stem, (suffix,)) + suffix
            self.config_filename = name

            def write(tmp: str) -> None:  # what Lightning's setup writes
                self.parser.save(self.config, tmp, skip_none=False, overwrite=True, multifile=False)

            atomic_write_via(os.path.join(log_dir, name), write)
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        # every rank, as Lightning's setup does
        self.config_filename = trainer.strategy.broadcast(self.config_filename)
        self.already_saved = trainer.strategy.broadcast(self.already_saved)
