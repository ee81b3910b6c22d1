"""The hand-written parts of the help (every other screen is LightningCLI's) and "did you mean"."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

SUBCOMMAND_HELP = {
    "fit": "Train a model on its tasks, validate it, and save checkpoints and the CS224N scores.",
    "validate": "Score a checkpoint on the dev sets and print the CS224N table.",
    "test": "Score a checkpoint on the labelled test sets.",
    "predict": "Write CS224N prediction files (<task>-<split>-output.csv) of a checkpoint.",
}
_PRETRAIN_HELP = "Masked-language pre-training of the encoder on the tasks' text."
_SERVE_HELP = "Serve every task of a saved model over HTTP (POST /predict, GET /tasks; the serve extra)."
_NEW_SENTENCES = (
    "Predict your own sentences: pal-lightning predict --predict.model DIR --predict.task sst --predict.input FILE"
    " (with --help: its options)."
)


def registered() -> str:
    """The registered adapter methods, encoder model types, tasks and sampling rules, read from their
    registries."""
    from pal_lightning.data.sampling.schedules import sampling_rules
    from pal_lightning.modeling.families import supported_model_types
    from pal_lightning.modeling.methods import METHODS, AdapterConfig, option_names
    from pal_lightning.tasks.specs import available_tasks

    common = [f.name for f in fields(AdapterConfig) if f.name != "method"]
    own = [f"{m} ({', '.join(o for o in option_names(m)[1:] if o not in common)})" for m in METHODS]
    return (
        f"Adapter methods (--model.adapter.method): {', '.join(METHODS)}. Each takes "
        f"--model.adapter.{{{','.join(common)}}}; their own options: "
        f"{', '.join(o for o in own if not o.endswith('()'))}. "
        f"Encoder model types (--model.encoder): {', '.join(supported_model_types())}. "
        f"Registered tasks (--model.tasks): {', '.join(available_tasks())}. "
        f"Sampling rules (--data.sampling): {', '.join(sampling_rules())}."
    )


def set_subcommand_help(parser: Any) -> None:
    """Whole-sentence subcommand descriptions, and :func:`registered` under each subcommand's ``--help``."""
    from pal_lightning.core.private_api import subcommand_help_actions, subcommand_parsers

    for choice in subcommand_help_actions(parser):
        if choice.dest in SUBCOMMAND_HELP:
            choice.help = SUBCOMMAND_HELP[choice.dest]
    for name, subparser in subcommand_parsers(parser).items():
        subparser.epilog = registered() + (f" {_NEW_SENTENCES}" if name == "predict" else "")


def top_level_help() -> str:
    """``pal-lightning --help`` (without importing torch)."""
    commands = {**SUBCOMMAND_HELP, "pretrain": _PRETRAIN_HELP, "serve": _SERVE_HELP}
    return "\n".join(
        [
            "usage: pal-lightning [--help] [--version] {" + ",".join(commands) + "} ...",
            "",
            "Multi-task fine-tuning of Transformer encoders with per-task methods, on PyTorch Lightning.",
            "",
            "commands:",
            *(f"  {name:<10} {text}" for name, text in commands.items()),
            "",
            "  pal-lightning COMMAND --help                its options; the registered methods, encoders, tasks",
            "  pal-lightning COMMAND --model.help [CLASS]  every option of the model (--data.help: of the data)",
            "  pal-lightning --version                     the version",
            "",
            "example: pal-lightning fit --config configs/quickstart.yaml",
            _NEW_SENTENCES,
        ]
    )


def suggest(unknown: str, accepted: Sequence[str], n: int = 2) -> list[str]:
    """Accepted names close to ``unknown``: the same word initials (``learning_rate`` -> ``lr``), then similar ones."""

    def initials(name: str) -> str:
        return "".join(word[0] for word in name.split("_") if word)

    # a grouped option (optim.lr) by its own name
    by_initials = [a for a in accepted if a.rpartition(".")[2] == initials(unknown) or initials(a) == unknown]
    close = difflib.get_close_matches(unknown, accepted, n=n, cutoff=0.6)
    return list(dict.fromkeys(by_initials + close))[:n]


# jsonargparse's messages for an unknown option
_NOT_ACCEPTED = re.compile(r"Parser key \"(\w+)\".*?Option '(\w+)' is not accepted")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: --(\w+)\.(?:[\w.]*\.)?(\w+)", re.IGNORECASE)


def did_you_mean(message: str, options_of: Callable[[str], Sequence[str] | None]) -> str:
    """`` Did you mean --model.optim.lr?`` for an unknown-option ``message`` (``options_of(group)``: its names),
    where the option moved into a group (``--model.lr``) the line saying so, or ``""``."""
    match = _NOT_ACCEPTED.search(message) or _UNRECOGNIZED.search(message)
    if not match:
        return ""
    group, name = match.groups()
    if group == "model" and f"optim.{name}" in (options_of(group) or ()):
        from pal_lightning.module.optim_config import moved_message

        return " " + moved_message(name)
    found = suggest(name, list(options_of(group) or ()))
    return " Did you mean " + " or ".join(f"--{group}.{f}" for f in found) + "?" if found else ""


def config_syntax_error(argv: Sequence[str]) -> str | None:
    """The file, line and column of a YAML syntax error in a ``--config`` file of ``argv`` (jsonargparse
    names ``"<unicode string>"``), else ``None``."""
    import yaml

    paths = [b for a, b in zip(argv, argv[1:], strict=False) if a in ("--config", "-c")]
    paths += [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                yaml.safe_load(f)
        except OSError:
            continue
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            context, cmark = getattr(err, "context", None), getattr(err, "context_mark", None)
            opened = f" ({context} at line {cmark.line + 1})" if context and cmark is not None else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            return (
                f"Config file {path} is not valid YAML: {problem}{where}{opened}. Fix the file and run again."
            )
    return None
