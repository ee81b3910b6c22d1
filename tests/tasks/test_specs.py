"""The shared low-layer helpers: to_plain (values as JSON holds them) and task_name_of."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.plain_values import to_plain
from pal_lightning.tasks.specs import TaskKind, TaskSpec, get_task, repeated_names, task_name_of, task_to_dict


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
