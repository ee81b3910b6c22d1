"""Every command and code block of the README, CONTRIBUTING.md and the pages in docs/ runs as written, in
page order, on fixture data (issue 18, item 2).

One working folder plays the fresh clone: the CS224N fixture files stand in for ``PAL_DATA_DIR``, a random
6-layer encoder of width 32 for all-MiniLM-L6-v2, and every ``pal-lightning fit`` gets the options of
:data:`SHRINK` it does not set itself (a run of seconds). Python blocks run there in order, so a block sees
what the commands before it wrote; a block repeated word for word on a later page runs once. What cannot
run in CI is listed with the reason in :data:`NOT_RUN_COMMANDS` and :data:`BLOCKS` and checked another way;
a block or command neither run nor listed fails :func:`test_every_doc_block_is_run_or_listed`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from benchmarks.conftest import load_benchmark

from pal_lightning.cli.main import main
from pal_lightning.testing import save_tiny_encoder, tiny_bert_config, write_cs224n_data

ROOT = Path(__file__).resolve().parents[2]

#: The pages whose blocks run first, in this order: a block may use what an earlier page's blocks wrote.
#: The scaling page runs before the models page so that its resume finds the main job's ``last.ckpt`` as
#: the newest under ``runs/quickstart`` (the models page's subclass run adds a version there). Any other
#: page under docs/ runs after them (:func:`pages`).
PAGES = (
    "README.md",
    "docs/index.md",
    "docs/running.md",
    "docs/data.md",
    "docs/experiments.md",
    "docs/gem.md",
    "docs/scaling.md",
    "docs/models.md",
    "docs/extending.md",
    "CONTRIBUTING.md",
)
#: Markdown pages under docs/ whose blocks are not commands, and why.
NOT_SCANNED = {
    "docs/design.md": "diagrams and formulas of the methods (blocks without a language), no commands",
    "docs/families.md": "tables and prose; its example commands run on tiny folders in tests/cli/test_families_cli.py",
}


def pages() -> list[str]:
    """:data:`PAGES`, then every other Markdown page under docs/ not in :data:`NOT_SCANNED` (the API pages
    and the page that includes CONTRIBUTING.md hold no blocks of their own today)."""
    others = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    return [*PAGES, *(p for p in others if p not in PAGES and p not in NOT_SCANNED)]


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: the page, its ``##`` section, language and text."""

    page: str
    section: str
    language: str
    body: str

    @property
    def key(self) -> str:
        """``<page> | <section> | <first line>``: how :data:`BLOCKS` names a block (an edited block must be
        re-checked)."""
        return f"{self.page} | {self.section} | {self.body.splitlines()[0].strip()}"


def page_text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def page_blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the ``##`` section it is in."""
    blocks, heading = [], ""
    pattern = re.compile(r"^## (?P<section>.*?)$|^```(?P<language>\w*)\n(?P<body>.*?)^```", re.S | re.M)
    for match in pattern.finditer(page_text(page)):
        if match.group("section") is not None:
            heading = match.group("section").strip()
        else:
            blocks.append(Block(page, heading, match.group("language"), match.group("body")))
    return blocks


def doc_blocks() -> list[Block]:
    """Every block of :func:`pages` in order, a block repeated word for word on a later page only once."""
    unique: dict[tuple[str, str], Block] = {}
    for block in (b for page in pages() for b in page_blocks(page)):
        unique.setdefault((block.language, block.body), block)
    return list(unique.values())


def section_blocks(title: str, language: str) -> list[str]:
    """The bodies of the ``language`` blocks of the ``## title`` section of the first of :data:`PAGES` with one."""
    page = next(p for p in PAGES if f"\n## {title}\n" in page_text(p))
    return [b.body for b in page_blocks(page) if b.section == title and b.language == language]


