"""A Griffe extension for the documentation site (loaded by ``mkdocs.yml``, not part of the package).

The package's docstrings are Google-style but keep some Sphinx markup: roles
(``:class:`~pal_lightning.gem.GEMCallback` ``), literal blocks introduced by ``::`` and ``.. math::``
directives. Markdown would show the roles as text and read ``R[i][j]`` in a literal block as a link,
so each docstring is rewritten while the site is built (the source stays as it is):

* a role becomes an optional cross-reference: a link where the site documents the target, plain code
  where it does not (no warning either way);
* a ``::`` literal block and a ``.. math::`` directive become fenced code blocks;
* ``:math:`x``` becomes code.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(?P<role>[a-z]+):`(?P<target>[^`]+)`")
EXPLICIT_TITLE = re.compile(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>")
DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. [a-z]+::\s*$")
#: Google sections whose entries are items (``name: text``): a block under an item's first line must be
#: indented below it to stay in that item.
ITEM_SECTION = re.compile(
    r"\s*(Args|Arguments|Parameters|Other Parameters|Returns|Yields|Receives|Raises|Warns|Attributes):\s*"
)


def _identifier(obj: Object, target: str) -> str:
    """``target`` as a full path: relative names (``.memory``, ``EpisodicMemory``) through ``obj``'s scope."""
    if target.startswith("."):
        scope = obj if obj.is_module else obj.module
        return f"{scope.path}{target}"
    try:
        return obj.resolve(target)
    except Exception:  # noqa: BLE001 - any name griffe cannot resolve stays as written
        return target


def _role(obj: Object, match: re.Match[str]) -> str:
    role, target = match["role"], match["target"].strip()
    if role == "math":
        return f"`{target}`"
    explicit = EXPLICIT_TITLE.fullmatch(target)
    if explicit:
        title, target = explicit["title"], explicit["target"]
    else:
        short = target.startswith("~")
        target = target.lstrip("~")
        title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    return f'<autoref identifier="{_identifier(obj, target)}" optional><code>{title}</code></autoref>'


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _opens_item(lines: list[str], i: int) -> bool:
    """Whether ``lines[i]`` is the first line of an item of a Google item section."""
    base = _indent(lines[i])
    for line in reversed(lines[:i]):
        if line.strip() and _indent(line) < base:
            return bool(ITEM_SECTION.fullmatch(line)) and base == _indent(line) + 4
    return False


def _fence_literal_blocks(text: str) -> str:
    """``text::`` + an indented block (or a ``.. math::`` directive + its block) -> a fenced block."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        directive = DIRECTIVE.match(line)
        if not (directive or line.rstrip().endswith("::")):
            out.append(line)
            i += 1
            continue
        base, start = _indent(line), i
        intro = "" if directive else line.rstrip()[:-2].rstrip()
        if intro:  # "Layout::" -> "Layout:"; a bare "::" line goes
            out.append(intro if intro.endswith(":") else intro + ":")
        block, i = [], i + 1
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            block.append(lines[i])
            i += 1
        while block and not block[0].strip():
            block.pop(0)
        while block and not block[-1].strip():
            block.pop()
        inner = min((_indent(b) for b in block if b.strip()), default=base)
        pad = " " * (base + 4 if _opens_item(lines, start) else base)
        fenced = [pad + b[inner:] if b.strip() else "" for b in block]
        out += ["", pad + "```text", *fenced, pad + "```", ""]
    return "\n".join(out)


class SphinxMarkup(Extension):
    """Rewrites each object's docstring into Markdown once the object tree is complete."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.is_alias or obj.docstring is None:
            return
        text = _fence_literal_blocks(obj.docstring.value)
        obj.docstring.value = ROLE.sub(lambda m: _role(obj, m), text)
