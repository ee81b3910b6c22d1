"""Help for people: a short ``--help``, whole-sentence subcommand descriptions, "did you mean".

* ``pal-lightning fit --help`` prints the library's own options (model, data, checkpoints,
  predictions) with their defaults and the first sentence of their documentation, then the
  Trainer options users change most, then where the rest is: ``--help-all`` (LightningCLI's full
  list of some 850 lines), ``--model.help CLASS`` and ``--data.help CLASS``.
* ``pal-lightning --help`` lists the subcommands with whole sentences (:data:`SUBCOMMAND_HELP`);
  Lightning's own are the first lines of ``Trainer.fit`` & co., cut mid-sentence.
* An unknown option gets the closest accepted names (:func:`suggest`): ``--model.learning_rate``
  -> ``--model.lr`` (the initials of its words), ``--trainer.max_stesp`` -> ``--trainer.max_steps``.

:func:`set_subcommand_help` writes the help strings of jsonargparse's subcommand actions, which
only a private name reaches (:func:`pal_lightning.core.private_api.subcommand_help_actions`).
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence
from typing import Any

from pal_lightning.core.private_api import subcommand_help_actions

#: One whole sentence per subcommand, for ``pal-lightning --help``.
SUBCOMMAND_HELP = {
    "fit": "Train a model on its tasks, validate it, and save checkpoints and the CS224N scores.",
    "validate": "Score a checkpoint on the dev sets and print the CS224N table.",
    "test": "Score a checkpoint on the labelled test sets.",
    "predict": "Write CS224N prediction files (<task>-<split>-output.csv) of a checkpoint.",
}
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
    for choice in subcommand_help_actions(parser):
        if choice.dest in SUBCOMMAND_HELP:
            choice.help = SUBCOMMAND_HELP[choice.dest]


def doc_args(cls: type) -> dict[str, str]:
    """``{argument: description}`` from the Google-style ``Args:`` section of a class (or its ``__init__``)."""
    doc = inspect.getdoc(cls) or ""
    if "Args:" not in doc:
        # mypy refuses `__init__` on a class-typed value (calling it is unsound); here it is only read
        doc = inspect.getdoc(cls.__init__) or ""  # type: ignore[misc]
    out: dict[str, str] = {}
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    current = None
    for line in section.splitlines():
        if line.strip() and not line.startswith(" "):
            break  # the next section (Returns:, Example:, ...)
        match = re.match(r"^ {4}(\w+)(?: \([^)]*\))?:\s*(.*)$", line)
        if match:
            current = match.group(1)
            out[current] = match.group(2).strip()
        elif current and line.strip():
            out[current] += " " + line.strip()
    return out


def first_sentence(text: str, width: int = 72) -> str:
    """The first sentence of ``text`` (``.`` followed by a space), cut at ``width`` characters."""
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r":\w+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = text.replace("e.g. ", "e.g.\x00").replace("i.e. ", "i.e.\x00")  # not sentence ends
    sentence = re.split(r"(?<=[.;])\s", text, maxsplit=1)[0].rstrip(".;").replace("\x00", " ")
    return sentence if len(sentence) <= width else sentence[: width - 3].rstrip() + "..."


def class_options(cls: type) -> list[tuple[str, Any, str]]:
    """``(name, default, first sentence)`` of every ``__init__`` argument of ``cls``."""
    docs = doc_args(cls)
    out = []
    # only __init__'s signature is read (mypy refuses `__init__` on a class-typed value)
    for name, param in inspect.signature(cls.__init__).parameters.items():  # type: ignore[misc]
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = None if param.default is inspect.Parameter.empty else param.default
        out.append((name, default, first_sentence(docs.get(name, ""))))
    return out


def _format_default(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 28 else text[:25] + "..."


def short_help(subcommand: str, model_class: type, data_class: type, linked: Sequence[str] = ()) -> str:
    """The short ``pal-lightning <subcommand> --help``: the library's options first, then where the rest is."""
    lines = [
        f"usage: pal-lightning {subcommand} [--config FILE] [--model.NAME VALUE] [--data.NAME VALUE] "
        "[--trainer.NAME VALUE] ...",
        "",
        SUBCOMMAND_HELP.get(subcommand, ""),
        "",
        "  --config FILE            a YAML config (e.g. configs/quickstart.yaml); repeat to layer several",
        "  --print_config           print the resolved configuration and exit",
    ]
    for title, prefix, cls in (("model", "--model.", model_class), ("data", "--data.", data_class)):
        lines += ["", f"{title} options ({cls.__name__}; all of them: --{title}.help {cls.__name__}):"]
        for name, default, text in class_options(cls):
            if prefix == "--data." and name in linked:
                continue  # set on the model, copied to the data module
            option = f"{prefix}{name} {_format_default(default)}"
            lines.append(f"  {option:<40} {text}" if len(option) < 40 else f"  {option}\n  {'':<40} {text}")
    lines += ["", "checkpoints and predictions:"]
    lines += [f"  {option:<40} {text}" for option, text in _OTHER_GROUPS]
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
        "Options of a model or data subclass: --model.help my_pkg.MyModule, --data.help my_pkg.MyData",
    ]
    return "\n".join(lines)


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
