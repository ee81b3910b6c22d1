"""Task specs (pal_lightning.tasks.specs), their evaluation views, and the shared low-layer helpers to_plain
(values as JSON holds them) and task_name_of."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.plain_values import to_plain
from pal_lightning.tasks.specs import (
    TaskKind,
    TaskSpec,
    eval_views,
    get_task,
    repeated_names,
    task_name_of,
    task_to_dict,
    task_to_hparam,
    with_views,
)


class _Colour(Enum):
    RED = "red"


@dataclass
class _Point:
    x: int
    tags: tuple[str, ...]


def test_to_plain_writes_each_value_as_json_holds_it():
    value = {1: (_Colour.RED, [_Point(2, ("a", "b"))]), "k": {"n": (1.5, None)}}
    expected = {"1": ["red", [{"x": 2, "tags": ["a", "b"]}]], "k": {"n": [1.5, None]}}
    assert to_plain(value) == expected
    assert json.loads(json.dumps(to_plain(value))) == expected  # JSON-safe: survives a round trip


def test_task_to_dict_rebuilds_the_spec_and_holds_only_plain_values():
    spec = get_task("sts")
    d = task_to_dict(spec)
    assert d["kind"] == "pair_regression" and d["label_range"] == [0.0, 5.0]
    assert d["text_columns"] == ["sentence1", "sentence2"]
    assert TaskSpec(**d) == spec  # type: ignore[arg-type]


def test_task_name_of_reads_names_specs_and_their_dicts():
    spec = TaskSpec(name="mine", kind=TaskKind.PAIR_REGRESSION, num_labels=1, text_columns=("a", "b"))
    assert task_name_of("sst") == "sst"
    assert task_name_of(spec) == "mine"
    assert task_name_of(task_to_dict(spec)) == "mine"
    with pytest.raises(PalUserError, match="a mapping with a 'name'"):
        task_name_of({"kind": "single_classification"})
    with pytest.raises(PalUserError, match="got 3"):
        task_name_of(3)  # type: ignore[arg-type]


def test_repeated_names_lists_each_name_seen_twice_once_sorted():
    assert repeated_names(["b", "a", "b", "c", "a", "b"]) == ["a", "b"]
    assert repeated_names(iter(["x", "y"])) == []


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
