"""A project built on pal-lightning, driven as its user would drive it (issue 43, last item): ``my_mtl`` (in this
folder, on PYTHONPATH as ``PYTHONPATH=. pal-lightning ...`` puts it) has a ``MultiTaskModule`` subclass with
parameters of its own (learned log-variances in an optimizer group of their own, an MLP head for SST), a data
module subclass drawing by the package's registered sampling rule, and a callback that records each rank's run.

One module-scoped chain of ``pal-lightning`` command lines (each forked from the session's CLI driver): a
2-process gloo fit with plain ``--trainer.strategy ddp`` and ``--model.class_path my_mtl.UncertaintyWeighted``,
the same fit stopped by SIGTERM after step 2 and resumed with ``--ckpt_path last``, and a continual run with
``configs/continual_gem.yaml``'s settings on the tiny setup; then, in this process, ``save_pretrained`` of the
resumed model and ``UncertaintyWeighted.from_pretrained`` of it."""

from __future__ import annotations

import csv
import importlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml
from cli.forked import ForkedCli, subprocess_env

from pal_lightning.data.sampling import schedules
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

pytestmark = pytest.mark.ddp

HERE = Path(__file__).resolve().parent  # holds the package my_mtl
CONFIGS = HERE.parents[1] / "configs"
MODEL = ["--model.class_path", "my_mtl.UncertaintyWeighted", "--model.init_args.mlp_hidden", "12"]
DDP = ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp"]
STEPS, STOP_AT = 4, 2  # one epoch of 4 steps: the stop is mid-epoch
TRAIN_ROWS = {"sst": 8, "qqp": 24, "sts": 24}  # sst small: capped_inverse draws it more often per example
MIN_P = 0.1  # FlooredData's floor
TASKS = list(TRAIN_ROWS)
SENTENCES = ["a fine film .", "dull and far too long ."]


@pytest.fixture(scope="module")
def my_mtl() -> Iterator[ModuleType]:
    """The package imported here too, for the checks in this process; afterwards its rule is unregistered
    (other test files of this process list the registered rules). The package stays imported: jsonargparse
    finds its classes among MultiTaskModule's subclasses, and would import it again, rule and all."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedules, "_RULES", dict(schedules._RULES))
        yield importlib.import_module("my_mtl")


def _env() -> dict[str, str]:
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    return env


def _data(folder: Path) -> Path:
    """The fixture data with SST's training split cut to :data:`TRAIN_ROWS` (the tasks' sizes then differ)."""
    data = write_cs224n_data(folder, n_train=max(TRAIN_ROWS.values()))
    sst = data / "ids-sst-train.csv"
    sst.write_text("\n".join(sst.read_text().splitlines()[: 1 + TRAIN_ROWS["sst"]]) + "\n")
    return data


def _config(folder: Path, data: Path, callbacks: list[dict[str, Any]]) -> dict[str, Any]:
    """The tiny fit config of the package's data module and callback (the model comes from :data:`MODEL`)."""
    folder.mkdir(parents=True)
    config: dict[str, Any] = yaml.safe_load(write_tiny_fit_config(folder, data).read_text())
    config["trainer"]["max_steps"] = STEPS
    config["data"]["class_path"] = "my_mtl.FlooredData"
    config["data"]["init_args"].update(
        sampling="capped_inverse", min_probability=MIN_P, steps_per_epoch=STEPS
    )
    config["trainer"]["callbacks"] = [_recorder(folder / "record"), *callbacks]
    return config


def _recorder(out: Path) -> dict[str, Any]:
    """The package's callback, writing each rank's record into ``out``."""
    return {"class_path": "my_mtl.TaskVarianceLog", "init_args": {"out": str(out)}}


