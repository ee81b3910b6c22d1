"""The option tables behind the help screens, in plain text, read without importing torch or Lightning.

``pal-lightning fit --help``, ``--model.help`` and ``--data.help`` describe the options of the model and
data classes: each option's name, type, default and documentation (:class:`Option`), read from the
class's signature and docstrings (:func:`class_table`), with Sphinx markup turned into plain text
(:func:`plain`), and the fields of a dataclass-typed option (``adapter``, ``simcse``, the ``TaskSpec``
of ``tasks``) as options of their own (``--model.adapter.method``).

Reading them from the classes means importing them, and so torch, transformers and Lightning:
seconds. :func:`default_tables` reads the tables of the CLI's own classes from the package's source
instead (:mod:`pal_lightning.cli.source_tables`), and
:func:`config_values` the values of the ``--config`` files given with ``fit --help`` from the files
themselves, so that every help screen starts in a fraction of a second, the first one included.
"""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pal_lightning.core.config_fields import class_field_docs, field_docs

#: The classes ``--model`` and ``--data`` take by default.
DEFAULT_CLASSES = {
    "model": "pal_lightning.module.multitask.MultiTaskModule",
    "data": "pal_lightning.data.datamodule.MultiTaskDataModule",
}
#: The classes of ``pal-lightning pretrain``.
PRETRAIN_CLASSES = {
    "model": "pal_lightning.pretraining.MLMPretrainModule",
    "data": "pal_lightning.pretraining.MLMDataModule",
}


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
    if isinstance(value, Shown):
        return str(value)
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
    return docstring_args(doc)


def docstring_args(doc: str) -> dict[str, str]:
    """``{argument: description}`` from the Google-style ``Args:`` section of a docstring."""
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


def source_tables() -> dict[str, Any]:
    """:func:`live_tables` read from the source (:mod:`pal_lightning.cli.source_tables`): no torch, no Lightning.

    Raises:
        Unsupported: where the source holds a construct the reader does not follow.
    """
    from pal_lightning.tasks.specs import available_tasks  # light: the task registry alone

    tables = {group: source_class_table(path) for group, path in DEFAULT_CLASSES.items()}
    as_json = {
        group: {key: [dataclasses.asdict(o) for o in options] for key, options in table.items()}
        for group, table in tables.items()
    }
    return {"tables": as_json, "tasks": available_tasks()}


def source_class_table(class_path: str) -> dict[str, list[Option]]:
    """:func:`class_table` of a class of the package, read from its source.

    Raises:
        Unsupported: for a class outside the package, or a construct the reader does not follow.
    """
    from pal_lightning.cli import source_tables as src

    module, _, name = class_path.rpartition(".")
    where, node = src.definition(module, name) or (module, None)
    if not isinstance(node, ast.ClassDef):
        raise src.Unsupported(f"no class {class_path} in the source")
    params, docs = _source_init(where, node)
    tables: dict[str, list[Option]] = {"": []}
    for param in params:
        hint = src.annotation(param.module, param.annotation) if param.annotation is not None else None
        default = "(required)" if param.default is src.MISSING else show_value(param.default)
        text = type_text(src.type_value(param.module, hint)) if hint is not None else ""
        tables[""].append(Option(param.name, default, text, plain(docs.get(param.name, ""))))
        nested = src.nested_dataclass(param.module, hint) if hint is not None else None
        if nested is not None and hint is not None:
            prefix = "" if src.takes_a_list(hint) else f"{param.name}."
            tables[param.name] = _source_field_table(*nested, prefix=prefix)
    return tables


def _source_init(module: str, node: ast.ClassDef) -> tuple[list[Any], dict[str, str]]:
    """The ``__init__`` arguments of a class node and their documentation (``@takes_fields(X)``: X's fields)."""
    from pal_lightning.cli import source_tables as src

    doc = src.class_docs(node)
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and src.decorator_name(decorator) == "takes_fields":
            options = src.evaluate(module, decorator.args[0])
            if not isinstance(options, src.ClassValue) or not src.is_dataclass(options.node):
                raise src.Unsupported(f"takes_fields of {node.name}")
            section = "\n".join(
                f"    {n}: " + "\n        ".join(d.splitlines())
                for n, d in class_field_docs(options.node).items()
            )
            return src.dataclass_fields(options.module, options.node), docstring_args(
                f"{doc}\n\nArgs:\n{section}\n"
            )
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        raise src.Unsupported(f"{node.name} inherits its __init__")
    if "Args:" not in doc:
        doc = ast.get_docstring(init, clean=True) or ""
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [
        src.Field(a.arg, module, a.annotation, src.MISSING if d is None else src.evaluate(module, d))
        for a, d in [
            *zip(positional, defaults, strict=True),
            *zip(args.kwonlyargs, args.kw_defaults, strict=True),
        ]
        if a.arg != "self"
    ]
    return params, docstring_args(doc)


