"""Every file write of the library: atomic (a temporary file beside the target, fsync, ``os.replace``,
fsync of the folder), with the mode a plain ``open`` would give, and ``OSError`` s naming the target.

A reader (or a resumed run) sees the old file or the new one, never half of one; a failed write removes
its temporary file. Pure standard library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def current_umask() -> int:
    """The process's umask: from ``/proc`` on Linux, else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(path: str | os.PathLike[str]) -> int:
    """The permission bits ``open(path, "w")`` leaves: an existing file's own, else ``0o666 & ~umask``."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries to disk (makes a rename durable); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def naming_the_target(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise an ``OSError`` of writing ``path`` (or its temporary file) as the same type and ``errno``
    with ``path`` as its file name."""
    try:
        yield
    except OSError as err:
        if err.errno is None or err.filename == os.fspath(path):
            raise
        raise type(err)(err.errno, err.strerror or str(err), os.fspath(path)) from err


def _temp_beside(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")


def _publish(tmp: str, path: Path) -> None:
    """Give ``tmp`` the mode a plain write of ``path`` would have and move it over ``path``."""
    os.chmod(tmp, new_file_mode(path))
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "w", encoding: str | None = None, newline: str | None = None
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` (``mode`` ``"w"`` or ``"wb"``, UTF-8 by default; parents
    created); when the block ends without an error it replaces ``path`` atomically."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes whole files: mode must be 'w' or 'wb', not {mode!r}")
    path = Path(path)
    with naming_the_target(path):
        fd, tmp = _temp_beside(path)
        f: IO[Any]
        try:
            if mode == "wb":
                f = os.fdopen(fd, "wb")
            else:
                f = os.fdopen(fd, "w", encoding=encoding or "utf-8", newline=newline)
            with f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            _publish(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def atomic_write_text(
    path: str | os.PathLike[str], text: str, encoding: str = "utf-8", newline: str | None = None
) -> None:
    """Write ``text`` to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w", encoding=encoding, newline=newline) as f:
        f.write(text)


def atomic_write_via(path: str | os.PathLike[str], write: Callable[[str], Any]) -> None:
    """Atomic write for libraries that write by file name: ``write(tmp_name)`` fills the temporary file."""
    path = Path(path)
    with naming_the_target(path):
        fd, tmp = _temp_beside(path)
        os.close(fd)
        try:
            write(tmp)
            move_into_place(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def move_into_place(written: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Publish a finished file ``written`` (in ``path``'s folder) as ``path``: fsync, mode, atomic rename."""
    with naming_the_target(path):
        with open(written, "rb+") as f:
            os.fsync(f.fileno())
        _publish(os.fspath(written), Path(path))


@contextmanager
def staged_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Fill a temporary folder beside ``target``; when the block ends without an error, each of its files
    is published into ``target`` with :func:`move_into_place`; on an error nothing reaches ``target``."""
    target = Path(target)
    with naming_the_target(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        yield tmp
        target.mkdir(exist_ok=True)
        for item in sorted(tmp.rglob("*")):
            if item.is_file():
                dest = target / item.relative_to(tmp)
                dest.parent.mkdir(parents=True, exist_ok=True)
                move_into_place(item, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def atomic_link_or_copy(source: str | os.PathLike[str], alias: str | os.PathLike[str]) -> None:
    """Make ``alias`` a hard link to ``source`` (a copy where the file system has none), atomically."""
    alias = Path(alias)
    with naming_the_target(alias):
        fd, tmp = _temp_beside(alias)
        os.close(fd)
        os.unlink(tmp)  # os.link needs a free name; mkstemp only reserved a unique one
    try:
        os.link(source, tmp)
    except OSError:
        atomic_write_via(alias, lambda name: shutil.copyfile(source, name))
        return
    try:
        with naming_the_target(alias):
            os.replace(tmp, alias)
    finally:  # gone after a rename; left when alias already was a link to source (rename does nothing)
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(alias.parent)


def free_name(folder: str | os.PathLike[str], stem: str, suffixes: Sequence[str]) -> str:
    """``stem`` or the first ``stem_k`` (k = 1, 2, ...) for which no ``<folder>/<name><suffix>`` exists."""
    name, k = stem, 0
    while any(os.path.exists(os.path.join(folder, name + suffix)) for suffix in suffixes):
        k += 1
        name = f"{stem}_{k}"
    return name


def file_fingerprint(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
