"""``benchmarks/gpu_parts.sh``: files too large for one device call travel in pieces, one folder per call,
and come back whole (every checksum checked) or not at all."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_parts.sh"


def run(*args: str | Path, piece_bytes: int = 1000) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PIECE_BYTES": str(piece_bytes)},
    )


def test_split_keep_join_round_trip_and_refuse_a_missing_piece(tmp_path: Path) -> None:
    sources = tmp_path / "wheels"
    sources.mkdir()
    files = {f"part_{i}.whl": os.urandom(size) for i, size in enumerate((2500, 1200, 37))}
    for name, data in files.items():
        (sources / name).write_bytes(data)
    carry = tmp_path / "carry"
    split = run("split", carry, *sorted(sources.iterdir()))
    assert split.returncode == 0, split.stderr
    calls = sorted(carry.iterdir())
    # one tar of the three files (plus tar's headers) cut into 1000-byte pieces, one per call folder
    assert [c.name for c in calls] == [f"{i:02d}" for i in range(1, len(calls) + 1)] and len(calls) >= 4
    for call in calls:
        pieces = [p for p in call.iterdir() if p.name != "manifest.sha256"]
        assert len(pieces) == 1 and pieces[0].stat().st_size <= 1000
        assert (call / "manifest.sha256").is_file()
    store = tmp_path / "store"  # what the warm machine keeps between calls
    for call in calls:
        assert run("keep", call, store).returncode == 0
    joined = run("join", store, tmp_path / "whole")
    assert joined.returncode == 0, joined.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "whole").iterdir()} == files

    (store / "files.tar.002").unlink()  # one call missed
    broken = run("join", store, tmp_path / "again")
    assert broken.returncode == 2 and "join:" in broken.stderr
    assert run("split", carry / "x", tmp_path / "no such file").returncode == 2
    assert run("unknown").returncode == 2
