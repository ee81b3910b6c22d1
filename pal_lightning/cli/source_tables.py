"""The help's option tables read from the package's source with :mod:`ast`, without importing the classes.

Importing :class:`~pal_lightning.module.multitask.MultiTaskModule` or the data module imports torch,
transformers and Lightning: seconds, which a help screen should not cost (not even the first after an
install or an edit of the package). The tables need only what the source says: each ``__init__``
argument's name, annotation, default and documentation, and the fields of the dataclasses they take
(``AdapterConfig``, ``SimCSEConfig``, ``TaskSpec``). The functions here read them from the package's
files for :func:`pal_lightning.cli.options.source_class_table`, following ``from ... import`` to the module that defines a name, evaluating defaults
made of literals, module constants, enum members and dataclass calls, and expanding type aliases
(``Placement`` -> ``Literal['all', 'top', 'bottom']``) as :func:`typing.get_type_hints` would.

It gives what :func:`pal_lightning.cli.options.class_table` gives for the live classes (a test compares
the two on the CLI's classes), or raises :class:`Unsupported` for a construct it does not follow
(a default computed by a function call, a class outside the package), where the caller falls back to
importing the class.
"""

from __future__ import annotations

import ast
import builtins
import functools
from pathlib import Path
from typing import Any

#: The ``pal_lightning`` package folder.
ROOT = Path(__file__).resolve().parents[1]
#: Subscripted types whose options take a list (``takes_a_list``).
_LIST_TYPES = frozenset({"list", "tuple", "Sequence", "List", "Tuple"})
#: The default of a required argument or field.
MISSING = object()


class Unsupported(Exception):
    """A construct of the source that the reader does not follow; the caller imports the class instead."""


