"""The help and the messages (pal_lightning/cli/help.py, main.py): ``pal-lightning --help`` and ``--version``
by hand (without torch), every other screen LightningCLI's with the registered methods, encoders and tasks
under it; "did you mean" for a mistyped option; one-line errors that name the option or file to fix (the
catalogue of bad inputs run as a user runs them: test_bad_inputs.py)."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401  (its log handler binds stderr at import: the real one, not a test's capture)
import pytest

from pal_lightning.cli.help import SUBCOMMAND_HELP, registered, suggest
from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.core.version import __version__
from pal_lightning.data.sampling import schedules
from pal_lightning.modeling.families import supported_model_types
from pal_lightning.modeling.methods import METHODS
from pal_lightning.tasks.specs import available_tasks
from pal_lightning.testing import write_cs224n_data

from .conftest import subprocess_env


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if not x.startswith("INFO: Seed set")]  # Lightning's own line
    assert len(lines) == 1 and lines[0].startswith("pal-lightning: error:"), err
    return lines[0]


def test_top_level_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    out = " ".join(_out(capsys, "--help").split())
    for command, sentence in SUBCOMMAND_HELP.items():
        assert f"{command} {sentence}" in out
    assert "Score a checkpoint on the labelled test sets." in out
    assert "pretrain Masked-language pre-training of the encoder" in out
    assert "serve Serve every task of a saved model over HTTP" in out
    assert "pal-lightning predict --predict.model DIR --predict.task sst --predict.input FILE" in out
    assert "make sure you never run on your" not in out  # Lightning's text, cut mid-sentence
    assert _out(capsys, "--version") == f"pal-lightning {__version__}\n"


def test_help_version_and_a_user_mistake_import_no_torch_and_the_mistake_exits_2(tmp_path: Path) -> None:
    """In a real process: ``--help``, ``-h`` and ``--version`` print without torch, and a user mistake is one
    line on stderr, nothing on stdout, exit status 2 (``sys.exit(main())``, as the console script ends)."""
    script = (
        "import sys, contextlib, io\n"
        "from pal_lightning.cli.main import main\n"
        "for args in (['--help'], ['-h'], ['--version']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(args) == 0, args\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['predict', '--predict.input', 'mine.csv', '--config', 'tiny.yaml'])\n"
        "assert out.getvalue() == '', out.getvalue()\n"
        "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'jsonargparse') if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 2 and run.stdout.strip() == "[]", run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("pal-lightning: error: ") and "is not used with --predict.input" in line


def test_help_into_a_closed_pipe_ends_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    # `pal-lightning --help | head -1`: the reader closes the pipe; no BrokenPipeError traceback, status 141
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed, contextlib.redirect_stdout(closed):
        assert main(["--help"]) == 141
        assert stat.S_ISCHR(
            os.fstat(closed.fileno()).st_mode
        )  # now devnull, not the pipe: the exit flush cannot fail
    assert capsys.readouterr().err == ""


def test_fit_help_is_lightnings_with_the_registries(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _out(capsys, "fit", "--help")
    flat = " ".join(out.split())
    for option in ("--model.help", "--data.help", "--ckpt_path", "--trainer.max_steps", "--print_config"):
        assert option in out, option
    assert SUBCOMMAND_HELP["fit"] in flat
    assert "model.init_args.encoder --> data.init_args.tokenizer" in out  # the CLI's links
    for name in (*METHODS, *supported_model_types(), *available_tasks()):
        assert f" {name}," in flat or f" {name}." in flat, name
    assert "predict.input" not in out
    predict = " ".join(_out(capsys, "predict", "--help").split())
    assert "pal-lightning predict --predict.model DIR --predict.task sst --predict.input FILE" in predict
    assert "--predictions.output_dir" in predict
    monkeypatch.setitem(METHODS, "my_method", METHODS["pals"])
    assert "my_method" in registered()
    assert "Sampling rules (--data.sampling): proportional, sqrt, uniform, round_robin, annealed" in flat
    monkeypatch.setitem(schedules._RULES, "my_rule", schedules._RULES["sqrt"])
    assert registered().endswith(", temperature, my_rule.")  # read from the registry
    # each method's own options, from its config
    assert "their own options: lora (targets, alpha, dropout), houlsby (" in registered()


def test_model_and_data_help_of_the_default_class_a_subclass_and_no_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _out(capsys, "fit", "--model.help")
    for option in ("--model.optim.lr LR", "--model.adapter ADAPTER", "--model.tasks"):
        assert option in model, option
    assert "Peak learning rate of the pretrained encoder weights" in " ".join(model.split())
    # the attribute docstrings are read for a help screen only: the process-wide setting is off again for the
    # next command of this process (jsonargparse's own record of it)
    from jsonargparse._optionals import get_docstring_parse_options

    main(
        ["fit", "--config", str(Path(__file__).parents[2] / "configs" / "quickstart.yaml"), "--print_config"]
    )
    capsys.readouterr()
    assert get_docstring_parse_options()["attribute_docstrings"] is False
    for name in (
        "MultiTaskModule",
        "pal_lightning.MultiTaskModule",
        "pal_lightning.module.multitask.MultiTaskModule",
    ):
        assert _out(capsys, "fit", "--model.help", name) == model, name
    (tmp_path / "my_help_pkg.py").write_text(
        "from pal_lightning import MultiTaskModule\n\n\n"
        "class MyModule(MultiTaskModule):\n"
        '    """Mine.\n\n    Args:\n        extra: how much more.\n    """\n\n'
        "    def __init__(self, extra: int = 3, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = _out(capsys, "fit", "--model.help", "my_help_pkg.MyModule")
    assert "--model.extra EXTRA" in out and "how much more" in out and "default: 3" in out
    assert main(["fit", "--model.help", "my_help_pkg.Nope"]) == USER_ERROR_EXIT
    line = _error(capsys)
    assert "my_help_pkg" in line and "Nope" in line
    data = _out(capsys, "fit", "--data.help")
    assert "--data.batch_size" in data and "--data.tokenizer" in data


def test_pretrain_help(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, "pretrain", "--help")
    assert out.startswith("usage: pal-lightning pretrain")
    assert "--ckpt_path" in out and "--model.help" in out and "--checkpoint.monitor" in out
    model = _out(capsys, "pretrain", "--model.help")
    assert "--model.mlm_probability" in model and "--model.whole_word" in model


def test_mistyped_option_gets_a_suggestion(tiny_yaml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["fit", "--config", str(tiny_yaml), "--print_config"]
    assert main([*base, "--model.learning_rate", "1e-4"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert "Option 'learning_rate' is not accepted. Did you mean --model.optim.lr?" in err
    assert main([*base, "--model.weight_decay", "0.1"]) == USER_ERROR_EXIT  # moved into optim
    err = capsys.readouterr().err
    assert "weight_decay moved: use optim.weight_decay (--model.optim.weight_decay;" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*base, "--data.batchsize", "4"]) == USER_ERROR_EXIT
    assert "Did you mean --data.batch_size" in capsys.readouterr().err


def test_a_prefix_of_an_option_is_refused(tiny_yaml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's abbreviations would take --trainer.max_step 7 as --trainer.max_steps 7, silently
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_step", "7", "--print_config"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --trainer.max_step 7. Did you mean --trainer.max_steps" in err
    assert "Traceback" not in err


def test_suggest() -> None:
    assert suggest("learning_rate", ["lr", "head_lr", "dropout"]) == ["lr"]  # word initials
    assert suggest("max_stesp", ["max_steps", "min_steps", "accelerator"])[0] == "max_steps"
    assert suggest("zzz", ["lr", "dropout"]) == []


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        (
            ["--trainer.max_steps", "0"],
            ["trainer.max_steps is 0, which trains nothing", "--trainer.max_steps 1200"],
        ),
        (["--data.batch_size", "-4"], ["batch_size (--data.batch_size) must be at least 1, got -4"]),
        (
            ["--config", "{dir}/broken.yaml"],
            ["Config file {dir}/broken.yaml is not valid YAML", "line 3, column 1"],
        ),
        (["--model.init_args.auxiliary=[snli]"], ["auxiliary names ['snli'], which are not among the tasks"]),
        (
            ["--model.init_args.init_from=nowhere/joint.ckpt"],
            ["init_from checkpoint nowhere/joint.ckpt does not exist"],
        ),
        (["--data.init_args.task_multipliers={snli: 0.5}"], ["task_multipliers name unknown tasks ['snli']"]),
        (["--trainer.precision", "fastest"], ["precision"]),  # one Lightning does not know
    ],
    ids=[
        "max-steps-0",
        "batch-size",
        "yaml-syntax",
        "auxiliary",
        "init-from",
        "task-multipliers",
        "precision",
    ],
)
def test_a_bad_value_is_one_line_naming_the_option_or_file(
    tiny_yaml: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    fragments: list[str],
) -> None:
    (tmp_path / "broken.yaml").write_text("trainer:\n  max_steps: [1, 2\n")
    options = [o.replace("{dir}", str(tmp_path)) for o in options]
    assert main(["fit", "--config", str(tiny_yaml), *options]) == USER_ERROR_EXIT
    line = _error(capsys)
    for fragment in fragments:
        assert fragment.replace("{dir}", str(tmp_path)) in line, line
    assert "<unicode string>" not in line  # jsonargparse's name for a config file
    assert not (tmp_path / "runs").exists()  # nothing written


def test_write_cs224n_data_takes_a_str(tmp_path: Path) -> None:
    root = write_cs224n_data(str(tmp_path / "data"))
    assert root == tmp_path / "data" and (root / "ids-sst-train.csv").is_file()


def test_a_command_builds_only_the_parser_of_its_subcommand() -> None:
    """``fit ...`` builds the fit parser alone (most of a command's start-up); ``--help`` without a
    subcommand still lists them all."""
    from pal_lightning.cli.fit import PalLightningCLI, named_subcommand

    subcommands = PalLightningCLI.subcommands()
    assert named_subcommand(["fit", "--config", "x.yaml"], subcommands) == "fit"
    assert named_subcommand(["predict"], subcommands) == "predict"
    assert named_subcommand(["--help"], subcommands) is None
    assert named_subcommand([], subcommands) is None
    assert named_subcommand(None, subcommands) is None


def test_print_config_of_fit_prepares_the_fit_parser_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lightning.pytorch.cli import LightningCLI

    prepared: list[str] = []
    real = LightningCLI._prepare_subcommand_parser

    def spy(self, klass, subcommand, **kwargs):  # noqa: ANN001, ANN003, ANN202
        prepared.append(subcommand)
        return real(self, klass, subcommand, **kwargs)

    monkeypatch.setattr(LightningCLI, "_prepare_subcommand_parser", spy)
    demo = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
    assert main(["fit", "--config", str(demo), "--print_config"]) == 0
    assert prepared == ["fit"]
    assert "max_steps" in capsys.readouterr().out
