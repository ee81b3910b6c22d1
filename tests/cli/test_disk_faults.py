"""A full, read-only or forbidden disk while ``predict`` writes predictions or ``validate``/``test`` write
``scores.json`` (issue 13, item 2; the checkpoint case is in test_run_folders.py): exit status 2, one
line naming the file, its cause and the fix, no traceback, every earlier file unchanged (hashes), no
temporary file left behind, and nothing new but the failed evaluation's own run folder when it logged
scores (the run-folder rule: a folder with metrics.csv rows is a result).

The faults are injected in :mod:`pal_lightning.core.files` (tests run as root here, where ``chmod`` does not
stop a write): ``_temp_beside`` (creating the temporary file: a read-only or forbidden folder) or
``_publish`` (moving the finished file into place: the disk fills up)."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import Any

import pytest

import pal_lightning.core.files as files
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("disk_faults")
    config = write_tiny_fit_config(root, write_cs224n_data(root / "data"))
    assert main(["fit", "--config", str(config)]) == 0
    ckpt = root / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    assert main(["predict", "--config", str(config), "--ckpt_path", str(ckpt)]) == 0
    return {"root": root, "config": config, "ckpt": ckpt}


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    } | {str(p.relative_to(folder)) + "/": "" for p in folder.rglob("*") if p.is_dir()}


def _inject(monkeypatch: pytest.MonkeyPatch, name: str, code: int, where: str) -> list[str]:
    """Make writes of files called ``name`` fail with ``code`` at ``where``; returns the files refused."""
    refused: list[str] = []
    original: Any = getattr(files, where)

    def faulty(tmp_or_path: Any, path: Any = None) -> Any:
        target = Path(path if path is not None else tmp_or_path)
        if target.name == name:
            refused.append(str(target))
            raise OSError(code, "refused", str(tmp_or_path))  # names the temporary file, as the OS would
        return original(tmp_or_path) if path is None else original(tmp_or_path, path)

    monkeypatch.setattr(files, where, faulty)
    return refused


FIXES = {
    errno.ENOSPC: "free some disk space",
    errno.EROFS: "pick a writable folder",
    errno.EACCES: "check the folder's permissions",
}

CASES = [
    ("predict", ["--predictions.overwrite", "true"], "sts-dev-output.csv", errno.ENOSPC, "_publish"),
    ("predict", ["--predictions.overwrite", "true"], "sst-dev-output.csv", errno.EROFS, "_temp_beside"),
    ("validate", [], "scores.json", errno.EROFS, "_temp_beside"),
    ("validate", [], "scores.json", errno.ENOSPC, "_publish"),
    ("test", [], "scores.json", errno.EACCES, "_publish"),
]


@pytest.mark.parametrize(
    ("command", "extra", "name", "code", "where"),
    CASES,
    ids=[f"{c[0]}-{c[2]}-{errno.errorcode[c[3]]}" for c in CASES],
)
def test_a_disk_fault_is_one_line_and_changes_nothing(
    trained: dict[str, Path],
    command: str,
    extra: list[str],
    name: str,
    code: int,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = trained["root"] / "runs"
    if name.endswith(".csv"):  # an earlier prediction file the failed write must not touch
        (runs / "version_0" / "predictions" / name).write_text("earlier\n")
    before = _digests(runs)
    capsys.readouterr()

    refused = _inject(monkeypatch, name, code, where)
    args = [command, "--config", str(trained["config"]), "--ckpt_path", str(trained["ckpt"]), *extra]
    assert main(args) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("pal-lightning: error:")]
    assert len(lines) == 1, err[-2000:]
    assert len(refused) == 1
    assert f"{refused[0]}: refused" in lines[0]  # the file itself, not its temporary name
    assert FIXES[code] in lines[0]
    after = _digests(runs)
    assert {k: after.get(k) for k in before} == before  # every earlier file unchanged
    added = sorted(set(after) - set(before))
    assert not [k for k in added if k.endswith(".tmp") or "/.tmp" in k or ".tmp-" in k]  # no temporary file
    # at most the failed command's own new run folder, kept when it holds logged scores (metrics.csv rows)
    own = f"version_0/{command}/"
    assert all(k.startswith(own) for k in added), added
    if added:
        assert any(k.endswith("metrics.csv") for k in added)