def command_lines(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and blank lines dropped."""
    lines = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words:  # a line with a comment re-joined without it; others verbatim (redirections stay)
            lines.append(shlex.join(words) if "#" in line else line.strip())
    return lines


# --- what is not run, and how it is checked instead -------------------------------------------------


def _print_config(args: list[str], ws: Workspace) -> None:
    """The configuration resolves: the command after ``pal-lightning`` (``srun pal-lightning``,
    ``torchrun ... -m pal_lightning``) with ``--print_config``."""
    start = next(i for i, a in enumerate(args) if a in ("pal-lightning", "pal_lightning")) + 1
    assert main([*ws.repo_paths(args[start:]), "--print_config"]) == 0
    assert "model:" in ws.output()


def _benchmark_arguments(args: list[str], ws: Workspace) -> None:
    """Every option is one the script defines; with a ``parse_args``, the whole line parses."""
    script = ROOT / args[1]  # python benchmarks/<name>.py ...
    source = script.read_text()
    for option in (a.split("=", 1)[0] for a in args[2:] if a.startswith("--")):
        assert f'"{option}"' in source, f"{script.name} has no option {option}"
    module = load_benchmark(script.stem)
    if hasattr(module, "parse_args"):
        module.parse_args(ws.repo_paths(args[2:]))


def _script_exists(args: list[str], ws: Workspace) -> None:
    (script,) = [a for a in args if a.endswith(".sh")]
    assert (ROOT / script).is_file(), script


def _test_defined(where: str) -> None:
    """``tests/<file>.py::<test>`` exists: the test that runs what a page shows."""
    path, name = where.split("::")
    assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), where


#: The benchmark scripts a page shows, and the test of tests/benchmarks/ that runs each on a tiny model.
BENCHMARK_TESTS = {
    "reproduce": "reproduce",
    "grid": "grid_specs",
    "peers": "peers",
    "two_stage": "two_stage",
    "continual": "continual",
    "serve_load": "serve_load",
}
BUILDS_ENV = "builds an environment from the package index (minutes)"

#: The test that runs docs/serving.md's blocks against the server it starts.
SERVING_PAGE_TEST = "tests/serving/test_server.py::test_the_serving_page_runs_as_written"

#: Commands not run here, by how they start: why, and the check made instead (``None``: none possible).
NOT_RUN_COMMANDS: dict[str, tuple[str, Callable[[list[str], Workspace], None] | None]] = {
    "pip install": ("installs packages from an index; CI (.ci/run) runs the same line", None),
    "if [ -x /usr/bin/apt-get ]": (
        "installs Debian's Chromium as root; CI (.ci/run) runs the same line",
        None,
    ),
    "python -m pytest": ("the test suite itself; CI runs the same line", None),
    "bash tools/mutation/run.sh": (
        "mutation testing, hours of CPU; tools/mutation/MUTATION.md",
        _script_exists,
    ),
    "bash tools/version_floors.sh": (BUILDS_ENV, _script_exists),
    "FLOORS=all ": (BUILDS_ENV, _script_exists),
    "mkdocs build --strict": (
        "the docs site; tests/docs/test_docs_site.py builds it into a temporary folder",
        lambda args, ws: _test_defined("tests/docs/test_docs_site.py::test_the_site_builds_strictly"),
    ),
    **{
        f"python benchmarks/{script}.py": (
            f"full runs; tests/benchmarks/test_{test}.py",
            _benchmark_arguments,
        )
        for script, test in BENCHMARK_TESTS.items()
    },
    "torchrun ": ("GPUs and nodes; tests/cli/test_torchrun_cli.py launches 2 CPU processes", _print_config),
    "source .venv/bin/activate": ("the SLURM job's environment", None),
    "srun pal-lightning": ("a SLURM job on GPU nodes", _print_config),
    "pal-lightning fit --config configs/bert_base_pals_annealed.yaml --config configs/ddp.yaml": (
        "four GPUs",
        _print_config,
    ),
    "pal-lightning fit --config configs/quickstart.yaml --config configs/aux_cfimdb_sst2.yaml": (
        "needs the CFIMDB and GLUE SST-2 files; trained on fixtures in tests/tasks/test_auxiliary.py",
        _print_config,
    ),
    "pal-lightning serve": (
        "a server that runs until stopped; tests/serving/test_server.py starts the page's first line in a "
        "subprocess, runs the page's blocks against it and parses the others",
        lambda args, ws: _test_defined(SERVING_PAGE_TEST),
    ),
    "pal-lightning fit --config configs/quickstart.yaml --config configs/aux_snli.yaml": (
        "SNLI from the hub; a local copy in the hub layout in tests/tasks/test_auxiliary.py",
        _print_config,
    ),
}


# --- the working folder -----------------------------------------------------------------------------


#: Options added after a ``fit`` command's own, unless it sets them: a run of seconds on the fixtures.
SHRINK = {
    "trainer.accelerator": "cpu",
    "trainer.max_steps": "2",
    "trainer.check_val_every_n_epoch": "1",
    "trainer.enable_progress_bar": "false",
    "trainer.log_every_n_steps": "1",
    "model.init_args.encoder": "{encoder}",
    "data.init_args.batch_size": "4",  # evaluation keeps the configs' batch: a fixture dev set is one
    "data.init_args.max_length": "32",
    "data.init_args.steps_per_epoch": "2",
    "data.init_args.cache_dir": "false",
    "save_model.enabled": "false",  # but the demo's: the pages load runs/demo/version_0/model
}
#: Continual configs size their epoch by phases: one batch per task instead of steps.
SHRINK_CONTINUAL = {
    **{k: v for k, v in SHRINK.items() if k not in ("trainer.max_steps", "data.init_args.steps_per_epoch")},
    "data.init_args.steps_per_task": "1",
}
SHRINK_PRETRAIN = {
    "trainer.accelerator": "cpu",
    "trainer.max_steps": "2",
    "trainer.val_check_interval": "2",
    "trainer.enable_progress_bar": "false",
    "model.init_args.encoder": "{encoder}",
    "data.init_args.batch_size": "8",
    "data.init_args.max_length": "32",
    "data.init_args.max_val_sentences": "16",
}


def _option(word: str) -> str:
    """``--model.encoder`` -> ``model.init_args.encoder`` (the name :data:`SHRINK` uses)."""
    name = word[2:].split("=", 1)[0]
    group, _, rest = name.partition(".")
    if group in ("model", "data") and rest and not rest.startswith(("init_args.", "class_path")):
        return f"{group}.init_args.{rest}"
    return name


@dataclass
class Workspace:
    """The fresh clone's working folder, and what the blocks so far left behind."""

    folder: Path
    encoder: Path
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    namespace: dict[str, Any] = field(default_factory=dict)  # the Python blocks' variables, shared
    last_fit_output: str = ""
    ran: list[str] = field(default_factory=list)

    def output(self) -> str:
        return self.capsys.readouterr().out

    @staticmethod
    def repo_paths(args: list[str]) -> list[str]:
        """The repository's own files (``configs/...``) by absolute path: the clone is the repository."""
        return [str(ROOT / a) if a.startswith(("configs/", "benchmarks/")) else a for a in args]

    def shrunk(self, args: list[str]) -> list[str]:
        line = " ".join(args)
        table = (
            SHRINK_PRETRAIN if args[0] == "pretrain" else SHRINK_CONTINUAL if "continual" in line else SHRINK
        )
        if "--ckpt_path" in args:  # a resume: two steps further than the run it continues
            table = {**table, "trainer.max_steps": "4"}
        if "configs/demo.yaml" in args:
            table = {k: v for k, v in table.items() if k != "save_model.enabled"}
        given = {_option(a) for a in args if a.startswith("--")}
        extra = []
        for name, value in table.items():
            if name not in given:
                extra += [f"--{name}", value.format(encoder=self.encoder)]
        return [*self.repo_paths(args), *extra]

    def run_command(self, line: str) -> None:
        start = time.perf_counter()
        self._run_command(line)
        self.ran.append(f"{time.perf_counter() - start:5.1f} s  {line}")

    def _run_command(self, line: str) -> None:
        words = shlex.split(line)
        if words[0] == "export":  # export PAL_DATA_DIR=/path/to/...: the fixture folder instead
            name, _ = words[1].split("=", 1)
            assert name == "PAL_DATA_DIR", line
            return
        if words[0].startswith("PYTHONPATH="):  # PYTHONPATH=. pal-lightning ...: the working folder
            self.monkeypatch.syspath_prepend(str(self.folder))
            words = words[1:]
        if words[0] == "pal-lightning":
            # evaluation and predict use the run's own settings; --print_config runs nothing
            shrink = words[1] in ("fit", "pretrain") and "--print_config" not in words
            assert main(self.shrunk(words[1:]) if shrink else self.repo_paths(words[1:])) == 0, line
            out = self.output()
            if "--print_config" in words:
                assert "model:" in out, line
            elif words[1] == "fit":
                assert "CS224N overall (dev):" in out, line
                self.last_fit_output = out
        else:  # only the shell lines the coverage test accepts: printf ... > mine.csv
            assert words[0] == "printf", f"page command neither run nor listed: {line}"
            subprocess.run(["bash", "-c", line], cwd=self.folder, check=True)


def not_run(line: str) -> tuple[str, Callable[[list[str], Workspace], None] | None] | None:
    """The :data:`NOT_RUN_COMMANDS` entry of a command line, if it is listed."""
    return next((v for k, v in NOT_RUN_COMMANDS.items() if line.startswith(k)), None)


# --- the blocks that are not bash -------------------------------------------------------------------


def _run_bash(block: Block, ws: Workspace) -> None:
    for line in command_lines(block.body):
        listed = not_run(line)
        if listed is None:
            ws.run_command(line)
        elif listed[1] is not None:
            listed[1](shlex.split(line), ws)


def _exec(block: Block, ws: Workspace, code: str | None = None) -> None:
    exec(compile(code or block.body, f"{block.page} ({block.section})", "exec"), ws.namespace)  # noqa: S102


def _score_table(block: Block, ws: Workspace) -> None:
    """The example output: every line of it, numbers and the home folder generalised, in the last fit's."""
    for line in block.body.splitlines():
        pattern = re.sub(r"(?:\\ )+", " +", re.escape(line.rstrip()))  # right-aligned columns: any spacing
        pattern = re.sub(r"\d+(?:\\\.\d+)?", r"-?\\d+(?:\\.\\d+)?", pattern).replace(r"/home/me", ".*")
        assert re.search(f"^{pattern}$", ws.last_fit_output, re.M), f"{line!r} not in\n{ws.last_fit_output}"


def _config_file_named_in_comment(block: Block, ws: Workspace, run: bool) -> None:
    """A YAML block whose first line names its file and the command using it: written, then run (or,
    when it cannot run here, resolved with ``--print_config``)."""
    first = block.body.splitlines()[0]
    name = re.match(r"# ([\w.]+\.yaml)", first)
    assert name, first
    (ws.folder / name.group(1)).write_text(block.body)
    command = re.search(r"(pal-lightning .*)$", first)
    if command is None:
        using = r"\(`(pal-lightning [^`]*--config " + re.escape(name.group(1)) + ")`"
        command = re.search(using, page_text(block.page))
    assert command, f"no command using {name.group(1)}"
    if run:
        ws.run_command(command.group(1))
    else:
        _print_config(shlex.split(command.group(1)), ws)


def _gem_callbacks(block: Block, ws: Workspace) -> None:
    """The GEM ``trainer.callbacks`` snippet as an overlay of the quickstart."""
    (ws.folder / "gem_callbacks.yaml").write_text(block.body)
    assert "GEMCallback" in yaml.safe_load(block.body)["trainer"]["callbacks"][0]["class_path"]
    ws.run_command(
        "pal-lightning fit --config configs/quickstart.yaml --config gem_callbacks.yaml"
        " --trainer.default_root_dir runs/gem"
    )


def _save_load_share(block: Block, ws: Workspace) -> None:
    """``model`` is the one the blocks before made; ``push_to_hub`` needs a hub account: recorded only."""
    from pal_lightning import MultiTaskModule

    pushed: list[str] = []
    ws.monkeypatch.setattr(MultiTaskModule, "push_to_hub", lambda self, repo, *a, **k: pushed.append(repo))
    ws.namespace.setdefault("model", MultiTaskModule.from_pretrained(ws.folder / "runs/demo/version_0/model"))
    _exec(block, ws)
    assert (ws.folder / "my-model" / "config.json").is_file() and pushed == ["user/my-model"]


def _predict(block: Block, ws: Workspace) -> None:
    _exec(block, ws)
    out = ws.namespace["out"]
    assert len(out.labels) == 2 and set(out.labels) <= set(out.label_names)
    assert out.probabilities.shape == (2, len(out.label_names)) == (2, 5)
    np.testing.assert_allclose(out.probabilities.sum(1), 1.0, atol=1e-6)


def _pipeline(block: Block, ws: Workspace) -> None:
    """The pipeline blocks: transformers-shaped predictions of the demo model; the README's embeddings too."""
    _exec(block, ws)
    classify = ws.namespace["classify"]
    out = classify("A fine film.")
    assert len(out) == 1 and set(out[0]) == {"label", "score"} and 0 < out[0]["score"] <= 1
    assert out[0]["label"] in classify.model.label_names["sst"]
    if "vectors" in ws.namespace:
        assert ws.namespace["vectors"].shape[0] == 2


def _embeddings(block: Block, ws: Workspace) -> None:
    _exec(block, ws)
    plain, sst, unit = (ws.namespace[k] for k in ("plain", "sst", "unit"))
    assert plain.shape[0] == 2 and sst.shape == (1, plain.shape[1]) and unit.shape == (plain.shape[1],)
    np.testing.assert_allclose(np.linalg.norm(unit), 1.0, atol=1e-5)


def _onnx(block: Block, ws: Workspace) -> None:  # onnx comes with the export extra, which CI installs
    _exec(block, ws)
    assert (ws.folder / "sst.onnx").stat().st_size > 0
    assert ws.namespace["logits"].shape[0] == 2


def _subclass(block: Block, ws: Workspace) -> None:
    (ws.folder / "my_models.py").write_text(block.body)  # "in my_models.py", as the page says


def _own_parameters(block: Block, ws: Workspace) -> None:
    """The log-variances land in their own group, the library's groups unchanged."""
    _exec(block, ws)
    model = ws.namespace["UncertaintyWeighted"](encoder=str(ws.encoder), adapter={"size": 8, "num_heads": 2})
    groups = model.parameter_groups()
    assert groups[-1] == {"name": "log_vars", "params": [model.log_vars], "lr": 1e-2, "weight_decay": 0.0}
    assert [g["name"] for g in groups[:-1]][:2] == ["pretrained", "pretrained_no_decay"]


def _subclass_saved(block: Block, ws: Workspace) -> None:
    """The subclass's folder loads as its class, named each way the block shows; unnamed, one line."""
    from pal_lightning import MultiTaskModule, PalUserError

    _exec(block, ws)
    focal = ws.namespace["FocalLossModule"]
    assert type(ws.namespace["model"]) is focal and type(ws.namespace["classify"].model) is focal
    with pytest.raises(PalUserError, match="saved from my_models.FocalLossModule, not MultiTaskModule"):
        MultiTaskModule.from_pretrained(ws.folder / "focal-model")


def _describe_batch(block: Block, ws: Workspace) -> None:
    from pal_lightning import MultiTaskDataModule

    _exec(block, ws)
    data = MultiTaskDataModule(
        data_dir=str(ws.folder / "data"),
        batch_size=4,
        max_length=32,
        tokenizer=str(ws.encoder),
        cache_dir=False,
    )
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    task, shape, labelled = ws.namespace["describe"](batch)
    assert task in ("sst", "qqp", "sts") and shape[0] == 4 and labelled


def _elsewhere(where: str) -> Callable[[Block, Workspace], None]:
    """A block another test runs as written (``tests/<file>.py::<test>``): here only that test's presence."""

    def check(block: Block, ws: Workspace) -> None:
        _test_defined(where)

    return check


def _register_task(block: Block, ws: Workspace) -> None:
    """The extending guide's task, registered into a copy of the registry (other tests see the original)."""
    from pal_lightning.tasks import specs

    ws.monkeypatch.setattr(specs, "_REGISTRY", dict(specs._REGISTRY))
    _exec(block, ws)
    assert specs.get_task("my_topics").num_labels == 4


#: Non-bash blocks by :attr:`Block.key`: how each is run (or why not, and what checks it).
BLOCKS: dict[str, Callable[[Block, Workspace], None]] = {
    "README.md | The main job | CS224N overall (dev): 0.7577  [best validation at step 1200, 1200 steps, 6504 s]": (
        _score_table
    ),
    "docs/data.md | Your own task: `format: hf` | # my_tasks.yaml": lambda b, ws: (
        _config_file_named_in_comment(b, ws, run=False)
    ),  # GLUE MRPC from the hub
    "docs/gem.md | Gradient Episodic Memory | trainer:": _gem_callbacks,
    "docs/scaling.md | Other loggers | # loggers.yaml: pal-lightning fit --config configs/quickstart.yaml --config loggers.yaml": (
        lambda b, ws: _config_file_named_in_comment(b, ws, run=False)  # W&B needs wandb and an account
    ),
    "docs/models.md | Save, load and share a model | from pal_lightning import MultiTaskModule": _save_load_share,
    "docs/models.md | Predict new sentences | from pal_lightning import MultiTaskModule": _predict,
    "README.md | A first run: the demo (no data to fetch, no network) | import pal_lightning": _pipeline,
    "docs/models.md | Predict new sentences | import pal_lightning": _pipeline,
    "docs/models.md | Sentence embeddings | from pal_lightning import MultiTaskModule": _embeddings,
    "docs/models.md | One task without Lightning, and ONNX | from pal_lightning.module.export import SingleTaskModel, export_onnx": (
        _onnx
    ),
    # the quickstart's own encoder (MiniLM) is needed: a fresh model is built with the default encoder
    "docs/models.md | Task-only weights | from pal_lightning import MultiTaskModule, load_task_weights, save_task_weights": (
        _elsewhere("tests/docs/test_readme.py::test_quickstart_then_task_weights_as_written")
    ),
    "docs/models.md | Your own module | import torch.nn.functional as F": _subclass,
    "docs/models.md | Your own module | from pal_lightning.core.batch import INPUT_IDS, LABELS, TASK, side_inputs, side_keys": (
        _describe_batch
    ),
    "docs/models.md | Your own module | from my_models import FocalLossModule": _exec,
    "docs/models.md | Your own module | import torch": _own_parameters,
    "docs/models.md | Your own module | import pal_lightning": _subclass_saved,
    # registered, trained, counted, saved and loaded by the guide's own test
    "docs/extending.md | Adding a per-task method | from dataclasses import dataclass": _elsewhere(
        "tests/module/test_extending.py::test_the_guides_method_starts_as_the_encoder_counts_trains_saves_and_loads"
    ),
    "docs/extending.md | Adding a task | from pal_lightning.tasks import TaskSpec, register_task": _register_task,
    # the rule registered by its block and drawn by every sampler, the config chosen through the CLI
    "docs/extending.md | Adding a sampling rule | from pal_lightning import register_sampling_rule": _elsewhere(
        "tests/data/test_task_plan.py::test_every_rule_draws_what_it_logs"
    ),
    "docs/extending.md | Adding a sampling rule | # rule.yaml, an overlay of your config (with the rule's module imported)": (
        _elsewhere("tests/data/test_task_plan.py::test_a_registered_rule_is_chosen_from_yaml")
    ),
    # requests to the server that page starts: run against it by its own test
    "docs/serving.md | Requests | import json": _elsewhere(SERVING_PAGE_TEST),
    'docs/serving.md | Requests | with urllib.request.urlopen("http://127.0.0.1:8000/tasks") as response:': (
        _elsewhere(SERVING_PAGE_TEST)
    ),
    "docs/serving.md | Mistakes | import urllib.error": _elsewhere(SERVING_PAGE_TEST),
    # mixed-task batches: a tiny random module, run as written (and by tests/module/test_encoding.py)
    "docs/extending.md | Adding a per-task method | import torch": _exec,
}


def test_every_doc_block_is_run_or_listed() -> None:
    assert all((ROOT / page).is_file() for page in [*PAGES, *NOT_SCANNED])
    blocks = doc_blocks()
    assert len(blocks) >= 25
    for block in blocks:
        if block.language == "bash":
            for line in command_lines(block.body):
                runnable = line.startswith(
                    ("pal-lightning ", "PYTHONPATH=. pal-lightning ", "export ", "printf ")
                )
                assert runnable or not_run(line) is not None, (
                    f"{block.page}: command neither run nor listed: {line}"
                )
        else:
            assert block.key in BLOCKS, f"block neither run nor listed: {block.key!r}"
    stale = set(BLOCKS) - {b.key for b in blocks}
    assert not stale, f"listed blocks no longer in the pages: {stale}"
    for line in NOT_RUN_COMMANDS:
        assert any(c.startswith(line) for b in blocks for c in command_lines(b.body)), line


def test_the_pages_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PAL_DATA_DIR", str(write_cs224n_data(tmp_path / "data")))
    monkeypatch.setenv("PAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "argv", ["pal-lightning"])
    encoder = save_tiny_encoder(tmp_path / "encoder", encoder_config=tiny_bert_config(layers=6))
    ws = Workspace(tmp_path, encoder, capsys, monkeypatch)
    try:
        for block in doc_blocks():
            if block.language == "bash":
                _run_bash(block, ws)
            else:
                BLOCKS[block.key](block, ws)
    finally:  # the page's my_models.py is this folder's: other tests import their own
        sys.modules.pop("my_models", None)
    # what the commands wrote, as the pages say
    runs = tmp_path / "runs"
    assert (runs / "quickstart" / "version_0" / "predictions" / "sst-test-output.csv").is_file()
    assert (runs / "pretrain_mlm" / "version_0" / "encoder" / "config.json").is_file()
    assert (tmp_path / "mine-sst-predictions.csv").is_file()
    # the subclass's folder, its class named on the command line
    assert (tmp_path / "mine-focal.csv").is_file()
    # the resume ("Checkpoints and resuming") continued the main job two steps further, into version_1
    resumed = torch.load(runs / "quickstart" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == 4
    # the focal-loss subclass ran through class_path with its own option
    saved = [yaml.safe_load(p.read_text()) for p in sorted(runs.glob("quickstart/version_*/config.yaml"))]
    focal = [c["model"] for c in saved if c["model"]["class_path"] == "my_models.FocalLossModule"]
    assert len(focal) == 1 and focal[0]["init_args"]["gamma"] == 1.5
    assert len(ws.ran) >= 15
    print("\n".join(["Page commands run (wall time):", *ws.ran]))  # shown with -s or on failure


# --- the main job with the real encoder, then docs/models.md's task-only weights block ------------


def test_quickstart_then_task_weights_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = write_cs224n_data(tmp_path / "data")
    short = {  # one step, and no model folder: the block reads the best checkpoint
        "trainer": {"accelerator": "cpu", "max_steps": 1, "check_val_every_n_epoch": 1},
        "save_model": {"enabled": False},
        "data": {"init_args": {"data_dir": str(data), "batch_size": 4, "max_length": 32}},
    }
    short["data"]["init_args"].update(steps_per_epoch=1, cache_dir=False)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short))
    (fit,) = [c for b in section_blocks("The main job", "bash") for c in command_lines(b) if "fit" in c]
    words = shlex.split(fit)
    assert words[0] == "pal-lightning", fit
    assert main([*Workspace.repo_paths(words[1:]), "--config", "short.yaml"]) == 0
    assert "CS224N overall (dev):" in capsys.readouterr().out
    assert (tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints" / "best.ckpt").is_file()

    (weights_block,) = section_blocks("Task-only weights", "python")
    exec(compile(weights_block, "docs/models.md (Task-only weights)", "exec"), {})  # noqa: S102 - the page's code
    assert (tmp_path / "sts-adapter.safetensors").is_file()


def test_task_weights_of_another_pair_encoding_name_the_option(tmp_path: Path) -> None:
    from pal_lightning import MultiTaskModule, PalUserError, load_task_weights, save_task_weights
    from pal_lightning.testing import TINY_BERT

    tiny = {
        "encoder_config": TINY_BERT,
        "adapter": {"size": 8, "num_heads": 2},
        "tasks": ["sst", "qqp", "sts"],
    }
    saved = save_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match="pair_encoding it was trained with .*this model has 'cross'"):
        load_task_weights(MultiTaskModule(**tiny), saved)
    assert load_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), saved) == ["sst", "qqp", "sts"]