def _write(folder: Path, config: dict[str, Any]) -> None:
    (folder / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, name = dotted.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[name] = value


def _continual(config: dict[str, Any]) -> None:
    """``configs/continual_gem.yaml`` over its base ``continual_naive.yaml`` (their dotted keys; not the
    quickstart's model and data beneath them), sized for the tiny setup: 2 steps per task, small memories."""
    gem = yaml.safe_load((CONFIGS / "continual_gem.yaml").read_text())
    naive = yaml.safe_load((CONFIGS / gem.pop("config")).read_text())
    naive.pop("config")
    settings = {**naive, **gem}
    for key in ("trainer.default_root_dir", "data.init_args.batch_size"):  # the tiny run's own
        settings.pop(key)
    settings["data.init_args.steps_per_task"] = 2
    callbacks = settings.pop("trainer.callbacks")
    [memory] = [c["init_args"] for c in callbacks if c["class_path"] == "pal_lightning.gem.GEMCallback"]
    memory.update(memory_size=8, memory_batch_size=2)  # were 256 and 16
    for key, value in settings.items():
        _set(config, key, value)
    config["trainer"]["callbacks"][1:] = callbacks  # after the package's recorder


def _fit(cwd: Path, *args: str) -> tuple[Path, list[str], dict[str, str]]:
    return cwd, ["fit", "--config", "tiny.yaml", *MODEL, *args], _env()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[str, Any]:
    """The uninterrupted and the stopped 2-process fit, then the resume and the continual run (two at a time)."""
    root = tmp_path_factory.mktemp("downstream")
    data = _data(root / "data")
    stop = {
        "class_path": "pal_lightning.testing.callbacks.SignalAtStep",
        "init_args": {"step": STOP_AT, "signal_name": "SIGTERM", "rank": 1},
    }
    _write(root / "full", _config(root / "full", data, []))
    _write(root / "stopped", _config(root / "stopped", data, [stop]))
    continual = _config(root / "continual", data, [])
    _continual(continual)
    _write(root / "continual", continual)
    out: dict[str, Any] = {"root": root}
    out["full"], out["stopped"] = forked_cli.run(
        [_fit(root / "full", *DDP), _fit(root / "stopped", *DDP)], workers=2
    )
    out["saved"] = torch.load(
        root / "stopped" / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
    )
    # the same command again, without the stop, from the last checkpoint (its records in a folder of their own)
    again = json.dumps([_recorder(root / "stopped" / "resumed_record")])
    resume = _fit(root / "stopped", *DDP, "--trainer.callbacks", again, "--ckpt_path", "last")
    out["resumed"], out["continual"] = forked_cli.run([resume, _fit(root / "continual")], workers=2)
    return out


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr[-4000:]


def _records(folder: Path, name: str = "record") -> tuple[dict[str, Any], ...]:
    files = sorted((folder / name).glob("rank*.json"))
    return tuple(json.loads(f.read_text()) for f in files)


def _last(folder: Path, version: int = 0) -> dict[str, Any]:
    return torch.load(folder / "runs" / f"version_{version}" / "checkpoints" / "last.ckpt", weights_only=True)


def test_ddp_fit_of_the_subclass_ranks_identical_own_parameters_included(runs: dict[str, Any]) -> None:
    _ok(runs["full"])
    r0, r1 = _records(runs["root"] / "full")
    assert (r0["rank"], r1["rank"], r0["world"]) == (0, 1, 2)
    assert [s["task"] for s in r0["steps"]] == [s["task"] for s in r1["steps"]]  # the same task every step
    assert len(r0["steps"]) == STEPS
    assert r0["digest"] == r1["digest"]  # every weight, log_vars and the MLP head included
    assert r0["log_vars"] == r1["log_vars"]
    trained = {s["task"] for s in r0["steps"]}
    for i, task in enumerate(TASKS):  # a task's log-variance moves once it has been trained
        assert (r0["log_vars"][i] != 0.0) == (task in trained), (task, r0["log_vars"])
    # parameter_group_of put log_vars alone in its own group, without weight decay
    assert r0["log_vars_group"] == {"name": "log_vars", "size": 1, "weight_decay": 0.0}
    final = _last(runs["root"] / "full")
    assert final["global_step"] == STEPS
    assert final["hyper_parameters"]["mlp_hidden"] == 12  # --model.init_args on the command line
    state = final["state_dict"]
    assert state["log_vars"].tolist() == pytest.approx(r0["log_vars"])
    assert state["heads.sst.net.1.weight"].shape[0] == state["heads.sst.net.3.weight"].shape[1] == 12  # MLP


def test_the_package_sampling_rule_is_what_the_run_drew_with(
    runs: dict[str, Any], my_mtl: ModuleType
) -> None:
    """capped_inverse (sizes 8, 24, 24: weights 3, 1, 1) under FlooredData's floor, as the training log wrote
    it at the epoch's start: the probabilities the sampler drew from."""
    largest = max(TRAIN_ROWS.values())
    weights = {t: min(largest / n, my_mtl.CAP) for t, n in TRAIN_ROWS.items()}
    assert weights == my_mtl.capped_inverse(TRAIN_ROWS, 0, None)
    rule = {t: w / sum(weights.values()) for t, w in weights.items()}
    expected = {t: (1 - len(TASKS) * MIN_P) * p + MIN_P for t, p in rule.items()}
    assert expected == pytest.approx({"sst": 0.52, "qqp": 0.24, "sts": 0.24})
    with open(runs["root"] / "full" / "runs" / "version_0" / "metrics.csv", newline="") as f:
        [row] = [r for r in csv.DictReader(f) if r.get("sampling/p_sst")]
    assert {t: float(row[f"sampling/p_{t}"]) for t in TASKS} == pytest.approx(expected, abs=1e-9)


def test_stopped_and_resumed_ddp_run_ends_as_the_uninterrupted_one(runs: dict[str, Any]) -> None:
    stopped = runs["stopped"]
    assert stopped.returncode == 143, stopped.stderr[-4000:]  # SIGTERM after step 2
    assert runs["saved"]["global_step"] == STOP_AT
    assert runs["saved"]["state_dict"]["log_vars"].abs().sum() > 0
    resumed = runs["resumed"]
    _ok(resumed)
    assert "resuming from" in resumed.stderr
    folder = runs["root"] / "stopped"
    final, reference = _last(folder, version=1), _last(runs["root"] / "full")
    assert final["global_step"] == reference["global_step"] == STEPS
    assert final["state_dict"].keys() == reference["state_dict"].keys()
    assert {"log_vars", "heads.sst.net.1.weight"} <= final["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name
    assert final["FlooredData"] == reference["FlooredData"]  # the same position in the task plan
    r0, r1 = _records(folder, "resumed_record")  # the resume's ranks
    assert r0["digest"] == r1["digest"] and len(r0["steps"]) == STEPS - STOP_AT


def test_save_pretrained_then_the_subclass_from_pretrained_predicts_the_same(
    runs: dict[str, Any], my_mtl: ModuleType, tmp_path: Path
) -> None:
    UncertaintyWeighted, MLPHead = my_mtl.UncertaintyWeighted, my_mtl.MLPHead  # noqa: N806 - class names
    _ok(runs["resumed"])
    ckpt = runs["root"] / "stopped" / "runs" / "version_1" / "checkpoints" / "last.ckpt"
    module = UncertaintyWeighted.load_from_checkpoint(ckpt, map_location="cpu", weights_only=True).eval()
    folder = module.save_pretrained(tmp_path / "saved")
    loaded = UncertaintyWeighted.from_pretrained(folder)
    assert isinstance(loaded.heads["sst"], MLPHead) and loaded.hparams["mlp_hidden"] == 12
    assert torch.equal(loaded.log_vars, module.log_vars)
    pairs = [("how do i learn python ?", "what is the best way to learn python ?"), ("a cat", "a dog")]
    for task, texts in (("sst", SENTENCES), ("qqp", pairs), ("sts", pairs)):
        ours, theirs = module.predict(task, texts), loaded.predict(task, texts)
        assert ours.classes == theirs.classes and ours.scores == theirs.scores, task
        if ours.probabilities is not None:
            assert theirs.probabilities is not None
            assert (ours.probabilities == theirs.probabilities).all(), task
    # the folder fit itself wrote (its best checkpoint) loads through the subclass too, as fit said
    model = runs["root"] / "full" / "runs" / "version_0" / "model"
    said = (
        f"pal-lightning: saved the model to {model} (load it with UncertaintyWeighted.from_pretrained; "
        "pal-lightning predict needs --model.class_path my_mtl.model.UncertaintyWeighted)"
    )
    assert said in runs["full"].stdout
    written = UncertaintyWeighted.from_pretrained(model)
    assert isinstance(written.heads["sst"], MLPHead)


def test_continual_gem_run_of_the_subclass(runs: dict[str, Any]) -> None:
    _ok(runs["continual"])
    folder = runs["root"] / "continual"
    (record,) = _records(folder)
    # the sequential phases of continual_naive.yaml, 2 steps per task here
    assert [s["task"] for s in record["steps"]] == ["sst", "sst", "qqp", "qqp", "sts", "sts"]
    assert all(v != 0.0 for v in record["log_vars"])  # every task's log-variance trained in its phase
    run = folder / "runs" / "version_0"
    continual = json.loads((run / "continual.json").read_text())
    assert len(continual["R"]) == 3 and all(len(row) == 3 for row in continual["R"])
    gem = _last(folder)["callbacks"]["GEMCallback"]
    assert gem["task_order"] == TASKS
    assert all(gem["memory"]["buffers"][task] for task in TASKS[:2])  # what constrained the later phases


# ---- pipeline and pal-lightning predict on the saved subclass: the user names its class (the file never does)


def _subclass_pipeline(folder: Path, task: str) -> Any:
    """``pal_lightning.pipeline`` on the subclass's saved folder."""
    import pal_lightning

    return pal_lightning.pipeline(folder, task=task, model_class="my_mtl.UncertaintyWeighted")


def _subclass_predict(folder: Path, task: str, source: Path) -> list[str]:
    """``pal-lightning predict`` of ``source`` with the subclass's saved folder."""
    return [
        *("predict", "--predict.model", str(folder), "--predict.task", task, "--predict.input", str(source)),
        *("--model.class_path", "my_mtl.UncertaintyWeighted"),
    ]


def test_pipeline_and_cli_predict_of_the_saved_subclass(
    runs: dict[str, Any], my_mtl: ModuleType, tmp_path: Path, forked_cli: ForkedCli
) -> None:
    """What fit saved (<run>/model) predicts through pipeline and the command line as the subclass loaded by
    its own from_pretrained does."""
    folder = runs["root"] / "full" / "runs" / "version_0" / "model"
    expected = my_mtl.UncertaintyWeighted.from_pretrained(folder).predict("sst", SENTENCES)
    assert expected.labels is not None and expected.probabilities is not None
    piped = _subclass_pipeline(folder, "sst")(SENTENCES)
    assert [p["label"] for p in piped] == expected.labels
    assert [p["score"] for p in piped] == pytest.approx(expected.probabilities.max(axis=1).tolist(), abs=1e-6)
    source = tmp_path / "mine.csv"
    source.write_text("id,sentence\n" + "".join(f"r{i},{s}\n" for i, s in enumerate(SENTENCES)))
    (proc,) = forked_cli.run([(tmp_path, _subclass_predict(folder, "sst", source), _env())])
    _ok(proc)
    with source.with_name("mine-sst-predictions.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["label"] for r in rows] == expected.labels
    names = [k for k in rows[0] if k.startswith("p_")]
    got = [float(r[k]) for r in rows for k in names]
    assert got == pytest.approx(expected.probabilities.ravel().tolist(), abs=1e-6)  # six decimals written
