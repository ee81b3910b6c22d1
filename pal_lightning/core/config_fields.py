"""A dataclass of options as a class's keyword arguments, documented once.

Python drops a field's docstring at run time, so ``inspect.signature``, jsonargparse and ``help()`` would
see neither the fields nor their documentation of a class taking ``**options``. :func:`takes_fields`
gives such a class the fields as its ``__init__`` signature and their docstrings as its ``Args:``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

C = TypeVar("C", bound=type)
T = TypeVar("T")


def field_docs(config_class: type) -> dict[str, str]:
    """The docstring under each field of ``config_class`` (its own body only), read from its source."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(config_class))).body[0]
    except (OSError, TypeError, SyntaxError):  # no source, or none that parses alone: no docs, still usable
        return {}
    if not isinstance(node, ast.ClassDef):
        return {}
    docs: dict[str, str] = {}
    for item, following in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[item.target.id] = inspect.cleandoc(following.value.value)
    return docs


def fields_signature(config_class: type) -> inspect.Signature:
    """``(self, <every field with its resolved annotation and default>)`` of the dataclass ``config_class``."""
    hints = get_type_hints(config_class)
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in dataclasses.fields(config_class):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = inspect.Parameter.empty
        params.append(
            inspect.Parameter(
                f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hints[f.name]
            )
        )
    return inspect.Signature(params, return_annotation=None)


def args_section(config_class: type, indent: str = "    ") -> str:
    """A Google-style ``Args:`` section with one entry per documented field of ``config_class``."""
    lines = ["Args:"]
    for name, doc in field_docs(config_class).items():
        body = doc.splitlines() or [""]
        lines.append(f"{indent}{name}: {body[0]}")
        lines.extend(f"{indent * 2}{line}".rstrip() for line in body[1:])
    return "\n".join(lines)


def takes_fields(config_class: type) -> Callable[[C], C]:
    """Class decorator: ``__init__(self, *args, **options)`` gets the fields of ``config_class`` as its
    signature, and the class docstring their :func:`args_section` (bind them with :func:`bind_fields`)."""

    def decorate(cls: C) -> C:
        target: Any = cls  # mypy refuses `.__init__` on a value typed as a class (unsound in general)
        init = target.__init__
        init.__signature__ = fields_signature(config_class)
        doc = inspect.cleandoc(cls.__doc__ or "")
        cls.__doc__ = f"{doc}\n\n{args_section(config_class)}\n" if doc else args_section(config_class)
        return cls

    return decorate


def bind_fields(config_class: type[T], args: tuple[Any, ...], options: dict[str, Any]) -> T:
    """``config_class(...)`` from the arguments of a :func:`takes_fields` class (``TypeError`` as Python's)."""
    bound = fields_signature(config_class).bind(None, *args, **options)
    values = dict(bound.arguments)
    values.pop("self")
    return config_class(**values)
