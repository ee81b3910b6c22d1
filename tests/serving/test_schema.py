"""The serving API's request checks (pal_lightning.serving.schema): every malformed request is one 4xx line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pal_lightning.module.inference import Prediction
from pal_lightning.serving.schema import (
    BadRequest,
    Query,
    ServeRequest,
    TaskInfo,
    answer,
    error_body,
    parse_body,
)

TASKS = {
    "sst": TaskInfo("sst", "single_classification", 1, ("neg", "pos"), 2),
    "qqp": TaskInfo("qqp", "pair_classification", 2, ("no", "yes"), 2, "cross"),
    "sts": TaskInfo("sts", "pair_regression", 2, None, 1, "siamese"),
}


def parse(body: object, max_inputs: int = 4) -> ServeRequest:
    return parse_body(json.dumps(body).encode(), TASKS, max_inputs)


def test_the_accepted_shapes_and_their_canonical_form() -> None:
    one = parse({"task": "sst", "text": "a fine film"})
    assert one == ServeRequest((Query("a fine film", ("sst",)),), listed=False)
    pair = parse({"tasks": "all", "text": ["a?", "b?"], "all_classes": True})
    assert pair.queries[0] == Query(("a?", "b?"), ("qqp", "sts"), True)  # "all": the tasks of a pair
    listed = parse([{"tasks": ["sst", "sst"], "text": "x"}, {"task": "sts", "text": ["a", "b"]}])
    assert listed.listed and listed.queries[0].tasks == ("sst",)  # a task named twice is predicted once
    for request in (one, pair, listed):  # what the guard hands the worker reads back the same
        assert ServeRequest.from_canonical(json.loads(json.dumps(request.canonical()))) == request


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"task": "sst", ', 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
        (b"[" * 100_000, 400, "nested too deeply"),
        (b"1" * 5000, 400, "not valid JSON (Exceeds the limit (4300 digits)"),
        (b'{"task": "sst", "text": "a\\ud800"}', 422, "unpaired surrogate"),
        (b'{"task": "qqp", "text": ["a", "\\udfff b"]}', 422, "unpaired surrogate"),
        ([], 422, "holds no input"),
        ([{"task": "sst", "text": "x"}] * 5, 413, "holds 5 inputs; this server takes at most 4"),
        ("just text", 422, "must be a JSON object"),
        (
            {"task": "nope", "text": "x"},
            422,
            'Unknown task "nope": this model predicts sst (sentence), qqp (pair)',
        ),
        ({"task": "qqp", "text": "x"}, 422, "Task 'qqp' takes a pair of sentences"),
        ({"task": "sst", "text": ["a", "b"]}, 422, "Task 'sst' takes one sentence"),
        ({"task": "sst", "text": "  "}, 422, '"text" is empty'),
        ({"task": "qqp", "text": ["a", ""]}, 422, 'A sentence of the "text" pair is empty'),
        ({"task": "sst", "text": 5}, 422, "must be a sentence (a string) or a pair"),
        ({"task": "sst", "text": ["a", "b", "c"]}, 422, "must be a sentence"),
        ({"task": "sst"}, 422, 'no "text"'),
        ({"text": "x"}, 422, 'exactly one of "task"'),
        ({"task": "sst", "tasks": ["sst"], "text": "x"}, 422, 'exactly one of "task"'),
        ({"tasks": [], "text": "x"}, 422, "non-empty list"),
        ({"tasks": "sst", "text": "x"}, 422, "non-empty list"),
        ({"task": 3, "text": "x"}, 422, "Unknown task 3"),
        ({"task": "sst", "text": "x", "all_classes": "yes"}, 422, '"all_classes" must be true or false'),
        ({"task": "sst", "text": "x", "lang": "en"}, 422, "Unknown key(s) ['lang']"),
        ([{"task": "sst", "text": "x"}, {"task": "sst", "text": ""}], 422, 'Input 1: "text" is empty'),
    ],
)
def test_each_mistake_is_one_line_with_its_status(body: object, status: int, message: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequest) as info:
        parse_body(raw, TASKS, 4)
    assert info.value.status == status
    assert message in str(info.value) and "\n" not in str(info.value)


def test_all_with_no_task_of_the_shape_and_a_huge_value_quoted_short() -> None:
    with pytest.raises(BadRequest, match="No task of this model takes a pair of sentences"):
        parse_body(b'{"tasks": "all", "text": ["a", "b"]}', {"sst": TASKS["sst"]}, 4)
    with pytest.raises(BadRequest) as info:
        parse({"task": "x" * 10_000, "text": "a"})
    assert len(str(info.value)) < 200


def test_answers_and_error_bodies() -> None:
    probs = np.array([0.25, 0.75], dtype=np.float32)
    sst = Prediction("sst", 1, "pos", probs, None, ["neg", "pos"])
    sts = Prediction("sts", None, None, None, 3.5)
    assert answer(Query("a", ("sst",)), [sst], False) == {
        "predictions": {"sst": {"label": "pos", "probability": 0.75}},
        "truncated": False,
    }
    every = answer(Query(("a", "b"), ("sst", "sts"), True), [sst, sts], True)
    assert every["predictions"]["sst"]["probabilities"] == {"neg": 0.25, "pos": 0.75}
    assert every["predictions"]["sts"] == {"score": 3.5} and every["truncated"] is True
    assert json.loads(error_body("two\nlines")) == {"error": "two lines"}
