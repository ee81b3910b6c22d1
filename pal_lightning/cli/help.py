"""Help for people: a short ``--help``, whole-sentence subcommand descriptions, "did you mean".

* ``pal-lightning --help`` lists the commands with whole sentences (:func:`top_level_help`);
  ``pal-lightning --version`` prints the version. Neither imports torch or Lightning.
* ``pal-lightning fit --help`` prints the library's own options (model, data, checkpoints,
  predictions) with their defaults, or the values of the ``--config`` files given with it, and the
  first sentence of their documentation, then the Trainer options users change most, then where the
  rest is: ``--help-all`` (LightningCLI's full list of some 850 lines), ``--model.help`` and
  ``--data.help``.
* ``--model.help [CLASS]``, ``--data.help [CLASS]`` and the options of a nested option
  (``--model.adapter.help``, ``--model.tasks.help``, ``--model.simcse.help``) print every option with
  its type, default and whole documentation in plain text (:func:`class_help`). The tables come from
  :mod:`pal_lightning.cli.options`, cached, so that these screens start fast.
* An unknown option gets the closest accepted names (:func:`suggest`): ``--model.learning_rate``
  -> ``--model.lr`` (the initials of its words), ``--trainer.max_stesp`` -> ``--trainer.max_steps``.

:func:`set_subcommand_help` writes the help strings of jsonargparse's subcommand actions, which
only a private name reaches (:func:`pal_lightning.core.private_api.subcommand_help_actions`).
"""

from __future__ import annotations

import difflib
import re
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pal_lightning.cli.options import Option, doc_args, plain, show_value

__all__ = [
    "HELP_ALL",
    "PRETRAIN_GROUPS",
    "PRETRAIN_HELP",
    "SUBCOMMAND_HELP",
    "class_help",
    "config_syntax_error",
    "did_you_mean",
    "doc_args",
    "first_sentence",
    "help_request",
    "help_target",
    "set_subcommand_help",
    "short_help",
    "suggest",
    "top_level_help",
]

#: One whole sentence per subcommand, for ``pal-lightning --help``.
SUBCOMMAND_HELP = {
    "fit": "Train a model on its tasks, validate it, and save checkpoints and the CS224N scores.",
    "validate": "Score a checkpoint on the dev sets and print the CS224N table.",
    "test": "Score a checkpoint on the labelled test sets.",
    "predict": "Write CS224N prediction files (<task>-<split>-output.csv) of a checkpoint.",
}
#: ``pal-lightning pretrain`` in one sentence.
PRETRAIN_HELP = "Masked-language pre-training of the encoder on the tasks' text."
#: ``pretrain``'s own options beside the model's and the data's.
PRETRAIN_GROUPS = (
    (
        "--ckpt_path PATH",
        "resume pre-training from a checkpoint, or `last` (the newest under default_root_dir)",
    ),
    ("--checkpoint.*", "the best checkpoint (monitor val/mlm_loss, save_top_k 1, and last.ckpt)"),
)
#: The flag that shows LightningCLI's complete option list.
HELP_ALL = "--help-all"
#: Trainer options worth listing in the short help (the rest: ``--help-all``).
COMMON_TRAINER_OPTIONS = (
    ("max_steps", "optimizer steps to train (-1: use max_epochs)"),
    ("max_epochs", "epochs to train when max_steps is -1"),
    ("accelerator", "cpu, gpu, auto ..."),
    ("devices", "how many devices (several: DDP, see configs/ddp.yaml)"),
    ("precision", "auto (the fastest the device runs natively), 32-true, bf16-mixed, 16-mixed"),
    ("default_root_dir", "folder of the run folders (version_N)"),
    ("val_check_interval", "validate every N training batches (int) or fraction of an epoch"),
    ("check_val_every_n_epoch", "validate every N epochs"),
    ("limit_val_batches", "validate on N batches / a fraction (below 1.0: a partial score)"),
    ("accumulate_grad_batches", "batches per optimizer step"),
    ("gradient_clip_val", "clip the gradient norm to this value"),
    ("log_every_n_steps", "how often training metrics are logged"),
)
_OTHER_GROUPS = (
    ("--ckpt_path PATH", "a .ckpt file, or `last` / `best` (of the run whose config.yaml is given)"),
    ("--checkpoint.*", "the best checkpoint (monitor val/overall, save_top_k 1); also best.ckpt"),
    ("--last_checkpoint.every_n_train_steps N", "write last.ckpt every N steps (default: each validation)"),
    ("--predictions.output_dir DIR", "where predict writes (default: <run>/predictions)"),
    ("--predictions.overwrite true", "replace existing prediction files"),
)


