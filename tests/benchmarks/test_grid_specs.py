"""Every grid spec under ``benchmarks/specs/`` (``benchmarks/grid.py --spec``) is one the grid can run: its
methods name config files that exist and arguments the CLI's dotted form, and it says how it is run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "benchmarks" / "specs").glob("*.json"))
QUICKSTART = {"configs": ["configs/quickstart.yaml"]}
grid = load_benchmark("grid")


@pytest.mark.parametrize("spec_file", SPECS, ids=[p.stem for p in SPECS])
def test_spec_names_existing_configs_and_cli_options(spec_file: Path) -> None:
    spec = json.loads(spec_file.read_text())
    assert "benchmarks/grid.py" in spec["about"], "the spec says how it is run"
    runs = grid.grid_runs(spec)
    assert runs and all(isinstance(seed, int) for _, seed in runs)
    for method, entry in spec["methods"].items():
        assert entry["configs"], method
        for config in entry["configs"]:
            assert (ROOT / config).is_file(), (method, config)
        for arg in [*spec.get("common_args", []), *entry.get("args", [])]:
            assert arg.startswith("--") and "=" in arg, (method, arg)


def test_there_are_specs() -> None:
    assert len(SPECS) >= 10


def test_seeds_option_keeps_those_seeds_and_refuses_unknown_ones() -> None:
    spec = {"seeds": [42, 43, 44], "methods": {"a": {"configs": []}, "b": {"configs": [], "seeds": [44, 45]}}}
    assert grid.grid_runs(spec) == [("a", 42), ("a", 43), ("a", 44), ("b", 44), ("b", 45)]
    assert grid.grid_runs(spec, [44, 43]) == [("a", 43), ("a", 44), ("b", 44)]
    assert grid.grid_runs(spec, [45]) == [("b", 45)]
    with pytest.raises(ValueError, match=r"\[46\] are not in the spec"):
        grid.grid_runs(spec, [42, 46])


def test_resume_skips_finished_runs_and_continues_the_others_from_their_newest_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume``: the finished seed is skipped, the cut one continues from the newest ``last.ckpt`` of its
    folder (an earlier sitting's resumed run wrote version_1's), every fit writes ``last.ckpt`` every
    ``checkpoint_every`` steps; without ``--resume`` every run starts afresh. (The fits are recorded,
    not run: that a fit resumed from ``last.ckpt`` is the uninterrupted one is tests/cli/test_resume.py's.)"""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"seeds": [1, 2], "checkpoint_every": 5, "methods": {"a": QUICKSTART}}))
    out = tmp_path / "out"
    lasts = [out / "a" / "seed2" / f"version_{v}" / "checkpoints" / "last.ckpt" for v in (0, 1)]
    for last in lasts:
        last.parent.mkdir(parents=True)
        last.write_bytes(b"")
    records = [{"method": "a", "seed": 1, "status": "ok"}, {"method": "a", "seed": 2, "status": "timeout"}]
    (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ran: list[tuple[list[str], str]] = []

    def fake_run(cmd: list[str], root: Path, log: Path, *rest: object) -> tuple[str, float, None]:
        ran.append((cmd, log.name))
        return "ok", 1.0, None

    monkeypatch.setattr(grid, "run_logged", fake_run)
    common = ["--spec", str(spec), "--out", str(out), "--data-dir", str(tmp_path), "--jobs", "1"]
    assert grid.main([*common, "--resume"]) == 0
    ((cmd, log),) = ran
    assert "--seed_everything=2" in cmd and "--last_checkpoint.every_n_train_steps=5" in cmd
    assert f"--ckpt_path={lasts[1]}" in cmd and log == "fit_resumed_version_1.log"
    assert "a seed 1: finished" in capsys.readouterr().out
    record = json.loads((out / "runs.jsonl").read_text().splitlines()[-1])
    assert (record["seed"], record["status"], record["resumed_from"]) == (2, "ok", str(lasts[1]))

    ran.clear()
    assert grid.main(common) == 0
    assert [next(a for a in c if a.startswith("--seed_everything")) for c, _ in ran] == [
        "--seed_everything=1",
        "--seed_everything=2",
    ]
    assert not any(a.startswith("--ckpt_path") for c, _ in ran for a in c)


#: Specs and options the grid refuses (exit 2, one line, nothing created): the spec, the options, the line.
BAD = {
    "unknown seed": (
        {"seeds": [42], "methods": {"a": QUICKSTART}},
        ["--seeds", "7"],
        "[7] are not in the spec",
    ),
    **{
        f"checkpoint_every={every!r}": (
            {"seeds": [42], "checkpoint_every": every, "methods": {"a": {"configs": []}}},
            [],
            f"checkpoint_every in {{spec}} is {every!r}: give a whole number of steps",
        )
        for every in (0, "50", 2.5, True)
    },
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_spec_or_option_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    content, options, message = BAD[case]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as exit_info:
        grid.main(
            ["--spec", str(spec), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path), *options]
        )
    assert exit_info.value.code == 2
    assert message.format(spec=spec) in capsys.readouterr().err
    assert not (tmp_path / "out").exists(), "nothing is created for a refused grid"


def test_summarizing_a_missing_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        grid.main(["--summarize", str(tmp_path / "runs.jsonl")])
    assert exit_info.value.code == 2
    assert f"no such runs.jsonl: {tmp_path / 'runs.jsonl'}" in capsys.readouterr().err
