"""A model fitted from a subclass of ``MultiTaskModule`` (issue 43, item 2) loads through every entry point,
as the class it was saved from when the user names that class, and is refused in one line otherwise: a saved
file never chooses what is imported.

One tiny ``pal-lightning fit`` of ``downstream_pkg.model.MLPHeadModule`` (a constructor argument and a head
of its own) writes the folder and the checkpoints that every test loads.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from downstream_pkg.model import MLPHead, MLPHeadModule  # noqa: E402

import pal_lightning  # noqa: E402
from pal_lightning import MultiTaskModule, PalUserError  # noqa: E402
from pal_lightning.cli.main import USER_ERROR_EXIT, main  # noqa: E402
from pal_lightning.core.version import __version__  # noqa: E402
from pal_lightning.inference.pipeline import load_model  # noqa: E402
from pal_lightning.module.checkpoint_check import VERSION_KEY  # noqa: E402
from pal_lightning.testing import TINY_BERT, write_cs224n_data, write_tiny_fit_config  # noqa: E402

SUBCLASS = "downstream_pkg.model.MLPHeadModule"
#: What LightningCLI's checkpoints name as the function that builds the class they record.
INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"
SENTENCES = ["a great and moving film .", "dull plot", "ok"]


@dataclass(frozen=True)
class Run:
    """What the fit left: its config (of the base class), the model folder, the best checkpoint, its output."""

    folder: Path
    config: Path
    model: Path
    best: Path
    output: str


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("subclass")
    config = write_tiny_fit_config(folder, write_cs224n_data(folder / "data"), tasks=["sst", "qqp"])
    out = io.StringIO()
    args = ["--model.class_path", SUBCLASS, "--model.init_args.mlp_width", "12"]
    with contextlib.redirect_stdout(out):
        code = main(["fit", "--config", str(config), *args])
    assert code == 0, out.getvalue()
    version = folder / "runs" / "version_0"
    return Run(folder, config, version / "model", version / "checkpoints" / "best.ckpt", out.getvalue())


def _probabilities(module: MultiTaskModule) -> torch.Tensor:
    return module.predict("sst", SENTENCES).probabilities


def _one_line_naming_the_class(err: pytest.ExceptionInfo[PalUserError], source: Path) -> None:
    message = str(err.value)
    assert "\n" not in message
    assert f"{source} was saved from {SUBCLASS}, not MultiTaskModule" in message
    # both ways of naming it, as the user would type them
    assert f"model_class='{SUBCLASS}'" in message and f"--model.class_path {SUBCLASS}" in message


# ---------------------------------------------------------------- Python: from_pretrained, load_model, pipeline


def test_fit_says_how_to_load_the_subclass(run: Run) -> None:
    assert (
        f"saved the model to {run.model} (load it with MLPHeadModule.from_pretrained; pal-lightning predict "
        f"needs --model.class_path {SUBCLASS})"
    ) in run.output


def test_the_subclass_loads_its_folder_and_checkpoint_alike(run: Run) -> None:
    loaded = MLPHeadModule.from_pretrained(run.model)
    assert type(loaded) is MLPHeadModule and isinstance(loaded.heads["sst"], MLPHead)
    assert loaded.hparams["mlp_width"] == 12 and loaded.heads["sst"].hidden.out_features == 12
    # the folder holds the best checkpoint's weights: the checkpoint, loaded as the class named, agrees
    from_ckpt = load_model(None, str(run.best), MLPHeadModule)
    assert type(from_ckpt) is MLPHeadModule and not from_ckpt.training
    torch.testing.assert_close(_probabilities(from_ckpt), _probabilities(loaded), rtol=0, atol=1e-6)


def test_the_base_class_refuses_a_subclass_folder_in_one_line(run: Run) -> None:
    with pytest.raises(PalUserError) as err:
        MultiTaskModule.from_pretrained(run.model)
    _one_line_naming_the_class(err, run.model)
    with pytest.raises(PalUserError) as err:
        pal_lightning.pipeline(run.model, task="sst")
    _one_line_naming_the_class(err, run.model)
    with pytest.raises(PalUserError) as err:
        load_model(None, str(run.best))
    _one_line_naming_the_class(err, run.best)


@pytest.mark.parametrize("named", [MLPHeadModule, SUBCLASS], ids=["class", "dotted-name"])
def test_the_base_class_loads_a_subclass_folder_the_user_names(run: Run, named: object) -> None:
    reference = _probabilities(MLPHeadModule.from_pretrained(run.model))
    loaded = MultiTaskModule.from_pretrained(run.model, model_class=named)  # type: ignore[arg-type]
    assert type(loaded) is MLPHeadModule
    torch.testing.assert_close(_probabilities(loaded), reference, rtol=0, atol=0)
    for source in (run.model, run.best):
        classify = pal_lightning.pipeline(source, task="sst", model_class=named)  # type: ignore[arg-type]
        assert type(classify.model) is MLPHeadModule
        out = classify(SENTENCES[0], top_k=None)
        assert out[0]["score"] == pytest.approx(float(reference[0].max()), abs=1e-6)


def test_a_class_extending_the_saved_one_needs_no_name_another_does(run: Run, tmp_path: Path) -> None:
    class Extended(MultiTaskModule):  # a subclass of what saved the folder below: the user's choice
        pass

    torch.manual_seed(0)
    base = MultiTaskModule(tasks=["sst"], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    folder = base.save_pretrained(tmp_path / "base")
    assert type(Extended.from_pretrained(folder)) is Extended
    with pytest.raises(PalUserError, match=f"was saved from {SUBCLASS}, not .*Extended;"):
        Extended.from_pretrained(run.model)  # a sibling of the saved class: named, or refused


@pytest.mark.parametrize(
    ("named", "message"),
    [
        ("MLPHeadModule", "'MLPHeadModule' is not a dotted name: give the module and the class"),
        (
            "nowhere_pkg.models.Model",
            "Cannot import nowhere_pkg.models .*No module named 'nowhere_pkg'.*PYTHONPATH",
        ),
        ("downstream_pkg.model.Missing", "Module downstream_pkg.model has no Missing"),
        ("downstream_pkg.model.MLPHead", "downstream_pkg.model.MLPHead is not a subclass of MultiTaskModule"),
        (MLPHead, "The model class MLPHead is not a subclass of MultiTaskModule"),
    ],
)
def test_a_bad_class_name_is_one_line(run: Run, named: object, message: str) -> None:
    with pytest.raises(PalUserError, match=message):
        MultiTaskModule.from_pretrained(run.model, model_class=named)  # type: ignore[arg-type]


def test_the_class_a_file_names_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder or checkpoint naming an importable module that has not been imported: refused, not imported."""
    (tmp_path / "tripwire_mod.py").write_text("raise RuntimeError('imported because a file named it')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    torch.manual_seed(0)
    base = MultiTaskModule(tasks=["sst"], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    folder = base.save_pretrained(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_class": "tripwire_mod.Evil"}))
    ckpt = tmp_path / "evil.ckpt"
    hparams = {**base.hparams, "_class_path": "tripwire_mod.Evil", "_instantiator": INSTANTIATOR}
    torch.save({"state_dict": base.state_dict(), "hyper_parameters": hparams, VERSION_KEY: __version__}, ckpt)
    with pytest.raises(PalUserError, match=f"{folder} was saved from tripwire_mod.Evil, not MultiTaskModule"):
        MultiTaskModule.from_pretrained(folder)
    with pytest.raises(PalUserError, match=f"{ckpt} was saved from tripwire_mod.Evil, not MultiTaskModule"):
        pal_lightning.pipeline(ckpt)
    assert "tripwire_mod" not in sys.modules
    # named by the user, the base class loads both as it is (the file's name is only a name)
    assert type(MultiTaskModule.from_pretrained(folder, model_class=MultiTaskModule)) is MultiTaskModule
    assert type(load_model(None, str(ckpt), "pal_lightning.MultiTaskModule")) is MultiTaskModule


# ---------------------------------------------------------------- the command line


def _predict_new_sentences(run: Run, tmp_path: Path, *source: str) -> list[str]:
    rows = tmp_path / "mine.csv"
    rows.write_text(
        "id,sentence\n" + "".join(f"{i},{s}\n" for i, s in enumerate(SENTENCES)), encoding="utf-8"
    )
    return ["predict", *source, "--predict.task", "sst", "--predict.input", str(rows)]


@pytest.mark.parametrize("option", ["--predict.model", "--ckpt_path"])
def test_predict_new_sentences_refuses_then_loads_the_named_class(
    run: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    source = run.model if option == "--predict.model" else run.best
    args = _predict_new_sentences(run, tmp_path, option, str(source))
    assert main(args) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"error: {source} was saved from {SUBCLASS}, not MultiTaskModule" in err
    assert f"--model.class_path {SUBCLASS}" in err
    assert not (tmp_path / "mine-sst-predictions.csv").exists()

    assert main([*args, "--model.class_path", SUBCLASS]) == 0
    with (tmp_path / "mine-sst-predictions.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    reference = MLPHeadModule.from_pretrained(run.model).predict("sst", SENTENCES)
    assert [r["label"] for r in rows] == reference.labels
    assert float(rows[1]["p_negative"]) == pytest.approx(float(reference.probabilities[1][0]), abs=1e-5)


def test_predict_of_a_config_refuses_a_checkpoint_of_another_class(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    # the base class's config with the subclass's checkpoint: one line, before any weight is loaded
    output = run.folder / "predictions"
    common = ["predict", "--config", str(run.config), "--ckpt_path", str(run.best)]
    assert main([*common, "--predictions.output_dir", str(output)]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"The checkpoint was saved from {SUBCLASS}, but the model is MultiTaskModule" in err
    assert f"--model.class_path {SUBCLASS}" in err
    # named as the line says (with the run's settings), it predicts
    named = ["--model.class_path", SUBCLASS, "--model.init_args.mlp_width", "12"]
    assert main([*common, *named, "--predictions.output_dir", str(output)]) == 0
    assert (output / "sst-dev-output.csv").is_file()


def test_the_server_builds_the_subclass_it_is_told_and_refuses_it_otherwise(run: Run) -> None:
    from pal_lightning.serving.api import PalAPI
    from pal_lightning.serving.command import options

    assert options([str(run.model), "--model.class_path", SUBCLASS]).model_class == SUBCLASS
    named = PalAPI(str(run.model), None, 1, 0.0, model_class=SUBCLASS)
    named.setup("cpu")
    assert type(named.module).__name__ == "MLPHeadModule"
    with pytest.raises(PalUserError) as err:
        PalAPI(str(run.model), None, 1, 0.0).setup("cpu")
    _one_line_naming_the_class(err, run.model)
