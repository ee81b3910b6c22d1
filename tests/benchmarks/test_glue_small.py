"""benchmarks/glue_small.py without running a model: the dev scores read from ``test``'s scores, the GLUE
average, the summary's paired intervals by hand on written records, the budgets and the resumable skip."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from .conftest import load_benchmark

TASKS = ("glue_cola", "glue_sst2", "glue_mrpc", "glue_stsb", "glue_rte")


@pytest.fixture(scope="module")
def bench():  # noqa: ANN201 - a module
    return load_benchmark("glue_small")


def _record(system: str, seed: int, rte: float, average: float) -> dict:
    dev = {t: {"accuracy": 0.5} for t in TASKS} | {"glue_rte": {"accuracy": rte}}
    return {
        "system": system,
        "seed": seed,
        "status": "ok",
        "glue_average": average,
        "dev": dev,
        "wall_s": 1.0,
    }


def test_dev_scores_and_the_glue_average_from_test_scores(bench) -> None:  # noqa: ANN001
    parts = [
        {"dev": {"test/glue_rte/accuracy": 0.6, "test/glue_rte/loss": 0.7, "test/overall": 0.6}},
        {"dev": {"test/glue_mrpc/accuracy": 0.8, "test/glue_mrpc/f1": 0.9}},
    ]
    assert bench.dev_scores(parts) == {
        "glue_rte": {"accuracy": 0.6},
        "glue_mrpc": {"accuracy": 0.8, "f1": 0.9},
    }
    assert bench.stored_parameters([{"parameters": {"total": 3}}, {"parameters": {"total": 4}}]) == 7
    assert bench.stored_parameters([{"parameters": {"total": 3}}, {}]) is None


def test_summary_pairs_seeds_by_hand(bench, tmp_path: Path) -> None:  # noqa: ANN001
    for system, averages in {"pals": (0.71, 0.73, 0.70), "shared": (0.69, 0.70, 0.68)}.items():
        for seed, average in zip((1, 2, 3), averages, strict=True):
            path = tmp_path / system / f"seed{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_record(system, seed, average, average)))
    summary = bench.summarize(tmp_path)
    assert summary["systems"]["pals"]["glue_average"]["mean"] == pytest.approx(0.7133333)
    (claim,) = summary["claims"]  # pals - shared only: no separate, LoRA or bottleneck records
    diffs = [0.02, 0.03, 0.02]
    mean = sum(diffs) / 3
    half = 4.302652729911275 * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2) / math.sqrt(3)  # t_0.975,2
    assert claim["glue_average"]["mean"] == pytest.approx(mean)
    assert claim["glue_average"]["low"] == pytest.approx(mean - half, abs=1e-3) and mean - half > 0
    assert claim["glue_average"]["verdict"] == "A better" and claim["glue_rte"]["verdict"] == "A better"
    assert "| pals - shared | glue_average | +0.0233 |" in (tmp_path / "summary.md").read_text()


def test_budgets_and_a_finished_run_is_skipped(
    bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    steps = bench.separate_steps("minilm")
    assert steps == {"glue_cola": 378, "glue_sst2": 1336, "glue_mrpc": 249, "glue_stsb": 308, "glue_rte": 209}
    args = bench.parse_args(["--scale", "0.5", "--systems", "pals", "--seeds", "7", "--out", str(tmp_path)])
    assert args.label == "minilm-scale0.5"
    budget = "--trainer.max_steps={}", "--data.init_args.steps_per_epoch={}"
    assert bench.budget_args("pals", None, args) == [budget[0].format(1240), budget[1].format(310)]
    assert bench.budget_args("separate", "glue_rte", args) == [budget[0].format(105), budget[1].format(105)]
    done = tmp_path / "minilm-scale0.5" / "pals" / "seed7.json"
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps(_record("pals", 7, 0.5, 0.5)))
    bench.run_grid(args)  # nothing to run: the record exists
    assert "skip pals seed 7" in capsys.readouterr().out


def test_units_run_side_by_side_longest_first_and_records_join_their_parts(
    bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """``--jobs``: a separate system's five tasks are five units; each unit's options are its own (a shared
    list once leaked one task's ``--model.init_args.tasks`` into the others' tests); the records join the
    parts; a unit that would start past the deadline does not run and its record is ``failed``."""
    seen: list[tuple[str, str | None, list[str]]] = []

    def fake(system, seed, task, args, env):  # noqa: ANN001, ANN202
        options = list(bench.budget_args(system, task, args))
        if task is not None:
            options.append(f"--model.init_args.tasks=[{task}]")
        seen.append((system, task, options))
        dev = {f"test/{t}/accuracy": 0.5 for t in ([task] if task else TASKS)}
        return {"task": task, "fit_status": "ok", "test_status": "ok", "fit_wall_s": 1.0, "test_wall_s": 1.0,
                "dev": dev, "parameters": {"total": 10}}  # fmt: skip

    monkeypatch.setattr(bench, "fit_and_test", fake)
    monkeypatch.setattr(bench, "device", lambda: "test")
    args = bench.parse_args(
        ["--jobs", "1", "--systems", "pals,separate", "--seeds", "1", "--out", str(tmp_path)]
    )
    bench.run_units([("pals", 1), ("separate", 1)], tmp_path, args, {})
    assert [(s, t) for s, t, _ in seen][:2] == [("pals", None), ("separate", "glue_sst2")]  # longest first
    assert bench.budget_args("pals", None, args) == []  # the configs' own budget, never appended to
    tiny = bench.parse_args(["--tiny"])
    bench.budget_args("separate", "glue_rte", tiny).append("--model.init_args.tasks=[glue_rte]")
    assert bench.budget_args("pals", None, tiny) == bench.TINY  # nothing a caller appended stays
    separate = json.loads((tmp_path / "separate" / "seed1.json").read_text())
    assert separate["status"] == "ok" and separate["stored_parameters"] == 50 and separate["wall_s"] == 10.0
    assert set(separate["dev"]) == set(TASKS)
    args.deadline_at = 0.0  # long past: nothing starts
    bench.run_units([("pals", 2)], tmp_path, args, {})
    late = json.loads((tmp_path / "pals" / "seed2.json").read_text())
    assert late["status"] == "failed" and late["parts"][0]["fit_status"].startswith("not started")
