"""Evaluation views (pal_lightning.tasks.specs): a task's further dev/test sets as specs of their own, the
views of a task list (one per name, a listed task winning over a view of its name), and what each split
serves, in order; a view with a field TaskSpec lacks fails when the task is built."""

from __future__ import annotations

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import TaskSpec, eval_views, get_task, task_to_dict, task_to_hparam, with_views


def _task(name: str, **views: dict[str, object]) -> TaskSpec:
    return TaskSpec(
        name=name, files={"train": f"{name}-train.csv", "dev": f"{name}-dev.csv"}, eval_views=views
    )


def test_a_view_is_its_task_renamed_with_its_own_files() -> None:
    spec = _task("a", a_other={"files": {"dev": "other-dev.csv", "test": "other-test.csv"}})
    (view,) = spec.views()
    assert view == spec.replace(
        name="a_other", files={"dev": "other-dev.csv", "test": "other-test.csv"}, eval_views={}
    )
    assert TaskSpec(**task_to_dict(spec)) == spec  # checkpoint-safe: rebuilt from plain values
    assert task_to_hparam(get_task("glue_mnli")) == "glue_mnli"  # the registered task keeps its name


@pytest.mark.parametrize("fields", [{"filez": {}}, {"name": "b"}, {"eval_views": {}}])
def test_a_view_setting_an_unknown_or_fixed_field_fails_with_the_task(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=rf"eval_views\['a_x'\] sets \['{next(iter(fields))}'\]"):
        _task("a", a_x=fields)


def test_views_of_a_task_list() -> None:
    a = _task("a", a_dev={"files": {"dev": "a2.csv"}}, b={"files": {"dev": "b2.csv"}})
    b = _task("b", b_test={"files": {"test": "b-test.csv"}})
    views = eval_views([a, b])
    # the view named b stands aside for the listed task b
    assert {name: v.parent for name, v in views.items()} == {"a_dev": "a", "b_test": "b"}
    assert [s.name for s in with_views([a, b], views, "dev")] == ["a", "a_dev", "b"]
    assert [s.name for s in with_views([a, b], views, "test")] == ["a", "b", "b_test"]
    c = _task("c", a_dev={"files": {"dev": "c2.csv"}})
    with pytest.raises(PalUserError, match="Tasks 'a' and 'c' both define the evaluation view 'a_dev'"):
        eval_views([a, c])