def _source_field_table(module: str, node: ast.ClassDef, prefix: str = "") -> list[Option]:
    """:func:`field_table` of a dataclass of the package, read from its source."""
    from pal_lightning.cli import source_tables as src

    doc = src.class_docs(node)
    docs = {**(docstring_args(doc) if "Args:" in doc else {}), **class_field_docs(node)}
    out = []
    for f in src.dataclass_fields(module, node):
        default = "(required)" if f.default is src.MISSING else show_value(f.default)
        hint = (
            type_text(src.type_value(f.module, src.annotation(f.module, f.annotation)))
            if f.annotation
            else ""
        )
        out.append(Option(prefix + f.name, default, hint, plain(docs.get(f.name, ""))))
    return out


def default_tables() -> dict[str, Any]:
    """The tables of the CLI's own classes: :func:`source_tables`, else (a construct of the source the reader
    does not follow) :func:`live_tables`, which imports the classes."""
    from pal_lightning.cli.source_tables import Unsupported

    try:
        return source_tables()
    except Unsupported:
        return live_tables()


def tables_of(group: str, class_path: str | None = None) -> dict[str, list[Option]]:
    """The option tables of ``group`` (``model``/``data``): of ``class_path`` when it names another class
    than the default, else the tables of the default class."""
    default = DEFAULT_CLASSES[group]
    if class_path and class_path not in (default, default.rsplit(".", 1)[-1], _short_path(default)):
        if class_path.startswith("pal_lightning."):  # another class of the package: read from its source
            from pal_lightning.cli.source_tables import Unsupported

            try:
                return source_class_table(class_path)
            except Unsupported:
                pass
        return class_table(import_class(class_path))
    raw = default_tables()["tables"][group]
    return {key: [Option(**o) for o in options] for key, options in raw.items()}


def _short_path(path: str) -> str:
    """``pal_lightning.MultiTaskModule``: the package-root name a config usually writes."""
    return "pal_lightning." + path.rsplit(".", 1)[-1]


class Shown(str):
    """A value already written as the help shows it (:func:`show_value` returns it as it is)."""


class _NeedsParser(Exception):
    """The arguments hold something only the CLI's own parser resolves (another class, a value it converts)."""


#: ``--model.lr 1e-3``, ``--data.init_args.batch_size=8``, ``--model.adapter.size 8``.
_GROUP_OPTION = re.compile(r"^--(model|data)\.([\w.]+?)(?:=(.*))?$", re.DOTALL)


def config_values(
    args: list[str],
    tables: Mapping[str, Mapping[str, list[Option]]],
    classes: Mapping[str, str] = DEFAULT_CLASSES,
) -> dict[str, dict[str, Any]] | None:
    """The model and data options that the ``--config`` files and ``--model.``/``--data.`` options of ``args``
    set, read with a YAML loader (no torch, no Lightning): ``{"model": {"lr": 0.0001, ...}, "data": {...}}``,
    a nested option's fields filled with their defaults as the CLI fills them. ``None`` where only the CLI's
    parser can tell (another model or data class, a file that does not load, a value it converts).

    Args:
        args: what follows the subcommand (``--help`` left out).
        tables: the option tables of the default classes (:func:`tables_of`).
        classes: the command's model and data classes (``pretrain``: :data:`PRETRAIN_CLASSES`).
    """
    values: dict[str, dict[str, Any]] = {"model": {}, "data": {}}
    try:
        i = 0
        while i < len(args):
            arg = args[i]
            inline = arg.split("=", 1)[1] if "=" in arg else None
            name = arg.split("=", 1)[0]
            takes_value = inline is None and i + 1 < len(args) and not args[i + 1].startswith("--")
            value = inline if inline is not None else args[i + 1] if takes_value else None
            i += 2 if takes_value else 1
            if name in ("--config", "-c"):
                _load_config(Path(str(value)), values, classes)
            elif name in ("--model", "--data"):
                raise _NeedsParser(name)
            elif _GROUP_OPTION.match(name) and value is not None:
                group, key = name[2:].split(".", 1)
                _assign(values, [group, *key.split(".")], _yaml_value(value), classes)
            elif _GROUP_OPTION.match(name):
                raise _NeedsParser(name)  # an option without a value: the parser's error
        return {group: _filled(group, given, tables[group]) for group, given in values.items()}
    except _NeedsParser:
        return None


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise _NeedsParser(text) from None


