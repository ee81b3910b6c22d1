"""The CLI driven in-process through ``main(args=[...])``: every config parses, a tiny model fits,
validates, tests and predicts on fixture data (also into another folder), reruns never overwrite, user
mistakes and disk faults give one line."""

from __future__ import annotations

import contextlib
import copy
import csv
import errno
import functools
import hashlib
import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import yaml

import pal_lightning.core.files as files
from pal_lightning import MultiTaskModule
from pal_lightning.cli.fit import PalLightningCLI, RunConfigSaver
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.core.columns import probability_column as column_name
from pal_lightning.core.files import file_fingerprint as _digest
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, ForkedSubprocess, error_line, load_benchmark

ROOT = Path(__file__).resolve().parents[2]
ALL_CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def _is_overlay(path: Path) -> bool:
    """An overlay names no model class and no base (``config:``): it is put after a complete config
    (``--config a --config b``)."""
    config = yaml.safe_load(path.read_text()) or {}
    names_model = "class_path" in (config.get("model") or {})
    return not names_model and "config" not in config and path.name != "ddp.yaml"


def _is_pretrain(path: Path) -> bool:
    """A ``pal-lightning pretrain`` config (tested in test_pretrain.py), not one for ``fit``."""
    model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
    return "MLMPretrainModule" in str(model.get("class_path", ""))


CONFIGS = [c for c in ALL_CONFIGS if not _is_overlay(c) and not _is_pretrain(c)]
OVERLAYS = [c for c in ALL_CONFIGS if _is_overlay(c)]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@functools.cache
def _resolved(path: Path) -> dict:
    """``fit --config PATH --print_config`` as a dict, once per file (read without capsys, so that two
    tests share it; callers must not change it)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fit", "--config", str(path), "--print_config"]) == 0, path.name
    return yaml.safe_load(out.getvalue())


def test_every_shipped_config_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(CONFIGS) >= 14
    for config in CONFIGS:
        printed = _resolved(config)
        assert printed["model"]["class_path"].endswith("MultiTaskModule"), config.name
        assert printed["trainer"]["use_distributed_sampler"] is False, config.name
        if config.name != "ddp.yaml":  # ddp.yaml is a trainer block to combine with an experiment
            assert printed["seed_everything"] == 42, config.name
            assert printed["trainer"]["default_root_dir"] == f"runs/{config.stem}", config.name
    ddp = yaml.safe_load((ROOT / "configs" / "ddp.yaml").read_text())["trainer"]
    assert ddp["strategy"] == "ddp" and ddp["precision"] == "auto"


def test_every_overlay_applies_over_the_quickstart(capsys: pytest.CaptureFixture[str]) -> None:
    """Each overlay says what it is in a leading comment, and every value it sets reaches the resolved
    config when it is put after ``configs/quickstart.yaml``; the quickstart's run folder stays."""
    assert {"simcse.yaml", "gem.yaml", "lr_groups.yaml", "mixed.yaml"} <= {c.name for c in OVERLAYS}
    quickstart = ROOT / "configs" / "quickstart.yaml"

    def leaves(tree: object, prefix: tuple = ()) -> dict[tuple, object]:
        if isinstance(tree, dict):
            return {k: v for key, sub in tree.items() for k, v in leaves(sub, (*prefix, key)).items()}
        return {prefix: tree}

    for overlay in OVERLAYS:
        assert overlay.read_text().startswith("#"), overlay.name
        assert main(["fit", "--config", str(quickstart), "--config", str(overlay), "--print_config"]) == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        assert printed["trainer"]["default_root_dir"] == "runs/quickstart", overlay.name
        for path, value in leaves(yaml.safe_load(overlay.read_text())).items():
            node = printed
            for key in path:
                node = node[key]
            if isinstance(value, list) and value and isinstance(value[0], dict) and "class_path" in value[0]:
                assert [c["class_path"] for c in node] == [c["class_path"] for c in value], (
                    overlay.name,
                    path,
                )
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                assert [str(x) for x in node] == value, (overlay.name, path)
            elif not isinstance(value, (list, dict)):
                assert node == value, (overlay.name, path, node, value)


