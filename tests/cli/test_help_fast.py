"""Every help screen without torch, transformers or Lightning, the first one included (issue "A user's own
task, end to end", item 7: help in under 3 s): the option tables are read from the package's source
(``cli/source_tables.py``) and the values of ``--config`` files from the files (``options.config_values``).
Each fast path is compared here with what the classes and the CLI's own parser give."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pal_lightning.cli import main as cli_main
from pal_lightning.cli import options

from .conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
HEAVY = ("torch", "lightning", "transformers", "datasets", "jsonargparse")


def test_no_help_screen_imports_torch_lightning_or_transformers(tmp_path: Path) -> None:
    env = {**subprocess_env(), "PAL_CACHE_DIR": str(tmp_path / "cache")}  # nothing cached: a fresh install
    screens = [
        ["--help"],
        ["--version"],
        ["fit", "--help"],
        ["validate", "--help"],
        ["predict", "--help"],
        ["fit", "--model.help"],
        ["fit", "--model.tasks.help"],
        ["fit", "--model.adapter.help"],
        ["fit", "--data.help"],
        ["fit", "--config", str(CONFIGS / "demo.yaml"), "--model.lr", "1e-3", "--help"],
        [
            "fit",
            "--config",
            str(CONFIGS / "quickstart.yaml"),
            "--config",
            str(CONFIGS / "lr_groups.yaml"),
            "--help",
        ],
        ["pretrain", "--help"],
        ["pretrain", "--config", str(CONFIGS / "pretrain_mlm.yaml"), "--help"],
        ["pretrain", "--model.help"],
    ]
    script = (
        "import sys, contextlib, io\n"
        "from pal_lightning.cli.main import main\n"
        f"for args in {screens!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        assert main(args) == 0, args\n"
        "    assert out.getvalue().strip(), args\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"
    assert not (tmp_path / "cache").exists()  # nothing to cache any more


def test_the_tables_read_from_the_source_are_those_of_the_classes() -> None:
    assert options.source_tables() == options.live_tables()
    for path in options.PRETRAIN_CLASSES.values():
        assert options.source_class_table(path) == options.class_table(options.import_class(path)), path


def _forced_parser(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(options, "config_values", lambda *args, **kwargs: None)
        screen = cli_main._short_help(argv[0], argv)
    assert screen is not None
    return screen


@pytest.mark.parametrize(
    "given",
    [
        ["--config", "quickstart.yaml", "--model.head_lr", "0.002"],
        ["--config", "demo.yaml"],  # demo.yaml names quickstart.yaml and sets dotted keys
        ["--config", "pair_heads.yaml", "--model.adapter.size=8", "--data.batch_size", "8"],
        ["--config", "aux_snli.yaml"],  # a task of one's own, as a mapping filled with the field defaults
        ["--config", "quickstart.yaml", "--config", "lr_groups.yaml", "--model.lr", "2e-4"],
    ],
)
def test_config_values_read_from_the_files_are_the_parsers(
    monkeypatch: pytest.MonkeyPatch, given: list[str]
) -> None:
    argv = ["fit", *(str(CONFIGS / a) if a.endswith(".yaml") else a for a in given), "--help"]
    assert options.config_values(argv[1:-1], {g: options.tables_of(g) for g in options.DEFAULT_CLASSES})
    assert cli_main._short_help("fit", argv) == _forced_parser(monkeypatch, argv)


def test_what_the_files_do_not_tell_goes_to_the_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = {g: options.tables_of(g) for g in options.DEFAULT_CLASSES}
    other = tmp_path / "other.yaml"
    other.write_text("model:\n  class_path: my_pkg.MyModule\n")
    late = tmp_path / "late.yaml"
    late.write_text(f"model:\n  init_args:\n    lr: 0.1\nconfig: {CONFIGS / 'quickstart.yaml'}\n")
    for args in (
        ["--config", str(other)],  # another class: its options come from importing it
        ["--config", str(late)],  # a config: after other keys, where the parser applies it in place
        ["--config", str(tmp_path / "missing.yaml")],
        ["--model", "my_pkg.MyModule"],
        ["--model.learning_rate", "0.1"],  # an unknown option: the parser's error
        ["--model.lr"],
    ):
        assert options.config_values(args, tables) is None, args
    assert options.config_values(["--trainer.max_steps", "5", "--model.lr", "1e-3"], tables) == {
        "model": {"lr": 0.001},
        "data": {},
    }
    assert (
        cli_main.main(["fit", "--config", str(tmp_path / "missing.yaml"), "--help"])
        == cli_main.USER_ERROR_EXIT
    )
    assert "missing.yaml" in capsys.readouterr().err


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


def test_print_config_of_fit_prepares_the_fit_parser_alone(monkeypatch, capsys) -> None:  # noqa: ANN001
    from pathlib import Path

    from lightning.pytorch.cli import LightningCLI

    from pal_lightning.cli.main import main

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