def set_subcommand_help(parser: Any) -> None:
    """Replace LightningCLI's cut-off subcommand descriptions by :data:`SUBCOMMAND_HELP`."""
    from pal_lightning.core.private_api import subcommand_help_actions  # Lightning: not at help time

    for choice in subcommand_help_actions(parser):
        if choice.dest in SUBCOMMAND_HELP:
            choice.help = SUBCOMMAND_HELP[choice.dest]


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (a ``.`` or ``;`` and a space, outside brackets), in plain text."""
    text = plain(text)
    depth = 0
    for i, char in enumerate(text):
        depth += 1 if char in "([{" else -1 if char in ")]}" else 0
        ends = char in ".;" and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " ")
        if ends and not re.search(r"(?:\be\.g|\bi\.e|\betc)\.$", text[: i + 1]):
            return text[:i]
    return text.rstrip(".;")


def _width() -> int:
    """The terminal's width, between 80 and 110 columns (110 when the output is not a terminal)."""
    return max(80, min(110, shutil.get_terminal_size((110, 24)).columns))


def _option_lines(option: str, text: str, column: int = 42) -> list[str]:
    """``  OPTION  text`` with the text wrapped in a column; a long option gets a line of its own."""
    width = _width()
    first = f"  {option}"
    if len(first) > width:  # a long default: wrapped under the option name
        wrapped = textwrap.wrap(option, width - 2, subsequent_indent="    ", break_on_hyphens=False)
        head, first = wrapped[:-1], f"  {wrapped[-1]}"
    else:
        head = []
    body = textwrap.wrap(text, max(30, width - column)) or [""]
    if len(first) >= column:
        return [f"  {h}" for h in head] + [first] + [" " * column + line for line in body if line]
    lines = [f"{first:<{column}}{body[0]}"] + [" " * column + line for line in body[1:]]
    return [f"  {h}" for h in head] + [line.rstrip() for line in lines]


