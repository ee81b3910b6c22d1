"""The serving API's requests and answers as pure code: a request body checked into a :class:`ServeRequest`
(each mistake one :class:`BadRequest` line with its HTTP status), and the JSON answer of one input.

A request is one object or a list of them (in order)::

    {"task": "sst", "text": "a fine film"}
    {"task": "qqp", "text": ["How do I cook rice?", "How is rice cooked?"]}
    {"tasks": ["sst", "topics"] | "all", "text": "a fine film", "all_classes": true}

``"all"`` means every task that takes the input's shape (one sentence or a pair).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pal_lightning.core.errors import PalUserError

#: The keys an input object may have.
INPUT_KEYS = ("task", "tasks", "text", "all_classes")
EXAMPLE = '{"task": "sst", "text": "a fine film"}'
#: JSON's \ud800 escapes decode to lone surrogates, which the tokenizer refuses.
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadRequest(PalUserError):
    """A request the server refuses: one line, and the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TaskInfo:
    """What one task of the served model takes and gives (``GET /tasks``)."""

    name: str
    """The task's name, as requests give it."""
    kind: str
    """``single_classification``, ``pair_classification`` or ``pair_regression``."""
    inputs: int
    """Sentences per input: 1, or 2 for a pair task."""
    labels: tuple[str, ...] | None
    """The class names in class order; ``None`` for regression or classes without names."""
    num_labels: int
    """Classes of a classification task (1 for regression)."""
    pair_encoding: str | None = None
    """A pair task's encoding (``cross``: one sequence; ``siamese``: two), else ``None``."""

    def describe(self) -> dict[str, Any]:
        """This task as ``GET /tasks`` shows it."""
        return {
            "kind": self.kind,
            "inputs": self.inputs,
            "labels": list(self.labels) if self.labels is not None else None,
            "num_labels": self.num_labels,
            "pair_encoding": self.pair_encoding,
        }


@dataclass(frozen=True)
class Query:
    """One input of a request: its text (a sentence or a pair) and the tasks to predict for it."""

    text: str | tuple[str, str]
    """The sentence, or the ``(sentence1, sentence2)`` pair."""
    tasks: tuple[str, ...]
    """The tasks to predict, known to the model and of the text's shape."""
    all_classes: bool = False
    """Whether the answer lists every class's probability."""


@dataclass(frozen=True)
class ServeRequest:
    """A checked request: its inputs in order, and whether it was a list (answered by a list)."""

    queries: tuple[Query, ...]
    """The inputs, in request order."""
    listed: bool
    """Whether the body was a list (the answer is a list) rather than one object."""

    def canonical(self) -> dict[str, Any]:
        """This request as the inference worker receives it (:meth:`from_canonical` reads it back)."""
        queries: list[dict[str, Any]] = [
            {
                "text": list(q.text) if isinstance(q.text, tuple) else q.text,
                "tasks": list(q.tasks),
                "all_classes": q.all_classes,
            }
            for q in self.queries
        ]
        return {"listed": self.listed, "queries": queries}

    @classmethod
    def from_canonical(cls, payload: Mapping[str, Any]) -> ServeRequest:
        """The request written by :meth:`canonical` (checked already: the server's guard wrote it)."""
        queries = []
        for q in payload["queries"]:
            text = q["text"] if isinstance(q["text"], str) else (q["text"][0], q["text"][1])
            queries.append(Query(text, tuple(q["tasks"]), bool(q["all_classes"])))
        return cls(tuple(queries), bool(payload["listed"]))


def parse_body(body: bytes, tasks: Mapping[str, TaskInfo], max_inputs: int) -> ServeRequest:
    """The request in a ``POST /predict`` body.

    Raises:
        BadRequest: 400 for a body that is not UTF-8 JSON, 413 for more than ``max_inputs`` inputs, 422 for
            anything else wrong (each naming the input and the problem).
    """
    try:
        payload = json.loads(body.decode("utf-8"))
    except RecursionError:
        raise BadRequest(400, f"The body's JSON is nested too deeply. Send e.g. {EXAMPLE}.") from None
    except ValueError as err:  # not UTF-8, not JSON, or a number of more digits than Python converts
        raise BadRequest(
            400, f"The body is not valid JSON ({_cut(str(err), 120)}). Send e.g. {EXAMPLE}."
        ) from None
    listed = isinstance(payload, list)
    items = payload if listed else [payload]
    if not items:
        raise BadRequest(422, f"The list holds no input. Send one or more objects like {EXAMPLE}.")
    if len(items) > max_inputs:
        raise BadRequest(
            413, f"The list holds {len(items)} inputs; this server takes at most {max_inputs} per request."
        )
    queries = []
    for i, item in enumerate(items):
        try:
            queries.append(_query(item, tasks))
        except BadRequest as err:
            if not listed:
                raise
            raise BadRequest(err.status, f"Input {i}: {err}") from None
    return ServeRequest(tuple(queries), listed)


