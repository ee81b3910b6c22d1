"""The package's layering, checked on its source: imports point down the declared order, and the import
graph between modules has no cycle.

Every import counts, including those inside functions (a lazy import is still a dependency); only imports
under ``if TYPE_CHECKING:`` are exempt (they never run). The layers, lowest first, are those of
``docs/extending.md`` ("Where things live").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pal_lightning"

#: The top-level packages, lowest first: a module may import its own layer and the layers before it.
LAYERS = (
    "core",
    "tasks",
    "data",
    "modeling",
    "gem",
    "module",
    "inference",
    "serving",
    "callbacks",
    "pretraining",
    "cli",
    "testing",
)

MAX_MODULE_LINES = 500


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if _type_checking_block(node):
            for child in getattr(node, "orelse", []):  # the else branch does run
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from pkg import name`` counts as importing
    ``pkg.name`` when that is a module, else ``pkg``)."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                if target == top or target.startswith(top + "."):
                    while target not in files:  # `import pkg.mod.attr` style: the longest module prefix
                        target = target.rsplit(".", 1)[0]
                    if target != name:
                        deps.add(target)
        graph[name] = deps
    return graph


def layer_of(module: str) -> int:
    """Index of ``module``'s layer in :data:`LAYERS`; the package root and ``__main__`` sit above all."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return len(LAYERS)
    return LAYERS.index(parts[1])


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{mod} -> {dep}" for mod, deps in graph.items() for dep in deps if layer_of(dep) > layer_of(mod)
    )


def test_every_top_level_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS)
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules outside a layer: {loose}"


def test_imports_point_down_the_layers() -> None:
    assert upward_imports(import_graph()) == []


def test_the_import_graph_has_no_cycle() -> None:
    assert find_cycle(import_graph()) is None


def test_no_module_over_five_hundred_lines() -> None:
    """A module past 500 lines is doing two jobs: split it by cohesion."""
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """The checker itself: a planted upward import and a planted cycle are both found."""
    root = tmp_path / "pal_lightning"
    for folder in ("core", "cli"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("def f():\n    from pal_lightning.cli import b\n")
    (root / "core" / "c.py").write_text("from pal_lightning.core import d\n")
    (root / "core" / "d.py").write_text("from typing import TYPE_CHECKING\nimport pal_lightning.core.c\n")
    (root / "cli" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pal_lightning.cli import b\n"
    )
    graph = import_graph(root)
    assert upward_imports(graph) == ["pal_lightning.core.a -> pal_lightning.cli.b"]
    assert find_cycle(graph) in (
        ["pal_lightning.core.c", "pal_lightning.core.d", "pal_lightning.core.c"],
        ["pal_lightning.core.d", "pal_lightning.core.c", "pal_lightning.core.d"],
    )
    assert graph["pal_lightning.cli.b"] == set()  # TYPE_CHECKING imports are exempt


#: The facade whose public methods users call (predict, encode, save_pretrained, ...): each a few lines
#: handing its work to a part (issue 42 item 8), so it is long without doing two jobs.
FACADE_LIMITS = {"pal_lightning.module.multitask.MultiTaskModule": 460}


@pytest.mark.parametrize("limit", [300])
def test_no_class_is_doing_two_jobs(limit: int) -> None:
    """No class over ``limit`` lines (its docstring included), but for the facade's own limit."""
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                name, lines = f"{module_name(path)}.{node.name}", node.end_lineno - node.lineno + 1
                if lines > FACADE_LIMITS.get(name, limit):
                    long[name] = lines
    assert long == {}


def test_no_function_over_sixty_lines() -> None:
    """No function or method over 60 lines, its docstring not counted."""
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(getattr(body[0], "value", None), ast.Constant)
                ):
                    body = body[1:]
                if not body:
                    continue
                length = body[-1].end_lineno - body[0].lineno + 1
                if length > 60:
                    long[f"{module_name(path)}.{node.name}"] = length
    assert long == {}
