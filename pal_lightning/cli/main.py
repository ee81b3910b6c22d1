"""``pal-lightning``: the command dispatcher; user mistakes end with one line on stderr and exit status 2."""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from argparse import ArgumentError  # jsonargparse's ArgumentError is argparse's
from functools import partial
from typing import Any

from pal_lightning.cli.help import config_syntax_error, did_you_mean, top_level_help
from pal_lightning.cli.text_predict import run as run_text_predict
from pal_lightning.cli.text_predict import wants_text_predict
from pal_lightning.core.errors import PalUserError
from pal_lightning.serving.command import run as run_serve  # stdlib only until it runs

# torch, Lightning and jsonargparse are imported where a command needs them: --version starts at once

USER_ERROR_EXIT = 2

# jsonargparse's lines around a rejected value that do not say what is wrong
_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Expected a <class 'NoneType'>",
    "Given value type:",
    "Given value:",
)


#: jsonargparse's list bullet: a dash followed by a space, after the indentation
_BULLET = re.compile(r"^\s*(?:-\s+)*")


def _one_line(message: str) -> str:
    """The error message on one line, without jsonargparse's nesting (its ``- `` bullets, and its ``None``
    alternative); an option's own dashes (``--config``) stay."""
    lines = [_BULLET.sub("", line).rstrip() for line in str(message).splitlines() if line.strip(" -")]
    kept = [line for line in lines if not line.startswith(_NOISE)]
    return (
        " ".join(line if line.endswith(":") else line + ";" for line in kept or lines).rstrip(";")
        or "unknown error"
    )


_FS_FAULTS = {
    errno.ENOSPC: "free some disk space",
    getattr(errno, "EDQUOT", errno.ENOSPC): "free some of your disk quota",
    errno.EROFS: "pick a writable folder (e.g. --trainer.default_root_dir)",
    errno.EACCES: "check the folder's permissions or pick another one",
    errno.EPERM: "check the folder's permissions or pick another one",
}


def _fs_fault_message(err: OSError) -> str:
    where = f"{err.filename}: " if err.filename else ""
    return (
        f"{where}{err.strerror or err}. pal-lightning replaces files atomically, so earlier versions are "
        f"unchanged; {_FS_FAULTS[err.errno]}, then run the command again (a fit resumes with --ckpt_path last)."
    )