def short_help(
    subcommand: str,
    tables: Mapping[str, Mapping[str, Sequence[Option]]],
    class_names: Mapping[str, str],
    linked: Sequence[str] = (),
    values: Mapping[str, Mapping[str, Any]] | None = None,
    other_groups: Sequence[tuple[str, str]] = _OTHER_GROUPS,
) -> str:
    """The short ``pal-lightning <subcommand> --help``: the library's options first, then where the rest is.

    Args:
        tables: ``{"model": tables, "data": tables}`` of :func:`pal_lightning.cli.options.tables_of`.
        class_names: the model and data class names shown in the headings.
        linked: data options set through the model (not listed under data).
        values: the options' values in the ``--config`` files given with ``--help`` (``{"model": {...}}``),
            shown instead of the defaults.
        other_groups: ``(option, text)`` of the command's other options (checkpoints, predictions).
    """
    example = "pretrain_mlm" if subcommand == "pretrain" else "quickstart"
    lines = [
        f"usage: pal-lightning {subcommand} [--config FILE] [--model.NAME VALUE] [--data.NAME VALUE] "
        "[--trainer.NAME VALUE] ...",
        "",
        PRETRAIN_HELP if subcommand == "pretrain" else SUBCOMMAND_HELP.get(subcommand, ""),
        "",
        f"  --config FILE            a YAML config (e.g. configs/{example}.yaml); repeat to layer several",
        "  --print_config           print the resolved configuration and exit",
    ]
    for group in ("model", "data"):
        name = class_names[group]
        given = (values or {}).get(group)
        where = "values of the --config files" if given is not None else "defaults"
        lines += ["", f"{group} options ({name}, {where}; all of them: --{group}.help {name}):"]
        for option in tables[group][""]:
            if group == "data" and option.name in linked:
                continue  # set on the model, copied to the data module
            value = show_value(given[option.name]) if given and option.name in given else option.default
            lines += _option_lines(f"--{group}.{option.name} {value}", first_sentence(option.doc))
    lines += ["", "checkpoints and predictions:" if other_groups is _OTHER_GROUPS else "checkpoints:"]
    lines += [f"  {option:<40} {text}" for option, text in other_groups]
    if subcommand == "predict":
        lines += [
            "",
            "new sentences (no config needed): pal-lightning predict --predict.model DIR --predict.task sst "
            "--predict.input FILE",
            "  (--predict.input with --help lists those options)",
        ]
    lines += [
        "",
        "trainer options used most (every Lightning Trainer argument is accepted as --trainer.NAME):",
    ]
    lines += [f"  --trainer.{name:<30} {text}" for name, text in COMMON_TRAINER_OPTIONS]
    lines += [
        "",
        f"All options (LightningCLI's full list): pal-lightning {subcommand} {HELP_ALL}",
        f"Every option of the model or the data, documented: pal-lightning {subcommand} --model.help, "
        "--data.help (of a subclass: --model.help my_pkg.MyModule)",
    ]
    return "\n".join(lines)


