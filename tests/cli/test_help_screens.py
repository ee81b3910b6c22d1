"""The help screens (issue "A user's own task, end to end", item 7): ``--version``, a nested option's help,
plain text instead of Sphinx markup, whole descriptions, the values of the ``--config`` files given with
``fit --help``; help without torch or Lightning: tests/cli/test_help_fast.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.core.version import __version__

ROOT = Path(__file__).resolve().parents[2]
SPHINX = (":class:", ":mod:", ":func:", ":meth:", ":data:", ":attr:", "``")


@pytest.fixture(autouse=True)
def help_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PAL_CACHE_DIR", str(folder))
    return folder


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _out(capsys, "--version") == f"pal-lightning {__version__}\n"


def test_the_nested_options_model_help_lists_have_a_help(capsys: pytest.CaptureFixture[str]) -> None:
    model = _out(capsys, "fit", "--model.help")
    assert "The keys of each item: --model.tasks.help" in model
    tasks = _out(capsys, "fit", "--model.tasks.help")
    assert tasks.startswith("Each item of --model.tasks (MultiTaskModule) is a mapping of these keys:")
    for key in ("  name: (required)", "  kind: single_classification", "  hf_path: null", "  files: {}"):
        assert key in tasks, key
    assert "registered task: " in tasks and "sst" in tasks and "glue_mrpc" in tasks
    adapter = _out(capsys, "fit", "--model.adapter.help")
    assert "  --model.adapter.method pals   (str)" in adapter
    assert "  --model.simcse.temperature 0.05   (float)" in _out(capsys, "fit", "--model.simcse.help")


def test_model_and_data_help_are_plain_and_whole(capsys: pytest.CaptureFixture[str]) -> None:
    model = _out(capsys, "fit", "--model.help")
    for markup in SPHINX:
        assert markup not in model, markup
    # every documented sentence, not the first one cut short
    assert "Each such step is skipped: every gradient is dropped, so AdamW moves no weight" in " ".join(
        model.split()
    )
    assert "  --model.adapter.size null   (int | None)" in model  # a nested option's fields, after it
    assert "  --model.lr 3e-05   (float)" in model
    for name in (
        "MultiTaskModule",
        "pal_lightning.MultiTaskModule",
        "pal_lightning.module.multitask.MultiTaskModule",
    ):
        assert _out(capsys, "fit", "--model.help", name) == model, name
    data = _out(capsys, "fit", "--data.help")
    assert "Set through --model.encoder (the CLI copies it)." in data
    assert not any(markup in data for markup in SPHINX[:-1])


def test_model_help_of_a_subclass_and_of_no_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_help_pkg.py").write_text(
        "from pal_lightning import MultiTaskModule\n\n\n"
        "class MyModule(MultiTaskModule):\n"
        '    """Mine.\n\n    Args:\n        extra: how much more, in :class:`~a.b.Thing` units.\n    """\n\n'
        "    def __init__(self, extra: int = 3, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = _out(capsys, "fit", "--model.help", "my_help_pkg.MyModule")
    assert "The options of --model (MyModule)" in out and "  --model.extra 3   (int)" in out
    assert "how much more, in Thing units." in out
    assert main(["fit", "--model.help", "my_help_pkg.Nope"]) == USER_ERROR_EXIT
    err = capsys.readouterr().err
    assert err.startswith("pal-lightning: error: Cannot import the class 'my_help_pkg.Nope'")
    assert len(err.splitlines()) == 1
    assert main(["fit", "--model.lr.help"]) == USER_ERROR_EXIT
    assert "The option --model.lr has no options of its own" in capsys.readouterr().err


def test_fit_help_cuts_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(capsys, "fit", "--help")
    library = out[out.index("model options (") : out.index("checkpoints and predictions:")]
    assert library.count("  --model.") + library.count("  --data.") > 40
    assert not [line for line in library.splitlines() if line.rstrip().endswith("...")]
    flat = " ".join(out.split())
    assert "--model.encoder sentence-transformers/all-MiniLM-L6-v2" in flat
    assert "the embeddings lr * layer_lr_decay**(L + 1)" in flat  # the whole first sentence
    assert "(pins the weights; the data module's tokenizer follows through the CLI link)" in flat
    assert "{method: pals, size: null, num_heads: 6, placement: all, num_layers: null, init: zero," in flat


def test_fit_help_shows_the_values_of_the_given_configs(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(ROOT / "configs" / "quickstart.yaml")
    out = _out(capsys, "fit", "--config", config, "--model.head_lr", "0.002", "--help")
    assert "model options (MultiTaskModule, values of the --config files;" in out
    for option in ("--model.pair_encoding siamese", "--model.lr 0.0001", "--model.head_lr 0.002"):
        assert option in out, option
    assert "--data.eval_batch_size 256" in out and "--model.lr 3e-05" not in out
    demo = _out(capsys, "fit", "--config", str(ROOT / "configs" / "demo.yaml"), "--help")
    assert "--data.data_dir demo" in demo and "--data.predict_splits [dev]" in demo  # through config: chains