def _user_error(exc: BaseException) -> BaseException | None:
    """The user error (or file-system fault) behind ``exc``, its causes followed."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, (PalUserError, ArgumentError)) or _is_misconfiguration(current):
            return current
        if isinstance(current, OSError) and current.errno in _FS_FAULTS:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _discard_new_folders() -> None:
    if "pal_lightning.cli.fit" in sys.modules:  # else nothing was created
        from pal_lightning.cli.run_folders import discard_new_folders
        from pal_lightning.core.distributed import is_launched_rank

        if not is_launched_rank():
            discard_new_folders()


def _interrupted() -> int:  # Ctrl-C outside a training step (a step's first Ctrl-C is StopOnSignal's)
    _discard_new_folders()
    print(
        "pal-lightning: interrupted (Ctrl-C); no checkpoint was written at this point "
        "(a fit resumes from its last last.ckpt with --ckpt_path last).",
        file=sys.stderr,
        flush=True,
    )
    return 128 + signal.SIGINT


def main(args: list[str] | None = None) -> int:
    """Run the ``pal-lightning`` command line and return its exit status (2 for a user mistake, said in one line)."""
    try:
        argv = list(sys.argv[1:] if args is None else args)
        if wants_text_predict(argv):  # predict --predict.input FILE: the user's own sentences
            return run_text_predict(argv)
        if argv[:1] in (["--version"], ["-V"]):
            from pal_lightning.core.version import __version__

            print(f"pal-lightning {__version__}", flush=True)
            return 0
        if argv[:1] in (["--help"], ["-h"]):  # LightningCLI's would build every subcommand's parser
            print(top_level_help(), flush=True)
            return 0
        if argv[:1] == ["serve"]:  # the HTTP server (pal_lightning/serving)
            return run_serve(argv[1:])
        if argv[:1] == ["pretrain"]:
            from pal_lightning.cli.pretrain import run_pretrain

            run_pretrain(argv[1:])
        else:
            from pal_lightning.cli.fit import PalLightningCLI

            PalLightningCLI(args=args)
    except KeyboardInterrupt:  # Ctrl-C outside Lightning's Trainer (parsing, building the model)
        return _interrupted()
    except BrokenPipeError:  # `pal-lightning fit --help | head`: the reader left, which is no error of ours
        return _reader_left()
    except SystemExit as exc:  # --help / --print_config exit early on purpose
        if isinstance(exc.__context__, KeyboardInterrupt):  # Lightning's sys.exit(1) after a Ctrl-C
            return _interrupted()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        _discard_new_folders()
        found = _user_error(exc)
        if found is None:
            raise
        message = _fs_fault_message(found) if isinstance(found, OSError) else _one_line(str(found))
        # jsonargparse names "<unicode string>", not the file
        if "Problems parsing config" in message and (syntax := config_syntax_error(argv)) is not None:
            print(f"pal-lightning: error: {syntax}", file=sys.stderr, flush=True)
            return USER_ERROR_EXIT
        if isinstance(found, ArgumentError) and "--help" not in message:
            command = next((a for a in argv if not a.startswith("-")), "")
            message += (
                "."
                + did_you_mean(message, partial(_accepted_options, command=command))  # " Did you mean ...?"
                + f" Run `pal-lightning {command or 'fit'} --help` for the accepted options"
                " (--print_config shows the resolved configuration)"
            )
        message += _predict_splits_hint(argv, message)
        if _is_misconfiguration(found):
            message += " (a Trainer setting this machine cannot honour: check trainer.accelerator, devices, strategy, precision)"
        print(f"pal-lightning: error: {message}", file=sys.stderr, flush=True)
        return USER_ERROR_EXIT
    if "pal_lightning.cli.fit" in sys.modules:
        from pal_lightning.cli.run_folders import _NEW_FOLDERS
        from pal_lightning.core.distributed import close_process_group

        _NEW_FOLDERS.clear()  # the run succeeded: its folders are results
        close_process_group()
    return 0


def _reader_left() -> int:
    # the interpreter flushes stdout again at exit: point it at devnull so that flush cannot fail too
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (captured): nothing left to flush
        pass
    return 128 + getattr(signal, "SIGPIPE", 13)  # what a shell reports when the pipe's reader closed


def _is_misconfiguration(found: BaseException) -> bool:
    # only Lightning raises it: not imported to ask
    module = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return isinstance(found, getattr(module, "MisconfigurationException", ()))


def _predict_splits_hint(argv: list[str], message: str) -> str:
    """For ``predict`` without a split's files: the option that leaves that split out."""
    if argv[:1] != ["predict"] or not message.startswith("Data files not found"):
        return ""
    missing = {split for split in ("train", "dev", "test") if f"/{split}: " in message}
    served = [split for split in ("dev", "test") if split not in missing]
    if not missing or not served:
        return ""
    return f' To predict only the {served[0]} split: --data.predict_splits "[{served[0]}]".'


# data-module arguments set through the model (the CLI's links)
_LINKED = ("tokenizer", "tasks", "pair_encoding")


def _accepted_options(group: str, command: str = "fit") -> list[str] | None:
    import inspect

    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    from pal_lightning.callbacks.prediction_writer import PredictionWriter
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.module.multitask import MultiTaskModule

    classes: dict[str, type[Any]] = dict(model=MultiTaskModule, data=MultiTaskDataModule, trainer=Trainer)
    if command == "pretrain":  # its model is not MultiTaskModule (no suggestion, no "moved into optim")
        del classes["model"]
    classes.update(checkpoint=ModelCheckpoint, last_checkpoint=ModelCheckpoint, predictions=PredictionWriter)
    if (cls := classes.get(group)) is None:
        return None
    parameters = inspect.signature(cls.__init__).parameters.values()
    names = [p.name for p in parameters if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    if group == "model":  # the options of a group: optim.lr
        from pal_lightning.module.optim_config import OPTIM_FIELDS

        names += [f"optim.{name}" for name in OPTIM_FIELDS]
    return [n for n in names if n not in _LINKED] if group == "data" else names


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
