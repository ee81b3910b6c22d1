"""A file that is no checkpoint at all, given to --ckpt_path, is named as such in one line (issue "A user's
own task, end to end", item 6); the weights_only advice is kept for a real checkpoint that needs it."""

from __future__ import annotations

import fractions
import os
import zipfile
from pathlib import Path

import pytest
import torch

from pal_lightning.cli.main import main
from pal_lightning.core.checkpoint_io import AtomicCheckpointIO, not_a_checkpoint
from pal_lightning.core.errors import PalUserError

ROOT = Path(__file__).resolve().parents[2]
TRUST_ADVICE = "--weights_only false"


def _files(folder: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the message says it is)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "random.ckpt").write_bytes(os.urandom(4096).replace(b"\x80", b"\x81").replace(b"PK", b"pk"))
    (folder / "empty.ckpt").write_bytes(b"")
    (folder / "notes.ckpt").write_text("id\tsentence\n1\thello\n")
    with zipfile.ZipFile(folder / "archive.ckpt", "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")
    return {
        "README.md": (ROOT / "README.md", "it is a text file"),
        "random bytes": (folder / "random.ckpt", "it is a file that torch.save did not write"),
        "empty": (folder / "empty.ckpt", "it is an empty file"),
        "text": (folder / "notes.ckpt", "it is a text file"),
        "zip": (folder / "archive.ckpt", "it is a zip archive without the data.pkl of a PyTorch checkpoint"),
    }


@pytest.mark.parametrize("name", ["README.md", "random bytes", "empty", "text", "zip"])
def test_the_cli_names_a_file_that_is_not_a_checkpoint(
    tmp_path: Path, tiny_yaml: Path, name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    path, what = _files(tmp_path / "files")[name]
    before = path.read_bytes()
    code = main(["validate", "--config", str(tiny_yaml), "--ckpt_path", str(path)])
    out, err = capfd.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert lines == [
        f"pal-lightning: error: {path} is not a checkpoint: {what}. Give a .ckpt file written by pal-lightning "
        "fit (runs/<name>/version_N/checkpoints/best.ckpt or last.ckpt; on the command line also --ckpt_path "
        "best or last with the run's config.yaml)."
    ]
    assert TRUST_ADVICE not in err and "Traceback" not in out + err
    assert path.read_bytes() == before and not (tmp_path / "runs").exists()


def test_text_predict_names_a_file_that_is_not_a_checkpoint(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("id,sentence\n1,a fine film\n")
    args = ["predict", "--predict.task", "sst", "--predict.input", str(source)]
    assert main([*args, "--ckpt_path", str(ROOT / "README.md")]) == 2
    err = capfd.readouterr().err
    assert f"pal-lightning: error: {ROOT / 'README.md'} is not a checkpoint: it is a text file." in err
    assert TRUST_ADVICE not in err and "Traceback" not in err


def test_the_trust_advice_stays_for_a_real_checkpoint(tmp_path: Path) -> None:
    real = tmp_path / "objects.ckpt"
    torch.save({"state_dict": {}, "ratio": fractions.Fraction(1, 3)}, real)
    assert not_a_checkpoint(real) is None
    with pytest.raises(PalUserError, match="holds objects that safe .weights_only. loading refuses") as info:
        AtomicCheckpointIO().load_checkpoint(real, weights_only=True)
    assert TRUST_ADVICE in str(info.value)
    # torch.save's legacy format is a checkpoint too
    legacy = tmp_path / "legacy.ckpt"
    torch.save({"state_dict": {"w": torch.ones(1)}}, legacy, _use_new_zipfile_serialization=False)
    assert not_a_checkpoint(legacy) is None
    assert AtomicCheckpointIO().load_checkpoint(legacy, weights_only=True)["state_dict"]["w"].item() == 1.0