@functools.lru_cache(maxsize=64)
def module_tree(module: str) -> ast.Module:
    """The parsed source of a module of the package (``pal_lightning.tasks.specs``)."""
    parts = module.split(".")
    if parts[0] != "pal_lightning":
        raise Unsupported(f"{module} is not part of pal_lightning")
    base = ROOT.joinpath(*parts[1:])
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as err:
        raise Unsupported(f"cannot read {path}: {err}") from None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's top-level statements, with those inside ``if`` blocks (``if TYPE_CHECKING:``)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            out += _statements(node.body) + _statements(node.orelse)
        else:
            out.append(node)
    return out


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name of ``from .x import y`` as written in ``module``."""
    if not node.level:
        return str(node.module)
    package = module.split(".")
    is_package = (ROOT.joinpath(*package[1:]) / "__init__.py").exists()
    base = package[: len(package) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def definition(module: str, name: str) -> tuple[str, ast.AST] | None:
    """``(module, node)`` defining ``name`` as seen from ``module``: a class, or the value of an assignment,
    found through ``from ... import`` within the package; ``None`` for a name defined outside it."""
    for node in reversed(_statements(module_tree(module).body)):  # the last binding wins
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return module, node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return (module, node.value) if node.value is not None else None
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(module, node)
                    if not source.startswith("pal_lightning"):
                        return None
                    return definition(source, alias.name)
    return None


class ClassValue:
    """A class of the package, as a value (``TaskKind`` in ``TaskKind.PAIR``, ``AdapterConfig`` in a call)."""

    def __init__(self, module: str, node: ast.ClassDef) -> None:
        self.module, self.node = module, node


def evaluate(module: str, node: ast.AST | None) -> Any:
    """The value of a default: literals, containers, ``-x``, module constants, enum members, dataclass calls.

    Raises:
        Unsupported: for anything else.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [evaluate(module, e) for e in node.elts]
        return (
            tuple(items)
            if isinstance(node, ast.Tuple)
            else set(items)
            if isinstance(node, ast.Set)
            else items
        )
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {evaluate(module, k): evaluate(module, v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -evaluate(module, node.operand)
    if isinstance(node, ast.Name):
        found = definition(module, node.id)
        if found is None:
            if node.id in ("dict", "list", "tuple", "set", "frozenset"):
                return getattr(builtins, node.id)
            raise Unsupported(f"the name {node.id} in {module}")
        where, value = found
        return ClassValue(where, value) if isinstance(value, ast.ClassDef) else evaluate(where, value)
    if isinstance(node, ast.Attribute):
        return _member(evaluate(module, node.value), node.attr)
    if isinstance(node, ast.Call):
        return _call(module, node)
    raise Unsupported(f"the expression {ast.unparse(node) if node else None} in {module}")


def _member(owner: Any, attr: str) -> Any:
    """An enum member's value (``TaskKind.PAIR_REGRESSION`` -> ``"pair_regression"``, as the help shows it)."""
    if isinstance(owner, ClassValue):
        for node in owner.node.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == attr for t in node.targets
            ):
                return evaluate(owner.module, node.value)
    raise Unsupported(f"the attribute {attr}")


def _call(module: str, node: ast.Call) -> Any:
    """A dataclass built with literal arguments (its fields as a mapping), or an empty builtin container."""
    func = evaluate(module, node.func)
    if func in (dict, list, tuple, set, frozenset) and not node.args and not node.keywords:
        return func()
    if not isinstance(func, ClassValue) or not is_dataclass(func.node):
        raise Unsupported(f"the call {ast.unparse(node)} in {module}")
    values = {f.name: f.default for f in dataclass_fields(func.module, func.node)}
    for name, arg in zip(list(values), node.args, strict=False):
        values[name] = evaluate(module, arg)
    for keyword in node.keywords:
        if keyword.arg is None or keyword.arg not in values:
            raise Unsupported(f"the call {ast.unparse(node)} in {module}")
        values[keyword.arg] = evaluate(module, keyword.value)
    if any(v is MISSING for v in values.values()):
        raise Unsupported(f"the call {ast.unparse(node)} leaves a field without a value")
    return values


def decorator_name(node: ast.expr) -> str:
    """``dataclass`` of ``@dataclass``, ``@dataclass(frozen=True)`` or ``@dataclasses.dataclass``."""
    target = node.func if isinstance(node, ast.Call) else node
    return (
        target.attr
        if isinstance(target, ast.Attribute)
        else target.id
        if isinstance(target, ast.Name)
        else ""
    )


def is_dataclass(node: ast.ClassDef) -> bool:
    """Whether a class is decorated with ``@dataclass`` (with or without arguments)."""
    return any(decorator_name(d) == "dataclass" for d in node.decorator_list)


class Field:
    """One field of a dataclass: name, annotation (node and module), default (``MISSING``: required)."""

    def __init__(self, name: str, module: str, annotation: ast.expr | None, default: Any) -> None:
        self.name, self.module, self.annotation, self.default = name, module, annotation, default


def dataclass_fields(module: str, node: ast.ClassDef) -> list[Field]:
    """The fields of a dataclass in ``dataclasses.fields`` order (those of dataclass bases first)."""
    fields: dict[str, Field] = {}
    for base in node.bases:
        found = definition(module, base.id) if isinstance(base, ast.Name) else None
        if found is not None and isinstance(found[1], ast.ClassDef) and is_dataclass(found[1]):
            fields.update({f.name: f for f in dataclass_fields(*found)})  # type: ignore[arg-type]
    for item in node.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        text = ast.unparse(item.annotation)
        if text.startswith(("ClassVar", "typing.ClassVar", "InitVar", "KW_ONLY", "dataclasses.")):
            if text.startswith(("ClassVar", "typing.ClassVar")):
                continue
            raise Unsupported(f"the field {item.target.id} of {node.name}")
        fields[item.target.id] = Field(
            item.target.id, module, item.annotation, _field_default(module, item.value)
        )
    return list(fields.values())


def _field_default(module: str, value: ast.expr | None) -> Any:
    if value is None:
        return MISSING
    if isinstance(value, ast.Call) and decorator_name(value) == "field":
        options = {k.arg: k.value for k in value.keywords}
        if "default" in options:
            return evaluate(module, options["default"])
        if "default_factory" in options:
            factory = evaluate(module, options["default_factory"])
            if factory in (dict, list, tuple, set, frozenset):
                return factory()
            raise Unsupported(f"the default_factory {ast.unparse(options['default_factory'])}")
        return MISSING
    return evaluate(module, value)


def class_docs(node: ast.ClassDef) -> str:
    """The class's docstring as ``inspect.getdoc`` gives it."""
    return ast.get_docstring(node, clean=True) or ""


class _Aliases(ast.NodeTransformer):
    """Replaces the names of type aliases of the package by what they stand for, as ``get_type_hints`` does."""

    def __init__(self, module: str) -> None:
        self.module = module

    def visit_Name(self, node: ast.Name) -> ast.AST:
        try:
            found = definition(self.module, node.id)
        except Unsupported:
            return node
        if found is None:
            return node
        where, value = found
        if isinstance(value, ast.ClassDef) or not isinstance(value, ast.expr):
            return node
        if isinstance(value, ast.Constant) and not isinstance(value.value, str):
            return node  # a constant, not an alias
        return _Aliases(where).visit(_parsed(value))


def _parsed(node: ast.expr) -> ast.expr:
    """An annotation as an expression (a string annotation parsed), copied so that edits stay local."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ast.parse(node.value, mode="eval").body
    return ast.parse(ast.unparse(node), mode="eval").body


def annotation(module: str, node: ast.expr) -> ast.expr:
    """An annotation with the package's type aliases expanded."""
    expanded: ast.expr = _Aliases(module).visit(_parsed(node))
    return expanded


def type_value(module: str, node: ast.expr) -> Any:
    """An expanded annotation as the typing object ``get_type_hints`` would give (its ``str`` is what the help
    shows: ``Optional[Literal['a', 'b']]`` for ``Literal['a', 'b'] | None``, as typing prints it), with a
    stand-in class for each class of the package; the annotation's text where it does not evaluate."""
    import collections.abc
    import os
    import typing

    names: dict[str, Any] = {"os": os, "typing": typing, "collections": collections}
    names.update({k: getattr(collections.abc, k) for k in collections.abc.__all__})
    names.update({k: getattr(typing, k) for k in typing.__all__ if k not in names})
    for name in (
        {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - names.keys() - vars(builtins).keys()
    ):
        found = definition(module, name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return ast.unparse(node)
        names[name] = type(name, (), {"__module__": found[0], "__qualname__": name})
    try:
        return eval(
            compile(ast.Expression(node), "<annotation>", "eval"), {"__builtins__": builtins, **names}
        )
    except Exception:  # noqa: BLE001 - an annotation that does not evaluate: shown as written
        return ast.unparse(node)


def nested_dataclass(module: str, node: ast.expr) -> tuple[str, ast.ClassDef] | None:
    """The package dataclass an annotation takes, searched as :func:`pal_lightning.cli.options.nested_class` does."""
    if isinstance(node, ast.Name):
        found = definition(module, node.id)
        if found is not None and isinstance(found[1], ast.ClassDef) and is_dataclass(found[1]):
            return found  # type: ignore[return-value]
        return None
    parts: list[ast.expr] = []
    if isinstance(node, ast.Subscript):
        parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
    for part in parts:
        found = nested_dataclass(module, part)
        if found is not None:
            return found
    return None


def takes_a_list(node: ast.expr) -> bool:
    """Whether an annotation takes a list, as :func:`pal_lightning.cli.options.takes_a_list` decides."""
    if isinstance(node, ast.Subscript):
        origin = node.value
        name = origin.attr if isinstance(origin, ast.Attribute) else getattr(origin, "id", "")
        if name in _LIST_TYPES:
            return True
        parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        return any(takes_a_list(p) for p in parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return takes_a_list(node.left) or takes_a_list(node.right)
    return False
