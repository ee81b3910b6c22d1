"""Crash-safe checkpoint files (Lightning's ``TorchCheckpointIO`` syncs nothing: a kill can leave a truncated
``last.ckpt``), and one :class:`~pal_lightning.core.errors.PalUserError` for a file that cannot be read."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_bytes

#: The first bytes of a zip archive, the format ``torch.save`` writes since PyTorch 1.6.
_ZIP_MAGIC = b"PK\x03\x04"
#: The pickled magic number that opens ``torch.save``'s legacy format (after the pickle protocol header).
_LEGACY_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def not_a_checkpoint(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when its first bytes show that ``torch.save`` did not write it, else ``None``."""
    with open(path, "rb") as f:
        head = f.read(512)
    if not head:
        return "an empty file"
    if head.startswith(_ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except zipfile.BadZipFile:
            return None  # a checkpoint cut short has no zip directory: reported as truncated when loaded
        if any(name.rsplit("/", 1)[-1] == "data.pkl" for name in names):
            return None
        return "a zip archive without the data.pkl of a PyTorch checkpoint"
    if head.startswith(b"\x80") and _LEGACY_MAGIC in head[:32]:
        return None  # torch.save's legacy (pre-1.6) format
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if text and all(c.isprintable() or c.isspace() for c in text):
        return "a text file"
    return "a file that torch.save did not write"


def check_is_checkpoint(path: str | os.PathLike[str]) -> None:
    """Raise a :class:`PalUserError` naming ``path`` when it is not a checkpoint (:func:`not_a_checkpoint`)."""
    what = not_a_checkpoint(path)
    if what is not None:
        raise PalUserError(
            f"{path} is not a checkpoint: it is {what}. Give a .ckpt file written by pal-lightning fit "
            "(runs/<name>/version_N/checkpoints/best.ckpt or last.ckpt; on the command line also "
            "--ckpt_path best or last with the run's config.yaml)."
        )


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic local writes and one-line errors for unreadable files.

    Remote paths keep Lightning's behaviour. The CLI installs it; in Python pass
    ``Trainer(plugins=[AtomicCheckpointIO()])``.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike[str], storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, os.fspath(path), storage_options)
            return
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)  # serialised first: a failure here touches no file
        atomic_write_bytes(path, buffer.getbuffer())

    def load_checkpoint(
        self, path: str | os.PathLike[str], map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if "://" not in str(path):
            if not Path(path).is_file():
                raise PalUserError(
                    f"Checkpoint {path} does not exist. Pass the path of a .ckpt file to --ckpt_path "
                    "(or --ckpt_path last for the newest last.ckpt of this run folder)."
                )
            check_is_checkpoint(path)  # before torch.load: its errors for such files mislead
        try:
            return super().load_checkpoint(
                os.fspath(path), map_location=map_location, weights_only=weights_only
            )
        except pickle.UnpicklingError as err:
            if "weights_only" in str(err).lower() or "weights only" in str(err).lower():
                lines = [line.strip() for line in str(err).splitlines() if "Unsupported global" in line]
                what = lines[0].split(" was not an allowed global")[0] if lines else "objects beyond tensors"
                raise PalUserError(
                    f"Checkpoint {path} holds objects that safe (weights_only) loading refuses ({what}). "
                    "Checkpoints can run code when unpickled: if you trust this file, load it with "
                    "--weights_only false (weights_only=False in Python); otherwise do not use it."
                ) from err
            raise _unreadable(path, err) from err
        except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as err:
            raise _unreadable(path, err) from err


def _unreadable(path: str | os.PathLike[str], err: BaseException) -> PalUserError:
    # torch's messages run on for several sentences: the first says what failed
    reason = str(err).splitlines()[0].split(". ")[0] if str(err) else type(err).__name__
    return PalUserError(
        f"Checkpoint {path} cannot be read (truncated or not a checkpoint: {reason}). Resume from an "
        f"earlier checkpoint in {Path(str(path)).parent}, or start a new run without --ckpt_path."
    )
