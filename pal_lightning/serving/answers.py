"""Answers to a batch of checked requests, whatever their tasks: every ``(task, text)`` of every request goes
through the inference core (:func:`~pal_lightning.module.inference.predict_items`) in one call, so that the
served values are ``predict``'s; plus the task catalogue a loaded model serves.
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


def answer_requests(module: Any, requests: Sequence[ServeRequest], per_task: bool = False) -> list[Any]:
    """The answer to each request: one ``predict_items`` call for all their inputs and tasks (one mixed
    forward, its rows sorted by length), split back per request; a listed request gets a list.
    ``per_task``: one call (one forward) per task instead, each of that task's rows alone (``--batching
    per_task``, what a server without task routing does: the comparison of the load test)."""
    items = [(task, q.text) for r in requests for q in r.queries for task in q.tasks]
    predictions = predict_per_task(module, items) if per_task else predict_all(module, items)
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


def predict_all(module: Any, items: Sequence[tuple[str, Any]]) -> list[Any]:
    """``predict_items`` of every ``(task, text)`` in one batch, whatever their tasks."""
    from pal_lightning.module.inference import predict_items

    return predict_items(module, items, batch_size=len(items))


def predict_per_task(module: Any, items: Sequence[tuple[str, Any]]) -> list[Any]:
    """``predict_items`` of each task's ``(task, text)`` apart (one batch per task), back in input order."""
    at: dict[str, list[int]] = {}
    for i, (task, _) in enumerate(items):
        at.setdefault(task, []).append(i)
    out: list[Any] = [None] * len(items)
    for rows in at.values():
        for i, prediction in zip(rows, predict_all(module, [items[i] for i in rows]), strict=True):
            out[i] = prediction
    return out