def class_help(
    group: str,
    tables: Mapping[str, Sequence[Option]],
    class_name: str,
    nested: str = "",
    tasks: Sequence[str] = (),
    linked: Mapping[str, str] | None = None,
) -> str:
    """``--model.help`` (``nested=""``) or ``--model.adapter.help`` (``nested="adapter"``): every option of
    the class (or of the nested option) with its type, default and whole documentation.

    Args:
        tasks: the registered task names (listed by ``--model.tasks.help``).
        linked: options that the CLI sets from another one (``{"tokenizer": "--model.encoder"}``).

    Raises:
        ValueError: for a nested option that has no options of its own.
    """
    width = _width()
    if nested:
        if nested not in tables:
            known = ", ".join(f"--{group}.{n}.help" for n in tables if n) or "none"
            raise ValueError(
                f"The option --{group}.{nested} has no options of its own (those that have: {known})"
            )
        title = f"The options of --{group}.{nested} ({class_name}):"
        options = list(tables[nested])
    else:
        title = f"The options of --{group} ({class_name}), set as --{group}.NAME VALUE on the command line:"
        options = []
        for top in tables[""]:  # the fields of a nested option right after it
            fields = list(tables.get(top.name, []))
            if fields and not fields[0].name.startswith(f"{top.name}."):  # a list of mappings: see its help
                top = replace(top, doc=f"{top.doc} The keys of each item: --{group}.{top.name}.help".strip())
                fields = []
            if linked and top.name in linked:
                top = replace(top, doc=f"Set through {linked[top.name]} (the CLI copies it). {top.doc}")
            options += [top, *fields]
    lines = [title, ""]
    listed = bool(options) and nested and not options[0].name.startswith(f"{nested}.")
    if listed:  # the keys of each item of a list (a task of your own: docs/data.md)
        lines[0] = f"Each item of --{group}.{nested} ({class_name}) is a mapping of these keys:"
    if nested == "tasks":
        names = ", ".join(tasks)
        lines += textwrap.wrap(f"An item may also be the name of a registered task: {names}.", width) + [""]
    for option in options:
        head = (
            f"  {option.name}: {option.default}" if listed else f"  --{group}.{option.name} {option.default}"
        )
        lines.append(head + (f"   ({option.type})" if option.type else ""))
        lines += textwrap.wrap(option.doc, width, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def top_level_help() -> str:
    """``pal-lightning --help``: the commands, in whole sentences."""
    commands = {
        **SUBCOMMAND_HELP,
        "pretrain": PRETRAIN_HELP,
    }
    lines = [
        "usage: pal-lightning [--help] [--version] {" + ",".join(commands) + "} ...",
        "",
        "Multi-task fine-tuning of BERT encoders with Projected Attention Layers, on PyTorch Lightning.",
        "",
        "commands:",
        *(f"  {name:<10} {text}" for name, text in commands.items()),
        "",
        "  pal-lightning COMMAND --help   the options of a command (--help-all: Lightning's too)",
        "  pal-lightning --version        the version",
        "",
        "example: pal-lightning fit --config configs/quickstart.yaml",
        "predict your own sentences: pal-lightning predict --predict.model DIR --predict.task sst "
        "--predict.input FILE",
    ]
    return "\n".join(lines)


#: ``--model.help [CLASS]``, ``--data.adapter.help``: the group, the nested option and the flag itself.
_CLASS_HELP = re.compile(r"^--(model|data)\.(?:(\w+)\.)?help(?:=(.*))?$")


def help_target(argv: Sequence[str]) -> tuple[str, str, str | None] | None:
    """``(group, nested option, class)`` when ``argv`` asks for ``--model.help [CLASS]`` (or ``--data.``,
    or a nested option's ``--model.adapter.help``), else ``None``."""
    for i, arg in enumerate(argv):
        match = _CLASS_HELP.match(arg)
        if match:
            group, nested, value = match.group(1), match.group(2) or "", match.group(3)
            if value is None and not nested and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value = argv[i + 1]
            return group, nested, value or None
    return None


def help_request(argv: Sequence[str], subcommands: Sequence[str]) -> str | None:
    """The subcommand whose short help ``argv`` asks for (``fit --help``), else ``None``."""
    if not argv or argv[0] not in subcommands:
        return None
    return argv[0] if any(a in ("-h", "--help") for a in argv[1:]) else None


def initials(name: str) -> str:
    """``learning_rate`` -> ``lr``."""
    return "".join(word[0] for word in name.split("_") if word)


def suggest(unknown: str, accepted: Sequence[str], n: int = 2) -> list[str]:
    """Accepted option names close to ``unknown``: same word initials, then string similarity."""
    by_initials = [a for a in accepted if a == initials(unknown) or initials(a) == unknown]
    close = difflib.get_close_matches(unknown, accepted, n=n, cutoff=0.6)
    return list(dict.fromkeys(by_initials + close))[:n]


#: jsonargparse's messages for an unknown option: "Option 'x' is not accepted" under a group, or
#: "unrecognized arguments: --group.x ...".
_NOT_ACCEPTED = re.compile(r"Parser key \"(\w+)\".*?Option '(\w+)' is not accepted")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: --([\w.]+)", re.IGNORECASE)


def did_you_mean(message: str, options_of: Any) -> str:
    """`` Did you mean --model.lr?`` for an unknown-option ``message``, or ``""``.

    ``options_of(group)`` returns the accepted names of a group (``model``, ``data``, ``trainer``,
    ...), or ``None`` for an unknown group.
    """
    match = _NOT_ACCEPTED.search(message)
    if match:
        group, name = match.group(1), match.group(2)
    else:
        match = _UNRECOGNIZED.search(message)
        if not match:
            return ""
        parts = match.group(1).split(".")
        if len(parts) < 2:
            return ""
        group, name = parts[0], parts[-1]
    accepted = options_of(group)
    if not accepted:
        return ""
    found = suggest(name, list(accepted))
    if not found:
        return ""
    return " Did you mean " + " or ".join(f"--{group}.{f}" for f in found) + "?"


def config_syntax_error(argv: Sequence[str]) -> str | None:
    """For a YAML syntax error in a ``--config`` file, a message naming the file, line and column.

    jsonargparse reports such errors against ``"<unicode string>"``; this re-reads each ``--config``
    file of ``argv`` and describes the first one that does not parse, or returns ``None``.
    """
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
