"""Help for people (issue 18, item 5): a short ``fit --help`` with the library's options first,
whole-sentence subcommand help, "did you mean" for a mistyped option, no silent prefixes."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from pal_lightning.cli.help import doc_args, first_sentence, suggest
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.module.multitask import MultiTaskModule


def test_fit_help_is_short_and_lists_the_library_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--help"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) < 150
    model_args = [n for n in inspect.signature(MultiTaskModule.__init__).parameters if n != "self"]
    for name in model_args:
        assert f"--model.{name} " in out, name
    for option in ("--data.batch_size 32", "--data.steps_per_epoch", "--ckpt_path", "--trainer.max_steps"):
        assert option in out, option
    # the library's own options come before Lightning's, and the full list is one flag away
    assert out.index("--model.lr") < out.index("--trainer.max_steps")
    assert "pal-lightning fit --help-all" in out and "--model.help" in out
    assert "--model.lr 3e-05" in out and "peak learning rate of the pretrained encoder weights" in out


def test_help_all_is_lightnings_full_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--help-all"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) > 300 and "--trainer.enable_checkpointing" in out


def test_top_level_help_has_whole_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "Score a checkpoint on the labelled test sets." in out
    assert "Write CS224N prediction files (<task>-<split>-output.csv) of a checkpoint." in out
    assert "make sure you never run on your" not in out  # Lightning's text, cut mid-sentence


def test_mistyped_option_gets_a_suggestion(tiny_yaml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fit", "--config", str(tiny_yaml), "--print_config"]
    assert main([*base, "--model.learning_rate", "1e-4"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "Option 'learning_rate' is not accepted. Did you mean --model.lr?" in err
    assert main([*base, "--data.batchsize", "4"]) == USER_ERROR_EXIT
    assert "Did you mean --data.batch_size" in capsys.readouterr().err


def test_a_prefix_of_an_option_is_refused(tiny_yaml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's abbreviations would take --trainer.max_step 7 as --trainer.max_steps 7, silently
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_step", "7", "--print_config"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --trainer.max_step 7. Did you mean --trainer.max_steps" in err
    assert "Traceback" not in err


def test_suggest_and_docstring_parsing() -> None:
    assert suggest("learning_rate", ["lr", "head_lr", "dropout"]) == ["lr"]  # word initials
    assert suggest("max_stesp", ["max_steps", "min_steps", "accelerator"])[0] == "max_steps"
    assert suggest("zzz", ["lr", "dropout"]) == []

    class Example:
        """Something.

        Args:
            alpha: the first one. More text.
            beta (int): wraps over
                two lines, e.g. like this.

        Returns:
            nothing
        """

        def __init__(self, alpha: int = 1, beta: int = 2) -> None: ...

    docs = doc_args(Example)
    assert docs == {"alpha": "the first one. More text.", "beta": "wraps over two lines, e.g. like this."}
    assert first_sentence(docs["alpha"]) == "the first one"
    assert first_sentence(docs["beta"]) == "wraps over two lines, e.g. like this"


def test_predict_help_points_at_new_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--help"]) == 0
    out = capsys.readouterr().out
    assert "pal-lightning predict --predict.model DIR --predict.task sst --predict.input FILE" in out
    assert "--predictions.output_dir DIR" in out and len(out.splitlines()) < 150