def _query(item: Any, tasks: Mapping[str, TaskInfo]) -> Query:
    if not isinstance(item, dict):
        raise BadRequest(422, f"An input must be a JSON object like {EXAMPLE}, got {_short(item)}.")
    unknown = sorted(str(k) for k in item if k not in INPUT_KEYS)
    if unknown:
        raise BadRequest(422, f"Unknown key(s) {unknown}: an input takes {', '.join(INPUT_KEYS)}.")
    text = _text(item.get("text"))
    all_classes = item.get("all_classes", False)
    if not isinstance(all_classes, bool):
        raise BadRequest(422, f'"all_classes" must be true or false, got {_short(all_classes)}.')
    return Query(text, _tasks(item, text, tasks), all_classes)


def _text(text: Any) -> str | tuple[str, str]:
    for part in [text] if isinstance(text, str) else text if isinstance(text, list) else []:
        if isinstance(part, str) and _SURROGATE.search(part):
            raise BadRequest(
                422, '"text" holds an unpaired surrogate (\\ud800 to \\udfff): send valid Unicode.'
            )
    if isinstance(text, str):
        if not text.strip():
            raise BadRequest(422, '"text" is empty: give a sentence (or a pair, ["sentence1", "sentence2"]).')
        return text
    if isinstance(text, list) and len(text) == 2 and all(isinstance(t, str) for t in text):
        if not all(t.strip() for t in text):
            raise BadRequest(422, 'A sentence of the "text" pair is empty: give two sentences.')
        return (text[0], text[1])
    if text is None:
        raise BadRequest(422, f'The input has no "text". Send e.g. {EXAMPLE}.')
    raise BadRequest(
        422,
        f'"text" must be a sentence (a string) or a pair of sentences (a list of two strings), got {_short(text)}.',
    )


def _tasks(
    item: Mapping[str, Any], text: str | tuple[str, str], tasks: Mapping[str, TaskInfo]
) -> tuple[str, ...]:
    width = 1 if isinstance(text, str) else 2
    if ("task" in item) == ("tasks" in item):
        raise BadRequest(422, 'Give exactly one of "task" (a name) and "tasks" (a list of names, or "all").')
    if "task" in item:
        names = [item["task"]]
    elif item["tasks"] == "all":
        names = [name for name, info in tasks.items() if info.inputs == width]
        if not names:
            shape = "one sentence" if width == 1 else "a pair of sentences"
            raise BadRequest(422, f"No task of this model takes {shape}; its tasks: {_listing(tasks)}.")
    else:
        names = item["tasks"]
        if not isinstance(names, list) or not names:
            raise BadRequest(
                422, f'"tasks" must be a non-empty list of task names or "all", got {_short(names)}.'
            )
    for name in names:
        if not isinstance(name, str) or name not in tasks:
            raise BadRequest(422, f"Unknown task {_short(name)}: this model predicts {_listing(tasks)}.")
        if tasks[name].inputs != width:
            want = (
                'a pair of sentences: "text": ["sentence1", "sentence2"]'
                if tasks[name].inputs == 2
                else 'one sentence: "text": "a sentence"'
            )
            raise BadRequest(422, f"Task {name!r} takes {want}.")
    return tuple(dict.fromkeys(names))


def _listing(tasks: Mapping[str, TaskInfo]) -> str:
    return ", ".join(f"{name} ({'pair' if info.inputs == 2 else 'sentence'})" for name, info in tasks.items())


def _short(value: Any) -> str:
    # a value quoted in an error line, cut so that a huge input does not make a huge error
    try:
        return _cut(json.dumps(value))
    except (ValueError, TypeError, RecursionError):
        return type(value).__name__


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def answer(query: Query, predictions: Sequence[Any], truncated: bool) -> dict[str, Any]:
    """One input's answer from its :class:`~pal_lightning.module.inference.Prediction` per task (in
    ``query.tasks`` order): ``{"predictions": {task: {...}}, "truncated": bool}``, where a classification
    task gives ``label`` and its ``probability`` (``probabilities`` of every class when asked), a regression
    task its ``score``; ``truncated``: the text was longer than the model's window and was cut, as
    ``predict`` cuts it."""
    out: dict[str, Any] = {}
    for task, prediction in zip(query.tasks, predictions, strict=True):
        if prediction.probabilities is None:
            out[task] = {"score": float(prediction.score)}
            continue
        entry: dict[str, Any] = {
            "label": prediction.label,
            "probability": float(prediction.probabilities[prediction.class_index]),
        }
        if query.all_classes:
            entry["probabilities"] = prediction.record()["probabilities"]
        out[task] = entry
    return {"predictions": out, "truncated": truncated}


def error_body(message: str) -> bytes:
    """The JSON body of a refused request: ``{"error": "<one line>"}``."""
    return json.dumps({"error": " ".join(str(message).split())}).encode("utf-8")
