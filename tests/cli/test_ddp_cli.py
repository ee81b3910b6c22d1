"""DDP end to end through the command line: ``pal-lightning fit`` with GEM on the shared parameters of a mixed
layer-sharing regime (F frozen + I individual layers, with PALs: unused parameters every step) on 2 CPU
processes (gloo), then a single-process ``validate`` and a 2-process ``predict`` of the checkpoint. Each
command's first process is forked from the session's CLI driver (``forked_cli``); Lightning starts rank 1
as from ``python -m pal_lightning``. Every check of a plain DDP fit (the same task at every step, disjoint
examples, bit-identical weights, one run folder) holds for it too, and GEM adds identical memories; plain
DDP fits through the CLI run in test_resume.py and test_torchrun_cli.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.testing import TINY_GEM as GEM
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli

pytestmark = pytest.mark.ddp

DDP = [
    "--trainer.accelerator",
    "cpu",
    "--trainer.devices",
    "2",
    "--trainer.strategy",
    "ddp",  # plain: the model tells it to find the unused tasks' parameters
]
N_DEV, N_TEST = 10, 6  # rows of every fixture dev and test file


def _setup(folder: Path, data: Path, gem: bool) -> Path:
    folder.mkdir()
    path = write_tiny_fit_config(folder, data)
    config: dict[str, Any] = yaml.safe_load(path.read_text())
    config["trainer"]["max_steps"] = 4  # 2 epochs of 2 steps: validation and last.ckpt after steps 2 and 4
    # TINY_BERT has two layers: the bottom one frozen, the top one a copy per task
    config["model"]["init_args"]["layer_sharing"] = "FI"
    callbacks: list[dict[str, Any]] = [
        {
            "class_path": "pal_lightning.testing.callbacks.RankRecorder",
            "init_args": {"out": str(folder / "record")},
        }
    ]
    config["trainer"]["callbacks"] = callbacks + ([GEM] if gem else [])
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _load(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / "record" / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ddp_cli")
    data = write_cs224n_data(root / "data")
    run, config = root / "gem", str(_setup(root / "gem", data, gem=True))
    (fit,) = forked_cli.run([(run, ["fit", "--config", config, *DDP])])
    assert fit.returncode == 0, fit.stderr[-4000:]
    # its checkpoint: validated by one process, predicted by two
    ckpt = str(run / "runs" / "version_0" / "checkpoints" / "last.ckpt")
    validate = ["validate", "--config", config, "--ckpt_path", ckpt]
    predict = ["predict", "--config", config, "--ckpt_path", ckpt, *DDP]
    evaluations = forked_cli.run([(run, validate), (run, predict)], 2)
    for name, proc in zip(("validate", "predict"), evaluations, strict=True):
        assert proc.returncode == 0, f"{name}: {proc.stderr[-4000:]}"
    return {"gem": run}


def test_both_ranks_same_tasks_disjoint_examples_identical_weights(runs: dict[str, Path]) -> None:
    r0, r1 = (_load(runs["gem"], f"fit_rank{r}") for r in (0, 1))
    assert (r0["rank"], r1["rank"], r0["world"]) == (0, 1, 2)
    assert len(r0["tasks"]) == len(r1["tasks"]) == 4
    for (step0, task0, ids0), (step1, task1, ids1) in zip(r0["tasks"], r1["tasks"], strict=True):
        assert (step0, task0) == (step1, task1)  # the same task at every step
        assert not set(ids0) & set(ids1)  # each rank its own share of the batch
    assert r0["params_digest"] == r1["params_digest"]  # bit-identical weights
    assert r0["gem"] == r1["gem"] and r0["gem"]["memory"]  # identical, non-empty memories
    assert len({task for _, task, _ in r0["tasks"]}) >= 2  # other tasks' layer copies unused at a step
    # the run wrote one folder, with one config and one last.ckpt (rank 1 logged where rank 0 did)
    run_dirs = sorted(p.name for p in (runs["gem"] / "runs").iterdir())
    assert run_dirs[0] == "version_0" and (runs["gem"] / "runs" / "version_0" / "config.yaml").is_file()
    keys = torch.load(runs["gem"] / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)[
        "state_dict"
    ].keys()
    for task in ("sst", "qqp", "sts"):
        assert any(k.startswith(f"encoder.individual.{task}.1.") for k in keys), task
    assert not any(k.startswith("encoder.backbone.encoder.layer.1.") for k in keys)  # the I layer's slot


def test_single_process_validation_of_the_checkpoint_matches_the_fit(runs: dict[str, Path]) -> None:
    fit = _load(runs["gem"], "fit_rank0")["val"]
    validated = _load(runs["gem"], "validate_rank0")["val"]
    assert {"val/overall", "val/sst/accuracy", "val/qqp/accuracy", "val/sts/pearson"} <= set(fit)
    assert set(validated) == set(fit)
    for key, value in fit.items():
        assert validated[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_ddp_metrics_csv_steps_and_steps_per_task(runs: dict[str, Path]) -> None:
    """Under DDP too: validations logged at the steps done, each row's steps per task counted by hand from
    the tasks rank 0 recorded, and the counts saved in last.ckpt for a resume (issue 18, item 8)."""
    run = runs["gem"] / "runs" / "version_0"
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["step"]) for r in rows if r.get("val/overall")) == [2, 4]
    tasks = ["sst", "qqp", "sts"]
    trained = {int(r["step"]): r for r in rows if r["train/task_index"]}
    counts = dict.fromkeys(tasks, 0)
    for step, task, _ in _load(runs["gem"], "fit_rank0")["tasks"]:
        counts[task] += 1
        assert {t: int(float(trained[step][f"train/steps/{t}"])) for t in tasks} == counts, step
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["TrainingLog"]
    assert saved["steps_per_task"] == counts


def test_ddp_predict_writes_every_file_once_with_every_id_once(runs: dict[str, Path]) -> None:
    out = runs["gem"] / "runs" / "version_0" / "predictions"
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test"))
    for path in out.iterdir():
        lines = path.read_text().splitlines()
        assert lines[0].startswith("id \t Predicted_")
        ids = [line.split(" , ")[0] for line in lines[1:]]
        assert len(ids) == len(set(ids)) == (N_DEV if "-dev-" in path.name else N_TEST), path.name
