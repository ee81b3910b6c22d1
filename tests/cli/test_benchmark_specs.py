"""Every grid spec under ``benchmarks/specs/`` (``benchmarks/grid.py --spec``) is one the grid can run: its
methods name config files that exist and arguments the CLI's dotted form, and it says how it is run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "benchmarks" / "specs").glob("*.json"))


@pytest.mark.parametrize("spec_file", SPECS, ids=[p.stem for p in SPECS])
def test_spec_names_existing_configs_and_cli_options(spec_file: Path) -> None:
    spec = json.loads(spec_file.read_text())
    assert "benchmarks/grid.py" in spec["about"], "the spec says how it is run"
    runs = load_benchmark("grid").grid_runs(spec)
    assert runs and all(isinstance(seed, int) for _, seed in runs)
    for method, entry in spec["methods"].items():
        assert entry["configs"], method
        for config in entry["configs"]:
            assert (ROOT / config).is_file(), (method, config)
        for arg in [*spec.get("common_args", []), *entry.get("args", [])]:
            assert arg.startswith("--") and "=" in arg, (method, arg)


def test_there_are_specs() -> None:
    assert len(SPECS) >= 10
