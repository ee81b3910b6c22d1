"""Answers to a batch of checked requests through the inference core
(:func:`~pal_lightning.module.inference.predict_items`, so the values are ``predict``'s), and a model's task
catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pal_lightning.core.batch import resolve_pair_encoding
from pal_lightning.serving.schema import ServeRequest, TaskInfo, answer
from pal_lightning.tasks.specs import TaskKind


def catalogue(module: Any) -> dict[str, TaskInfo]:
    """Each task of a loaded ``MultiTaskModule``: its kind, the sentences it takes and its class names."""
    names = module.label_names
    out = {}
    for name, spec in module.task_specs.items():
        labels = names.get(name)
        out[name] = TaskInfo(
            name=name,
            kind=TaskKind(spec.kind).value,
            inputs=2 if spec.is_pair else 1,
            labels=tuple(labels) if labels and not spec.is_regression else None,
            num_labels=int(spec.num_labels),
            pair_encoding=resolve_pair_encoding(module.hparams["pair_encoding"], name)
            if spec.is_pair
            else None,
        )
    return out


def answer_requests(
    module: Any, requests: Sequence[ServeRequest], per_task: bool = False, rows: int = 0
) -> list[Any]:
    """The answer to each request: one ``predict_items`` call for all their inputs and tasks (their rows
    sorted by length, whatever their tasks, run in forwards of at most ``rows`` rows; 0: one forward), split
    back per request; a listed request gets a list. ``per_task``: one call per task instead, each of that
    task's rows alone (``--batching per_task``, what a server without task routing does: the comparison of
    the load test)."""
    items = [(task, q.text) for r in requests for q in r.queries for task in q.tasks]
    predictions = predict_per_task(module, items, rows) if per_task else predict_all(module, items, rows)
    cut = [p.truncated for p in predictions]  # as predict cut it: the tokenizer's own overflow
    answers: list[Any] = []
    at = 0
    for request in requests:
        one = []
        for query in request.queries:
            end = at + len(query.tasks)
            one.append(answer(query, predictions[at:end], any(cut[at:end])))
            at = end
        answers.append(one if request.listed else one[0])
    return answers


def predict_all(module: Any, items: Sequence[tuple[str, Any]], rows: int = 0) -> list[Any]:
    """``predict_items`` of every ``(task, text)``, whatever their tasks: sorted by length, in forwards of at
    most ``rows`` (0: all in one)."""
    from pal_lightning.module.inference import predict_items

    return predict_items(module, items, batch_size=rows or len(items))


def predict_per_task(module: Any, items: Sequence[tuple[str, Any]], rows: int = 0) -> list[Any]:
    """``predict_items`` of each task's ``(task, text)`` apart (one batch per task), back in input order."""
    at: dict[str, list[int]] = {}
    for i, (task, _) in enumerate(items):
        at.setdefault(task, []).append(i)
    out: list[Any] = [None] * len(items)
    for positions in at.values():
        chosen = [items[i] for i in positions]
        for i, prediction in zip(positions, predict_all(module, chosen, rows), strict=True):
            out[i] = prediction
    return out
