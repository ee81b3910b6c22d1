"""SimCSE under DDP: embeddings gathered from 2 gloo ranks, gradients into the local rows only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pal_lightning.testing import free_port

pytestmark = pytest.mark.ddp

SCRIPT = Path(__file__).with_name("simcse_ddp_script.py")


def test_gathered_negatives_match_a_single_process(tmp_path: Path, forked_cli: Any) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # python SCRIPT FOLDER PORT, forked from the session's driver (forked_cli, tests/conftest.py)
    proc = forked_cli.run_script(tmp_path, SCRIPT, [str(tmp_path), str(free_port())], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank, offset in ((0, 0), (1, 3)):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert r["offset"] == offset and r["gathered_equal"], r
        assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-6)
        assert r["grad_z1_close"] and r["grad_z2_close"], r
        assert r["module_loss"] == pytest.approx(r["module_ref"], rel=1e-5)
    # rank 0 masks only the 4 partners; rank 1 also its duplicated sentence (a1 == b0, both ways)
    assert json.loads((tmp_path / "rank0.json").read_text())["masked"] == 4
    assert json.loads((tmp_path / "rank1.json").read_text())["masked"] == 6