# --- what the pages name exists; CI performs the README's install and test commands ---------------


def test_pages_name_shipped_configs() -> None:
    named = {n for page in PAGES for n in re.findall(r"configs/([a-z][\w/]*\.yaml)", page_text(page))}
    assert {"quickstart.yaml", "ddp.yaml", "demo.yaml"} <= named
    missing = sorted(n for n in named if not (ROOT / "configs" / n).is_file())
    assert not missing


def _words(lines: list[str]) -> list[tuple[str, ...]]:
    return [tuple(shlex.split(line)) for line in lines]


def _ci_block(name: str) -> list[tuple[str, ...]]:
    """The commands after ``# --- <name>`` in ``.ci/run``, up to its next ``# ---`` marker, as words."""
    ci = (ROOT / ".ci" / "run").read_text()
    match = re.search(rf"^# --- {name}.*?\n(.*?)(?=^# ---|\Z)", ci, re.S | re.M)
    assert match, f"no '# --- {name}' block in .ci/run"
    return _words(command_lines(match.group(1)))


def test_ci_performs_the_readmes_install_and_test_commands() -> None:
    install = _words([c for b in section_blocks("Install", "bash") for c in command_lines(b)])
    contributor = ("pip", "install", "-e", ".[dev,offline,export,peers,serve]")
    assert contributor in install
    ci_install = _ci_block("README install")
    assert contributor in ci_install
    assert set(ci_install) <= set(install), "an install line of .ci/run that the README does not show"
    (test,) = [c for b in section_blocks("Test", "bash") for c in command_lines(b)]
    assert test == "python -m pytest -q"
    assert tuple(shlex.split(test)) in _ci_block("README test command")