def _load_config(path: Path, values: dict[str, dict[str, Any]], classes: Mapping[str, str]) -> None:
    """Apply one config file (and the ``config:`` it names first, relative to it) to ``values``."""
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        raise _NeedsParser(str(path)) from None
    if not isinstance(loaded, dict):
        raise _NeedsParser(str(path))
    for n, (key, value) in enumerate(loaded.items()):
        if key == "config":
            if n != 0:  # the parser applies it where it stands: leave the order to it
                raise _NeedsParser(key)
            for inner in value if isinstance(value, list) else [value]:
                _load_config(path.parent / str(inner), values, classes)
        else:
            _assign(values, str(key).split("."), value, classes)


def _assign(
    values: dict[str, dict[str, Any]], path: list[str], value: Any, classes: Mapping[str, str]
) -> None:
    """Set ``model.init_args.lr`` (or ``model.lr``, or the whole ``model:`` mapping) in ``values``."""
    group, rest = path[0], path[1:]
    if group not in values:
        return  # trainer, seed_everything, checkpoint ...: not shown by the short help
    if rest[:1] == ["init_args"]:
        rest = rest[1:]
    if not rest:  # model: {class_path: ..., init_args: {...}}
        if not isinstance(value, dict) or not set(value) <= {"class_path", "init_args"}:
            raise _NeedsParser(group)
        if "class_path" in value:
            _assign(values, [group, "class_path"], value["class_path"], classes)
        init_args = value.get("init_args") or {}
        if not isinstance(init_args, dict):
            raise _NeedsParser(group)
        for key, item in init_args.items():
            _assign(values, [group, *str(key).split(".")], item, classes)
        return
    if rest[0] == "class_path":
        default = classes[group]
        if value not in (default, default.rsplit(".", 1)[-1], _short_path(default)):
            raise _NeedsParser(str(value))
        return
    target = values[group]
    for part in rest[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise _NeedsParser(".".join(path))
    old = target.get(rest[-1])
    target[rest[-1]] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value


def _filled(group: str, given: Mapping[str, Any], tables: Mapping[str, list[Option]]) -> dict[str, Any]:
    """``given`` as the parser resolves it: floats of float options, a nested option's missing fields
    at their defaults (a mapping, or each mapping of a list)."""
    out: dict[str, Any] = {}
    options = {o.name: o for o in tables[""]}
    for name, value in given.items():
        option = options.get(name)
        if option is None:
            raise _NeedsParser(f"{group}.{name}")  # an unknown option: the parser's error
        fields = tables.get(name)
        value = _as_typed(option.type, value)
        if fields and isinstance(value, dict):
            value = _with_defaults(value, fields, f"{name}.")
        elif fields and isinstance(value, list) and not fields[0].name.startswith(f"{name}."):
            value = [_with_defaults(v, fields, "") if isinstance(v, dict) else v for v in value]
        out[name] = value
    return out


def _with_defaults(value: Mapping[str, Any], fields: list[Option], prefix: str) -> dict[str, Any]:
    names = [f.name[len(prefix) :] for f in fields]
    if not set(value) <= set(names):
        raise _NeedsParser(f"{prefix}{sorted(set(value) - set(names))}")
    return {
        n: _as_typed(f.type, value[n]) if n in value else Shown(f.default)
        for n, f in zip(names, fields, strict=True)
    }


def _as_typed(type_text: str, value: Any) -> Any:
    """A float option's value as a float (YAML reads ``1e-4`` as a string, ``2`` as an int), as the parser
    converts it; ``tuple[float, float]`` item by item."""
    base = type_text.split(" | ")[0]
    try:
        if base == "float" and isinstance(value, (int, str)) and not isinstance(value, bool):
            return float(value)
        if base.startswith(("tuple[float", "list[float")) and isinstance(value, list):
            return [float(v) for v in value]
    except (TypeError, ValueError):
        raise _NeedsParser(type_text) from None
    return value
