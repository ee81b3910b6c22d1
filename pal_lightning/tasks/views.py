"""Evaluation views: more dev and test sets scored by one task's head under a name of their own, with no
head or training of their own (MNLI's mismatched sets ``glue_mnli_mm``, the diagnostic set ``glue_ax``).
A view whose name is also a listed task is left out: that task has its own head."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskSpec

__all__ = ["EvalView", "eval_views", "with_views"]


@dataclass(frozen=True)
class EvalView:
    """One evaluation view: its spec (the parent's, renamed, with the view's fields) and its parent task."""

    spec: TaskSpec
    parent: str

    @property
    def name(self) -> str:
        return self.spec.name

    def has(self, split: str) -> bool:
        """Whether the view names a ``split`` of its own."""
        return split in self.spec.files


def eval_views(specs: Iterable[TaskSpec]) -> dict[str, EvalView]:
    """The views of ``specs`` by name, in task order.

    Raises:
        PalUserError: when two tasks define a view of the same name.
    """
    specs = list(specs)
    listed = {s.name for s in specs}
    out: dict[str, EvalView] = {}
    for spec in specs:
        for view in spec.views():
            if view.name in listed:
                continue
            if view.name in out:
                raise PalUserError(
                    f"Tasks {out[view.name].parent!r} and {spec.name!r} both define the evaluation view "
                    f"{view.name!r}; rename one of them in its eval_views."
                )
            out[view.name] = EvalView(view, spec.name)
    return out


def with_views(specs: Iterable[TaskSpec], views: dict[str, EvalView], split: str) -> list[TaskSpec]:
    """``specs``, each followed by its views that have ``split``."""
    out = []
    for spec in specs:
        out.append(spec)
        out.extend(v.spec for v in views.values() if v.parent == spec.name and v.has(split))
    return out
