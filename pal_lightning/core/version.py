"""The library's version, recorded in every saved model and checkpoint, and which versions read each
other's files: before 1.0 within a minor series (0.1.x), from 1.0 on within a major version."""

from __future__ import annotations

__version__ = "0.3.0"


def compatibility_series(version: str) -> str:
    """The versions that read each other's files: ``"0.1"`` for 0.1.x, ``"2"`` for 2.x.y."""
    parts = str(version).split(".")
    return ".".join(parts[:2]) if parts[0] == "0" else parts[0]


def reads_files_of(saved: str | None, ours: str = __version__) -> bool:
    """Whether this version (``ours``) reads a file written by version ``saved`` (``None``: unrecorded)."""
    return saved is not None and compatibility_series(saved) == compatibility_series(ours)


def version_mismatch(what: str, saved: str | None, ours: str = __version__) -> str:
    """The message for a file written by a version this one does not read: what wrote it, and the fix."""
    wrote = f"pal-lightning {saved}" if saved else "a pal-lightning version that did not record itself"
    pin = (
        f"pip install 'pal-lightning=={compatibility_series(saved)}.*'" if saved else "an older pal-lightning"
    )
    return (
        f"{what} was written by {wrote}; this is pal-lightning {ours}, which does not read it (no compatibility "
        f"promise before 1.0). Load it with that version ({pin}), or train/save it again with this one."
    )
