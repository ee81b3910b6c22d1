"""pal_lightning.core.files: atomic writes with the modes a plain open gives (issue 18, item 3), and the
library's writers (checkpoints, predictions, task weights) going through it."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from pal_lightning.core.files import (
    atomic_link_or_copy,
    atomic_write,
    atomic_write_bytes,
    atomic_write_text,
    atomic_write_via,
    current_umask,
    free_name,
    new_file_mode,
    staged_folder,
)


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_files_get_the_mode_of_a_plain_open(tmp_path: Path, umask: int) -> None:
    assert current_umask() == umask
    plain = tmp_path / "plain.txt"
    with open(plain, "w") as f:  # the reference: what open() does under this umask
        f.write("x")
    expected = {0o022: 0o644, 0o002: 0o664, 0o077: 0o600}[umask]
    assert _mode(plain) == expected
    atomic_write_text(tmp_path / "a.txt", "hello")
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    atomic_write_via(tmp_path / "c.bin", lambda name: Path(name).write_bytes(b"abc"))
    for name in ("a.txt", "b.bin", "c.bin"):
        assert _mode(tmp_path / name) == expected, name
    assert (tmp_path / "a.txt").read_text() == "hello" and (tmp_path / "c.bin").read_bytes() == b"abc"
    assert new_file_mode(tmp_path / "missing") == expected


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.csv"
    path.write_text("old")
    os.chmod(path, 0o640)
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o640


def test_a_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "scores.json"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(path) as f:
            f.write("half")
            raise RuntimeError("boom")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == []

    atomic_write_text(path, "good")

    def fail(name: str) -> None:
        Path(name).write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_via(path, fail)
    assert sorted(p.name for p in path.parent.iterdir()) == ["scores.json"]
    assert path.read_text() == "good"
    with pytest.raises(ValueError, match="whole files"):
        with atomic_write(path, "a"):
            pass


def test_two_writers_of_one_file_use_different_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    with atomic_write(path, "wb") as first, atomic_write(path, "wb") as second:
        # two distinct temporary files, beside the target (so that the rename stays atomic)
        temps = sorted(p.name for p in tmp_path.iterdir())
        assert len(temps) == 2 and all(t.startswith(".last.ckpt.") and t.endswith(".tmp") for t in temps)
        first.write(b"first")
        second.write(b"second")
    assert path.read_bytes() == b"first"  # the outer context finished last
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_free_name(tmp_path: Path) -> None:
    assert free_name(tmp_path, "config", [".yaml"]) == "config"
    (tmp_path / "config.yaml").write_text("")
    (tmp_path / "config_1.yaml").write_text("")
    assert free_name(tmp_path, "config", [".yaml"]) == "config_2"
    (tmp_path / "continual.json").write_text("")
    assert free_name(tmp_path, "continual", [".csv", ".json"]) == "continual_1"


def test_linking_an_alias_that_already_links_the_source_leaves_no_temporary_file(tmp_path: Path) -> None:
    # rename() onto a hard link of the same file does nothing, so the temporary link stayed behind
    (tmp_path / "step=4.ckpt").write_bytes(b"weights")
    for _ in range(2):
        atomic_link_or_copy(tmp_path / "step=4.ckpt", tmp_path / "best.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "step=4.ckpt"]
    assert (tmp_path / "best.ckpt").read_bytes() == b"weights"


def test_checkpoints_predictions_and_task_weights_are_readable_by_others(tmp_path: Path) -> None:
    from pal_lightning import MultiTaskModule, save_task_weights
    from pal_lightning.callbacks.prediction_writer import write_prediction_file
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
    from pal_lightning.testing import TINY_BERT

    old = os.umask(0o022)
    try:
        ckpt = tmp_path / "checkpoints" / "last.ckpt"
        AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(2)}}, ckpt)
        preds = tmp_path / "predictions" / "sst-dev-output.csv"
        write_prediction_file(preds, "Predicted_Sentiment", [("a", 1), ("b", 3)])
        model = MultiTaskModule(tasks=["sst"], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
        weights = save_task_weights(model, tmp_path / "sst.safetensors")
        pretrained = model.save_pretrained(tmp_path / "model")
    finally:
        os.umask(old)
    saved = sorted(Path(pretrained).iterdir())
    assert {p.name for p in saved} >= {"config.json", "model.safetensors"}
    for path in (ckpt, preds, Path(weights), *saved):
        assert _mode(path) == 0o644, path
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.parent.name != "model") == [
        "last.ckpt",
        "sst-dev-output.csv",
        "sst.safetensors",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    loaded = AtomicCheckpointIO().load_checkpoint(ckpt)
    assert torch.equal(loaded["state_dict"]["w"], torch.ones(2))


def test_staged_folder_publishes_every_file_or_nothing(tmp_path: Path) -> None:
    from pal_lightning.core.files import staged_folder

    target = tmp_path / "model"
    with staged_folder(target) as tmp:
        (tmp / "a.txt").write_text("a")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.txt").write_text("b")
    assert (target / "a.txt").read_text() == "a" and (target / "sub" / "b.txt").read_text() == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # the temporary folder is gone

    failed = tmp_path / "failed"
    with pytest.raises(RuntimeError), staged_folder(failed) as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("disk full")
    assert not failed.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def _enospc_on_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up when a finished temporary file is moved into place."""
    import pal_lightning.core.files as files

    def full(tmp: str, path: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", tmp)  # names the temporary file

    monkeypatch.setattr(files, "_publish", full)


def test_a_disk_fault_names_the_target_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scores.json"
    path.write_text("earlier")
    _enospc_on_publish(monkeypatch)
    writers = [
        lambda: atomic_write_text(path, "new"),
        lambda: atomic_write_via(path, lambda tmp: Path(tmp).write_text("new")),
    ]
    for write in writers:
        with pytest.raises(OSError) as caught:
            write()
        assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(path))
        assert "No space left on device" in str(caught.value) and str(path) in str(caught.value)
        assert path.read_text() == "earlier"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]  # no temporary file

    folder = tmp_path / "model"
    with pytest.raises(OSError) as caught:
        with staged_folder(folder) as tmp:
            (tmp / "config.json").write_text("{}")
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(folder / "config.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "scores.json"]
    assert list(folder.iterdir()) == []


def test_a_read_only_folder_names_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def read_only(dir: str, prefix: str, suffix: str) -> tuple[int, str]:
        raise OSError(errno.EROFS, "Read-only file system", os.path.join(dir, prefix + "x" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    path = tmp_path / "last.ckpt"
    with pytest.raises(OSError) as caught:
        atomic_write_bytes(path, b"weights")
    assert (caught.value.errno, caught.value.filename) == (errno.EROFS, str(path))
    assert not path.exists()