def test_every_experiment_sets_only_what_differs_from_its_base() -> None:
    """An experiment (configs/README.md) names an existing base first, then sets dotted keys only (a
    nested block would replace the base's whole section), and every value it sets reaches the resolved
    config and differs from the base's; everything else resolves as in the base."""
    experiments = [c for c in CONFIGS if "config" in (yaml.safe_load(c.read_text()) or {})]
    names = {c.name for c in experiments}
    assert {"pals_sqrt.yaml", "shared.yaml", "continual_gem.yaml", "demo.yaml"} <= names
    resolved: dict[Path, dict] = {}
    for path in experiments:
        raw = yaml.safe_load(path.read_text())
        assert next(iter(raw)) == "config", path.name
        base = (path.parent / raw.pop("config")).resolve()
        assert base.is_file(), (path.name, base)
        new = copy.deepcopy(resolved.setdefault(path, _resolved(path)))
        old = copy.deepcopy(resolved.setdefault(base, _resolved(base)))
        for key, value in raw.items():
            assert "." in key and key.split(".")[0] in {"trainer", "model", "data"}, (path.name, key)
            section, _, name = key.rpartition(".")
            new_node, old_node = new, old
            for part in section.split("."):
                new_node, old_node = new_node[part], old_node[part]
            assert new_node[name] != old_node.get(name), (path.name, key, "same as the base")
            if isinstance(value, list) and value and isinstance(value[0], dict):  # callbacks
                assert [c["class_path"] for c in new_node[name]] == [c["class_path"] for c in value], key
                for given, got in zip(value, new_node[name], strict=True):
                    assert given.get("init_args", {}).items() <= got["init_args"].items(), (path.name, given)
            else:
                assert new_node[name] == value or [str(v) for v in new_node[name]] == value, (path.name, key)
            new_node[name] = old_node.get(name)  # what remains must be the base's
        assert new == old, path.name


