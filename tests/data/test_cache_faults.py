"""The tokenisation cache under outside faults: damaged files are rebuilt with a warning, racing writers
leave no torn file, and an unwritable cache slows the run but does not stop it."""

from __future__ import annotations

import errno
import logging
import multiprocessing
import zipfile
from pathlib import Path

import numpy as np
import pytest

import pal_lightning.core.files as files
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.tokenize import Encoded, TokenizedSplit, load_cached, save_cached


def _dm(data_dir: Path, cache: Path) -> MultiTaskDataModule:
    return MultiTaskDataModule(data_dir=str(data_dir), cache_dir=cache, tasks=["qqp"], batch_size=4)


def _same(a: TokenizedSplit, b: TokenizedSplit) -> bool:
    arrays = [(a.ids, b.ids), (a.labels, b.labels)]
    arrays += [
        (getattr(a.encodings[s], f), getattr(b.encodings[s], f))
        for s in a.encodings
        for f in ("input_ids", "token_type_ids", "offsets")
    ]
    return (
        a.encodings.keys() == b.encodings.keys()
        and all(np.array_equal(x, y) for x, y in arrays)
        and (a.task, a.split, a.rows, a.bad_rows, a.source) == (b.task, b.split, b.rows, b.bad_rows, b.source)
    )


def _resaved(path: Path, change: str) -> bytes:
    """The cache file rewritten as a valid ``.npz`` whose arrays do not fit together."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if change == "ids_short":
        arrays["ids"] = arrays["ids"][:-1]
    elif change == "offsets_past_end":
        arrays["offsets"] = arrays["offsets"].copy()
        arrays["offsets"][-1] += 5
    elif change == "labels_short":
        arrays["labels"] = arrays["labels"][:-2]
    elif change == "types_short":
        arrays["token_type_ids"] = arrays["token_type_ids"][:-1]
    elif change == "offsets_decreasing":
        arrays["offsets"] = arrays["offsets"].copy()
        arrays["offsets"][1], arrays["offsets"][2] = arrays["offsets"][2], arrays["offsets"][1]
    out = path.with_suffix(".tmp.npz")
    np.savez(out, **arrays)
    data = out.read_bytes()
    out.unlink()
    return data


DAMAGES = {
    "empty": lambda p, data: b"",
    "half": lambda p, data: data[: len(data) // 2],
    "last_byte_missing": lambda p, data: data[:-1],
    "garbage": lambda p, data: np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8).tobytes(),
    "byte_flipped": lambda p, data: (
        data[: len(data) // 3] + bytes([data[len(data) // 3] ^ 0xFF]) + data[len(data) // 3 + 1 :]
    ),
    "ids_short": lambda p, data: _resaved(p, "ids_short"),
    "offsets_past_end": lambda p, data: _resaved(p, "offsets_past_end"),
    "labels_short": lambda p, data: _resaved(p, "labels_short"),
    "types_short": lambda p, data: _resaved(p, "types_short"),
    "offsets_decreasing": lambda p, data: _resaved(p, "offsets_decreasing"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_cache_file_is_rebuilt_with_a_warning(
    damage: str, data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    original = _dm(data_dir, cache).load_split("qqp", "train")
    (path,) = (cache / "tokenized").glob("qqp-train-*.npz")
    good = path.read_bytes()
    path.write_bytes(DAMAGES[damage](path, good))
    assert path.read_bytes() != good

    with caplog.at_level(logging.WARNING, logger="pal_lightning.data.tokenize"):
        rebuilt = _dm(data_dir, cache).load_split("qqp", "train")
    assert _same(rebuilt, original)
    warnings = [r.getMessage() for r in caplog.records if "cache file" in r.getMessage()]
    assert len(warnings) == 1 and str(path) in warnings[0] and "rebuilt" in warnings[0]
    # the file was written again, whole: the next run reads it without a warning
    assert path.read_bytes() == good
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file


def _split(n: int, seed: int) -> TokenizedSplit:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    enc = Encoded(
        rng.integers(0, 30000, offsets[-1]).astype(np.int32), np.zeros(offsets[-1], np.int8), offsets
    )
    ids = np.array([f"id{i}" for i in range(n)])
    return TokenizedSplit("sst", "train", ids, rng.integers(0, 5, n), {"": enc}, n, [], "src.csv")


def _write_many(path: str, seed: int, times: int) -> None:
    for _ in range(times):
        save_cached(Path(path), _split(4000, seed))  # the same content from every writer, as in practice


def test_concurrent_writers_never_leave_a_torn_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tokenized" / "sst-train-key.npz"
    expected = _split(4000, 3)
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_write_many, args=(str(path), 3, 15)) for _ in range(4)]
    for w in writers:
        w.start()
    reads = 0
    with caplog.at_level(logging.WARNING, logger="pal_lightning.data.tokenize"):
        while any(w.is_alive() for w in writers):
            got = load_cached(path)  # absent (None) or a whole file, never half of one
            if got is not None:
                assert _same(got, expected)
                reads += 1
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert not [r for r in caplog.records if "cache file" in r.getMessage()]  # no torn file was ever seen
    assert reads > 0
    final = load_cached(path)
    assert final is not None and _same(final, expected)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_cache_that_cannot_be_written_warns_and_the_split_is_still_served(
    code: int,
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    reference = _dm(data_dir, False).load_split("qqp", "train")  # type: ignore[arg-type]

    def refused(tmp: str, target: Path) -> None:
        raise OSError(code, "refused", tmp)

    monkeypatch.setattr(files, "_publish", refused)  # the disk refuses when the file is moved into place
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="pal_lightning.data.split_cache"):
        served = _dm(data_dir, cache).load_split("qqp", "train")
    assert _same(served, reference)
    (warning,) = [r.getMessage() for r in caplog.records if "tokenisation cache" in r.getMessage()]
    assert (
        "qqp-train-" in warning and ".npz" in warning and ".tmp" not in warning
    )  # the file, not its temporary
    assert list((cache / "tokenized").iterdir()) == []  # nothing half-written, no temporary file


def test_zipfile_checks_what_the_cache_relies_on(tmp_path: Path) -> None:
    """The byte-flip case relies on zip's CRC-32 being checked when numpy reads a member (stored, not
    compressed): a damaged member raises instead of returning wrong numbers."""
    path = tmp_path / "a.npz"
    np.savez(path, x=np.arange(1000, dtype=np.int64))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises((zipfile.BadZipFile, ValueError, OSError)):
        with np.load(path) as z:
            z["x"]
