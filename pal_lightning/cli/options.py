"""The option tables behind the help screens, in plain text, cached so that help needs no torch.

``pal-lightning fit --help``, ``--model.help`` and ``--data.help`` describe the options of the model and
data classes: each option's name, type, default and documentation (:class:`Option`), read from the
class's signature and docstrings (:func:`class_table`), with Sphinx markup turned into plain text
(:func:`plain`), and the fields of a dataclass-typed option (``adapter``, ``simcse``, the ``TaskSpec``
of ``tasks``) as options of their own (``--model.adapter.method``).

Reading them means importing the classes, and so torch and Lightning: seconds. :func:`default_tables`
keeps the tables of the CLI's own classes in a small JSON file in the cache folder (``$PAL_CACHE_DIR``,
else ``$XDG_CACHE_HOME/pal_lightning``, else ``~/.cache/pal_lightning``), valid while the package's source
files are unchanged (:func:`source_fingerprint`: their sizes and modification times, and the version),
so that every help screen after the first starts in a fraction of a second.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import inspect
import json
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pal_lightning.core.config_fields import field_docs

#: The classes ``--model`` and ``--data`` take by default.
DEFAULT_CLASSES = {
    "model": "pal_lightning.module.multitask.MultiTaskModule",
    "data": "pal_lightning.data.datamodule.MultiTaskDataModule",
}
#: Cache file of :func:`default_tables`, in the cache folder.
CACHE_FILE = "help-options.json"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: ``name`` (``lr``, or ``adapter.method`` for a field of a nested option), the ``default``
    as the help shows it, the ``type`` and the whole documentation ``doc`` in plain text."""

    name: str
    default: str
    type: str
    doc: str


def plain(text: str) -> str:
    """Sphinx/reST markup as plain text: ``x`` -> x, :class:`~a.B` -> B, :mod:`a.b` -> a.b."""
    text = re.sub(r":(?:\w+:)?\w+:`([^`<]*?)\s*<[^`>]*>`", r"\1", text)  # :ref:`title <target>`
    text = re.sub(r":(?:\w+:)?\w+:`~([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = re.sub(r":(?:\w+:)?\w+:`([^`]*)`", r"\1", text)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


def show_value(value: Any) -> str:
    """A value as it is written on the command line or in a YAML config: ``[sst, qqp]``, ``null``, ``true``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {show_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w./:@+-]+", value) else json.dumps(value)
    if hasattr(value, "value") and isinstance(value.value, str):  # an Enum of strings
        return str(value.value)
    return str(value)


def type_text(annotation: Any) -> str:
    """``str | None``, ``Sequence[str | TaskSpec]``: an annotation without its module paths."""
    if annotation is inspect.Parameter.empty:
        return ""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = re.sub(r"(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)
    return text.replace("NoneType", "None")


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


def nested_class(annotation: Any) -> type | None:
    """The dataclass an option takes (``AdapterConfig``, ``SimCSEConfig | None``, ``Sequence[str | TaskSpec]``)."""
    if isinstance(annotation, type):
        return annotation if dataclasses.is_dataclass(annotation) else None
    for argument in typing.get_args(annotation):
        found = nested_class(argument)
        if found is not None:
            return found
    return None


def field_table(cls: type, prefix: str = "") -> list[Option]:
    """The fields of dataclass ``cls`` as options ``<prefix><field>``."""
    docs = {**doc_args(cls), **field_docs(cls)}
    hints = _type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = show_value(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = show_value(f.default_factory())
        else:
            default = "(required)"
        out.append(
            Option(
                prefix + f.name, default, type_text(hints.get(f.name, f.type)), plain(docs.get(f.name, ""))
            )
        )
    return out


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: shown as written
        return {}


def class_table(cls: type) -> dict[str, list[Option]]:
    """The options of ``cls.__init__`` (key ``""``) and the fields of each dataclass-typed one (key: its name)."""
    docs = doc_args(cls)
    # only __init__'s signature is read (mypy refuses `__init__` on a class-typed value)
    init = cls.__init__  # type: ignore[misc]
    hints = _type_hints(init)
    tables: dict[str, list[Option]] = {"": []}
    for name, param in inspect.signature(init).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name, param.annotation)
        default = "(required)" if param.default is inspect.Parameter.empty else show_value(param.default)
        tables[""].append(Option(name, default, type_text(annotation), plain(docs.get(name, ""))))
        nested = nested_class(annotation)
        if nested is not None:  # a list of them (tasks): their fields are the keys of each item
            tables[name] = field_table(nested, prefix="" if takes_a_list(annotation) else f"{name}.")
    return tables


def takes_a_list(annotation: Any) -> bool:
    """Whether an option takes a list (``Sequence[str | TaskSpec]``, ``list[...] | None``)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, collections.abc.Sequence):
        return True
    return any(takes_a_list(a) for a in typing.get_args(annotation)) if origin is not None else False


def import_class(path: str) -> type:
    """The class named by ``path`` (``my_pkg.MyModule``)."""
    import importlib

    from pal_lightning.core.errors import PalUserError

    module, _, name = path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module or "pal_lightning"), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise PalUserError(
            f"Cannot import the class {path!r} ({err}). Give its full import path, e.g. my_pkg.MyModule."
        ) from None
    if not isinstance(found, type):
        raise PalUserError(f"{path!r} is not a class. Give the import path of a class, e.g. my_pkg.MyModule.")
    return found


def live_tables() -> dict[str, Any]:
    """The tables of the CLI's own classes, read from the classes, and the registered task names."""
    from pal_lightning.tasks.specs import available_tasks

    tables = {group: class_table(import_class(path)) for group, path in DEFAULT_CLASSES.items()}
    as_json = {
        group: {key: [dataclasses.asdict(o) for o in options] for key, options in table.items()}
        for group, table in tables.items()
    }
    return {"tables": as_json, "tasks": available_tasks()}


def source_fingerprint() -> str:
    """A hash of the package's version and the size and modification time of each of its source files."""
    from pal_lightning.core.version import __version__

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:32]


def cache_dir() -> Path:
    """``$PAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pal_lightning``, else ``~/.cache/pal_lightning``."""
    if os.environ.get("PAL_CACHE_DIR"):
        return Path(os.environ["PAL_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pal_lightning"


def default_tables() -> dict[str, Any]:
    """:func:`live_tables`, from the cache file while the package's source is unchanged."""
    path = cache_dir() / CACHE_FILE
    fingerprint = source_fingerprint()
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached.get("fingerprint") == fingerprint:
            return dict(cached["help"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no cache yet, or an unreadable one: read the classes
    help_tables = live_tables()
    try:
        from pal_lightning.core.files import atomic_write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"fingerprint": fingerprint, "help": help_tables}))
    except OSError:
        pass  # a read-only home: the next help reads the classes again
    return help_tables


def tables_of(group: str, class_path: str | None = None) -> dict[str, list[Option]]:
    """The option tables of ``group`` (``model``/``data``): of ``class_path`` when it names another class
    than the default, else the (cached) tables of the default class."""
    default = DEFAULT_CLASSES[group]
    if class_path and class_path not in (default, default.rsplit(".", 1)[-1], _short_path(default)):
        return class_table(import_class(class_path))
    raw = default_tables()["tables"][group]
    return {key: [Option(**o) for o in options] for key, options in raw.items()}


def _short_path(path: str) -> str:
    """``pal_lightning.MultiTaskModule``: the package-root name a config usually writes."""
    return "pal_lightning." + path.rsplit(".", 1)[-1]