def test_links_give_encoder_tasks_and_pair_encoding_once(
    tiny_yaml: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--config", str(tiny_yaml), "--model.tasks", "[sst, sts]", "--model.pair_encoding", "siamese"]
    assert main(["fit", *args, "--print_config=skip_null"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    # link targets are not options of their own: they follow the model
    assert not {"tokenizer", "tasks", "pair_encoding"} & set(printed["data"]["init_args"])
    assert printed["model"]["init_args"]["tasks"] == ["sst", "sts"]

    monkeypatch.setattr("sys.argv", ["pal-lightning"])
    cli = PalLightningCLI(args=[*args, "--data.init_args.tasks", "[qqp]"], run=False)
    assert cli.datamodule.task_names == ["sst", "sts"]  # the link wins over a stray target value
    assert cli.datamodule.tokenizer_name == cli.model.hparams.encoder
    assert cli.datamodule.pair_encodings == {"sst": "siamese", "sts": "siamese"}
    assert list(cli.model.task_specs) == ["sst", "sts"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One fit of the tiny config (4 steps, validated after steps 2 and 4) with what it printed, shared by
    the fit test and the disk-fault tests after it (in file order: they evaluate its checkpoints)."""
    root = tmp_path_factory.mktemp("fit")
    config = write_tiny_fit_config(root, write_cs224n_data(root / "data"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["fit", "--config", str(config)]) == 0
    return {"root": root, "config": config, "out": out.getvalue()}


def test_fit_validate_test_predict_and_reruns(
    fitted: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_yaml, runs, out = fitted["config"], fitted["root"] / "runs", fitted["out"]
    assert "CS224N overall (dev):" in out and "sts" in out and "pearson" in out
    run0 = runs / "version_0"
    for name in ("config.yaml", "metrics.csv", "scores.json", "hparams.yaml"):
        assert (run0 / name).is_file(), name
    assert any((run0 / "tensorboard").iterdir())
    scores = json.loads((run0 / "scores.json").read_text())
    assert set(scores["best"]["scores"]) >= {
        "val/overall",
        "val/sst/accuracy",
        "val/qqp/accuracy",
        "val/sts/pearson",
    }
    assert scores["steps"] == 4
    # its own validations (2 epochs of 2 steps) reach its end: no extra one at the end
    assert [h["step"] for h in scores["history"]] == [2, 4]
    (ckpt,) = (run0 / "checkpoints").glob("best-*.ckpt")
    # "best" is the validation with the highest val/overall, by the logger's own record (metrics.csv
    # logs a validation at the steps done); here the first of two, so neither min nor last passes
    with (run0 / "metrics.csv").open() as f:
        logged = {int(r["step"]): float(r["val/overall"]) for r in csv.DictReader(f) if r.get("val/overall")}
    assert sorted(logged) == [2, 4] and logged[2] != logged[4]
    best_step = max(logged, key=lambda step: logged[step])
    best = scores["best"]["scores"]
    assert scores["best"]["step"] == best_step and best["val/overall"] == pytest.approx(logged[best_step])
    assert ckpt.name.startswith(f"best-step{best_step}-")  # the checkpoint callback chose the same one
    # the overall of the best validation: the CS224N formula by hand over its task scores
    by_hand = (best["val/sst/accuracy"] + best["val/qqp/accuracy"] + (best["val/sts/pearson"] + 1) / 2) / 3
    assert scores["overall"] == pytest.approx(by_hand, abs=1e-6) and best["val/overall"] == pytest.approx(
        by_hand
    )
    ckpts = run0 / "checkpoints"
    assert (ckpts / "last.ckpt").is_file()  # written by the last_checkpoint callback
    assert (ckpts / "best.ckpt").read_bytes() == ckpt.read_bytes()  # the alias of the best checkpoint
    config_digest = _digest(run0 / "config.yaml")

    # a rerun into the same root gets its own version directory and leaves the first run alone
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_steps", "2"]) == 0
    capsys.readouterr()
    assert (runs / "version_1" / "config.yaml").is_file()
    assert _digest(run0 / "config.yaml") == config_digest
    assert len(list(ckpts.glob("*.ckpt"))) == 3  # best, its alias best.ckpt and last

    # evaluations belong to the run they evaluate (issue 18, item 4): last with the run's own config is
    # this run's last.ckpt, although version_1's is newer, and validate logs into the run
    own = ["--config", str(run0 / "config.yaml")]
    assert main(["validate", *own, "--ckpt_path", "last"]) == 0
    captured = capsys.readouterr()
    assert f"loading from {ckpts / 'last.ckpt'}" in captured.err
    assert "CS224N overall (dev):" in captured.out  # the table fit prints
    scores = json.loads((run0 / "validate" / "version_0" / "scores.json").read_text())
    assert scores["complete"] is True and scores["ckpt_path"] == str(ckpts / "last.ckpt")
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]  # no run of its own

    # with a config that is not a run's: the newest last.ckpt under the root (version_1)
    assert main(["test", "--config", str(tiny_yaml), "--ckpt_path", "last"]) == 0
    captured = capsys.readouterr()
    assert f"loading from {runs / 'version_1' / 'checkpoints' / 'last.ckpt'}" in captured.err
    assert "Partial mean over sts" in captured.out  # the fixture's STS test file is labelled (no others)
    assert (runs / "version_1" / "test" / "version_0" / "scores.json").is_file()

    # best: the alias; predictions go to the run, the predict logs to <run>/predict
    assert main(["predict", *own, "--ckpt_path", "best"]) == 0
    assert f"loading from {ckpts / 'best.ckpt'}" in capsys.readouterr().err
    pred_dir = run0 / "predictions"
    files = sorted(p.name for p in pred_dir.glob("*.csv"))
    assert files == sorted(f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test"))
    sst_dev = (pred_dir / "sst-dev-output.csv").read_text().splitlines()
    assert sst_dev[0].split() == ["id", "Predicted_Sentiment"] and len(sst_dev) == 1 + 10
    assert (run0 / "predict" / "version_0").is_dir()
    digests = {p.name: _digest(p) for p in pred_dir.glob("*.csv")}
    (pred_dir / "sts-dev-output.csv").write_text("sentinel\n")

    # a refused predict (its files exist) and a folder given as checkpoint: one line, nothing changed
    before = _files(runs)
    assert main(["predict", *own, "--ckpt_path", "best"]) == USER_ERROR_EXIT
    line = error_line(capsys.readouterr().err)
    assert "Prediction files already exist" in line and "overwrite" in line
    assert main(["validate", *own, "--ckpt_path", str(run0)]) == USER_ERROR_EXIT
    line = error_line(capsys.readouterr().err)
    assert f"Checkpoint path {run0} is a folder, not a file: --ckpt_path takes a .ckpt file" in line
    assert _files(runs) == before
    assert sorted(p.name for p in (run0 / "predict").iterdir()) == ["version_0"]

    assert main(["predict", *own, "--ckpt_path", "best", "--predictions.overwrite", "true"]) == 0
    capsys.readouterr()
    assert {p.name: _digest(p) for p in pred_dir.glob("*.csv")} == digests


def test_fit_saves_the_best_model_and_predict_reads_csv_and_jsonl(
    fitted: dict[str, Any], tmp_path: Path, forked_cli: ForkedCli
) -> None:
    run = fitted["root"] / "runs" / "version_0"
    folder = run / "model"
    config = json.loads((folder / "config.json").read_text())
    best = json.loads((run / "scores.json").read_text())["best"]["scores"]
    assert config["scores"]["val/overall"] == pytest.approx(best["val/overall"])
    assert config["max_length"] == 32  # the data module's, used again at prediction time
    assert "best validation checkpoint" in (folder / "README.md").read_text()

    # the folder holds the best checkpoint's weights, not the final ones
    ckpt = json.loads((run / "scores.json").read_text())["best_model_path"]
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    model = MultiTaskModule.from_pretrained(folder)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    # and a new process loading only the folder predicts exactly what the checkpoint predicts
    # (forked from the session's CLI driver, which has imported but loaded no model: forked_cli)
    benchmark = load_benchmark("pretrained_roundtrip")
    benchmark.subprocess = ForkedSubprocess(forked_cli)  # a fresh module: nothing to restore
    roundtrip = benchmark.main(["--run", str(run), "--data-dir", str(fitted["root"] / "data"), "--n", "6"])
    assert roundtrip["examples_per_task"] == {"sst": 6, "qqp": 6, "sts": 6}
    assert roundtrip["max_abs_diff_all"] == 0.0

    sentences = tmp_path / "mine.csv"
    sentences.write_text('id,sentence\nr1,"a great, fun movie"\nr2,awful plot\nr3,ok\n', encoding="utf-8")
    predict = ["predict", "--predict.model", str(folder), "--predict.task", "sst"]
    assert main([*predict, "--predict.input", str(sentences)]) == 0
    rows = _rows(tmp_path / "mine-sst-predictions.csv")
    expected = model.predict("sst", ["a great, fun movie", "awful plot", "ok"])
    assert [r["id"] for r in rows] == ["r1", "r2", "r3"]
    assert [r["label"] for r in rows] == expected.labels
    probs = np.array([[float(r[column_name(n)]) for n in expected.label_names] for r in rows])
    np.testing.assert_allclose(probs, expected.probabilities, atol=1e-6)

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"sentence1": "how do I cook rice", "sentence2": "how is rice cooked"})
        + "\n\n"
        + json.dumps({"sentence1": "a", "sentence2": "b"})
        + "\n"
    )
    out = tmp_path / "sts.csv"
    args = ["predict", "--ckpt_path", str(ckpt), "--predict.task", "sts", "--predict.input", str(pairs)]
    assert main([*args, "--predict.output", str(out)]) == 0
    rows = _rows(out)
    scores = model.predict("sts", [("how do I cook rice", "how is rice cooked"), ("a", "b")]).scores
    assert [r["id"] for r in rows] == ["0", "1"]  # no id column: the row number
    assert [float(r["score"]) for r in rows] == pytest.approx(scores, abs=1e-6)


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_config_saver_picks_a_free_name_when_runs_share_a_folder(tmp_path: Path) -> None:
    saved: list[str] = []
    parser = SimpleNamespace(save=lambda config, path, **kw: (saved.append(path), Path(path).write_text("x")))
    trainer = SimpleNamespace(
        log_dir=str(tmp_path), is_global_zero=True, strategy=SimpleNamespace(broadcast=lambda obj: obj)
    )
    (tmp_path / "config.yaml").write_text("first run")
    for _ in range(2):
        RunConfigSaver(parser, config={}).setup(trainer, None, "fit")  # type: ignore[arg-type]
    # written into a temporary file beside the target, then moved into place
    assert all(Path(p).parent == tmp_path and Path(p).name.startswith(".config_") for p in saved)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "config_1.yaml", "config_2.yaml"]
    assert (tmp_path / "config.yaml").read_text() == "first run"
    assert (tmp_path / "config_2.yaml").read_text() == "x"


def test_config_saver_leaves_nothing_when_the_write_fails(tmp_path: Path) -> None:
    def full_disk(config: object, path: str, **kw: object) -> None:
        Path(path).write_text("half")
        raise OSError(28, "No space left on device")

    trainer = SimpleNamespace(
        log_dir=str(tmp_path), is_global_zero=True, strategy=SimpleNamespace(broadcast=lambda obj: obj)
    )
    saver = RunConfigSaver(SimpleNamespace(save=full_disk), config={})  # type: ignore[arg-type]
    with pytest.raises(OSError, match="No space"):
        saver.setup(trainer, None, "fit")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # no config.yaml, no temporary file


# ---------------------------------------------------------------- disk faults while evaluations write
# A full, read-only or forbidden disk while ``predict`` writes predictions or ``validate``/``test`` write
# ``scores.json`` (issue 13, item 2; the checkpoint case is in test_run_folders.py): exit status 2, one
# line naming the file, its cause and the fix, no traceback, every earlier file unchanged (hashes), no
# temporary file left behind, and nothing new but the failed evaluation's own run folder when it logged
# scores (the run-folder rule: a folder with metrics.csv rows is a result). The faults are injected in
# pal_lightning.core.files (tests run as root here, where chmod does not stop a write): ``_temp_beside``
# (creating the temporary file: a read-only or forbidden folder) or ``_publish`` (moving the finished
# file into place: the disk fills up).


@pytest.fixture(scope="module")
def trained(fitted: dict[str, Any]) -> dict[str, Path]:
    """The shared fit, with predictions (those of the fit test above, else written here)."""
    run = fitted["root"] / "runs" / "version_0"
    ckpt = run / "checkpoints" / "last.ckpt"
    if not (run / "predictions").is_dir():
        assert main(["predict", "--config", str(fitted["config"]), "--ckpt_path", str(ckpt)]) == 0
    return {"root": fitted["root"], "config": fitted["config"], "ckpt": ckpt}


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
    line = error_line(capsys.readouterr().err)
    assert len(refused) == 1
    assert f"{refused[0]}: refused" in line  # the file itself, not its temporary name
    assert FIXES[code] in line
    after = _digests(runs)
    assert {k: after.get(k) for k in before} == before  # every earlier file unchanged
    added = sorted(set(after) - set(before))
    assert not [k for k in added if k.endswith(".tmp") or "/.tmp" in k or ".tmp-" in k]  # no temporary file
    # at most the failed command's own new run folder, kept when it holds logged scores (metrics.csv rows)
    own = f"version_0/{command}/"
    assert all(k.startswith(own) for k in added), added
    if added:
        assert any(k.endswith("metrics.csv") for k in added)


def test_predict_elsewhere_makes_no_log_folders_and_a_missing_test_split_names_predict_splits(
    fitted: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = fitted["root"]
    run = root / "runs" / "version_0"
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    out = tmp_path / "elsewhere"
    args = ["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]
    capfd.readouterr()
    assert main([*args, "--predictions.output_dir", str(out)]) == 0
    assert "pal-lightning: wrote 6 prediction file(s)" in capfd.readouterr().out
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test"))
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # no predict/version_N, no log
    for file in out.iterdir():
        assert b"\r" not in file.read_bytes()

    # train and dev only, as in the packaged demo set: the error names the option that leaves test out
    data = tmp_path / "data"
    shutil.copytree(root / "data", data, ignore=shutil.ignore_patterns("*-test-student.csv"))
    args += ["--data.init_args.data_dir", str(data), "--predictions.output_dir", str(tmp_path / "dev")]
    assert main(args) == USER_ERROR_EXIT
    errors = [line for line in capfd.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("pal-lightning: error: Data files not found in")
    assert errors[0].endswith('To predict only the dev split: --data.predict_splits "[dev]".'), errors
    assert main([*args, "--data.predict_splits", "[dev]"]) == 0  # the advice works
    assert (tmp_path / "dev" / "sst-dev-output.csv").is_file()
