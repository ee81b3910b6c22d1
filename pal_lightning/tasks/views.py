"""Evaluation views: more dev and test sets scored by one task's head, each under a name of its own.

A task's :attr:`~pal_lightning.tasks.specs.TaskSpec.eval_views` name sets that its head (and its adapters or
individual layers) is scored on besides the task's own dev and test splits, with no head, parameters or
training of their own: GLUE's MNLI is one head trained on one train split and scored on the matched dev set
(``glue_mnli``) and on the mismatched one (the view ``glue_mnli_mm``), and it predicts the diagnostic set
(the view ``glue_ax``). The data module serves a view's splits under the view's name; the module runs
such a batch through the parent task's head and logs it under the view's name (``val/glue_mnli_mm/accuracy``);
``predict`` writes it under the view's name too.

A view whose name is also a listed task is left out: the listed task is trained and scored by its own head.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskSpec

__all__ = ["EvalView", "eval_views", "with_views"]


@dataclass(frozen=True)
class EvalView:
    """One evaluation view: its spec (the parent's, renamed, with the view's files) and its parent task."""

    spec: TaskSpec
    """The view as a task spec: what the data module reads and the metrics are built from."""
    parent: str
    """The task whose head scores the view."""

    @property
    def name(self) -> str:
        """The view's name: its batches' task, its metrics' prefix (``val/<name>/...``), its files' name."""
        return self.spec.name

    def has(self, split: str) -> bool:
        """Whether the view names a ``split`` (``dev``, ``test``) of its own."""
        return split in self.spec.files


def eval_views(specs: Iterable[TaskSpec]) -> dict[str, EvalView]:
    """The views of ``specs`` by name, in task order (a view named like a listed task is left out).

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
    """``specs`` followed, each, by its views that have ``split`` (``dev``: what validation scores)."""
    out = []
    for spec in specs:
        out.append(spec)
        out.extend(v.spec for v in views.values() if v.parent == spec.name and v.has(split))
    return out
