"""Sentence vectors and mixed batches: :func:`encode_sentences` (as sentence-transformers' ``encode``),
:func:`encode_task_batch` (a one-task batch, as its head encodes pairs) and
:func:`forward_mixed` (several tasks' rows in one encoder pass)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from pal_lightning.core.batch import (
    ATTENTION_MASK,
    INPUT_IDS,
    TASK,
    TASKS,
    TOKEN_TYPE_IDS,
    concat_inputs,
    side_inputs,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import pool
from pal_lightning.module.compile import EncoderCall
from pal_lightning.module.inference import as_texts, eval_mode, predict_spec

if TYPE_CHECKING:
    from pal_lightning.modeling.encoder import MultiTaskEncoder
    from pal_lightning.module.multitask import MultiTaskModule


class TaskRows(NamedTuple):
    """One task's share of a mixed batch's outputs (:meth:`MultiTaskModule.forward_mixed`)."""

    rows: Tensor
    """``LongTensor``: the task's rows in the batch, ascending, on the module's device."""
    output: Tensor
    """The task's head output for those rows, as ``forward`` gives it for a one-task batch of them."""


def encode_sentences(
    module: MultiTaskModule,
    sentences: str | Sequence[str],
    task: str | None = None,
    batch_size: int = 32,
    normalize_embeddings: bool = False,
    convert_to_numpy: bool = True,
    convert_to_tensor: bool = False,
) -> Any:
    """Sentence embeddings, as sentence-transformers' ``encode`` gives them: ``float32 [N, d]`` in input order
    (``[d]`` for one string), pooled as the model pools.

    Args:
        sentences: a sentence or a list of them.
        task: the task whose modules are active; ``None``: the shared encoder alone.
        batch_size: sentences per forward pass (the result does not depend on it).
        normalize_embeddings: scale every vector to unit length (cosine similarity = dot product).
        convert_to_numpy: a ``numpy`` array (else a list of tensors).
        convert_to_tensor: one tensor on the module's device (wins over ``convert_to_numpy``).

    Raises:
        PalUserError: for an unknown task, a text that is not a string, or a ``batch_size`` below 1.
    """
    texts = as_texts(sentences, "encode(['a fine film'])", single=(str,))
    vectors = _sentence_vectors(module, texts, task, batch_size)
    if normalize_embeddings:
        vectors = torch.nn.functional.normalize(vectors, p=2.0, dim=-1)
    vectors = vectors[0] if isinstance(sentences, str) else vectors
    return vectors if convert_to_tensor else vectors.cpu().numpy() if convert_to_numpy else list(vectors)


def pooled(call: Callable[..., Tensor], inputs: Mapping[str, Any], pooling: str, **route: Any) -> Tensor:
    """The pooled vectors of ``inputs`` (``input_ids``, ``attention_mask``, optional ``token_type_ids``)
    encoded by ``call`` with the task routing ``route`` (``task=`` or ``tasks=``)."""
    mask = inputs[ATTENTION_MASK]
    return pool(call(inputs[INPUT_IDS], mask, inputs.get(TOKEN_TYPE_IDS), **route), mask, pooling)


def _sentence_vectors(module: MultiTaskModule, texts: list[Any], task: str | None, batch_size: int) -> Tensor:
    if task is not None:
        predict_spec(module.task_specs, task)  # unknown: one error naming the known tasks
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise PalUserError(f"encode takes sentences (strings), but input {bad} is {texts[bad]!r}.")
    if batch_size < 1:
        raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
    if not texts:
        return torch.zeros(0, module.encoder.hidden_size, device=module.device)
    # longest first, as sentence-transformers does: batches of similar length pad little
    order = np.argsort([-len(t) for t in texts], kind="stable")
    chunks: list[Tensor] = []
    with eval_mode(module), torch.no_grad():
        for start in range(0, len(texts), batch_size):
            tokens = module.tokenizer(
                [texts[i] for i in order[start : start + batch_size]],
                padding=True,
                truncation=True,
                max_length=int(module.predict_max_length),
                return_tensors="pt",
            )
            ids, mask = tokens["input_ids"].to(module.device), tokens["attention_mask"].to(module.device)
            if task is None:  # no task's hooks are active outside a task's forward: the shared encoder
                hidden = module.encoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
            else:  # token types all 0, the encoder's default
                hidden = module._encoder_call(ids, mask, None, task=task)
            chunks.append(pool(hidden, mask, module.hparams["pooling"]).float())
    vectors = torch.cat(chunks)
    return vectors[torch.from_numpy(np.argsort(order)).to(vectors.device)]  # back to input order


def encode_task_batch(call: EncoderCall, batch: Mapping[str, Any], pooling: str, siamese: bool) -> Tensor:
    """The pooled vectors of a one-task batch: one sequence per example, or (``siamese``) ``[a; b]`` of its
    pairs' sentences, in one pass of ``2B`` sequences."""
    sides = [side_inputs(batch, "a"), side_inputs(batch, "b")] if siamese else [batch]
    if INPUT_IDS not in sides[0]:
        model, data = ("siamese", "cross") if siamese else ("cross", "siamese")
        raise PalUserError(
            f"Task {batch[TASK]!r}: the model encodes pairs '{model}' but the batch is '{data}'. "
            "Set the same pair_encoding for the model and the data."
        )
    return pooled(call, concat_inputs(sides) if siamese else batch, pooling, task=batch[TASK])


def tasks_of_indices(indices: Sequence[int], known: Sequence[str], what: str) -> list[str]:
    """The task of each index into ``known``; an index out of range is one user error (``what`` names them)."""
    bad = sorted({i for i in indices if not 0 <= i < len(known)})
    if bad:
        raise PalUserError(
            f"{what} {bad} are out of range: this model's tasks are "
            f"{', '.join(f'{i}={n}' for i, n in enumerate(known))}."
        )
    return [known[i] for i in indices]


def forward_mixed(
    encoder: MultiTaskEncoder,
    heads: nn.ModuleDict,
    pooling: str,
    batch: Mapping[str, Any],
    parent_of: Callable[[str], str],
) -> dict[str, TaskRows]:
    """``MultiTaskModule.forward_mixed``; ``parent_of`` maps a row's name to the task that serves it."""
    tasks = batch[TASKS]
    if isinstance(tasks, Tensor):  # indices into the model's tasks
        names = tasks_of_indices(tasks.tolist(), encoder.task_names, "Task indices")
    else:
        names = [str(t) for t in tasks]
    parents = {name: parent_of(name) for name in dict.fromkeys(names)}
    row_tasks = [parents[name] for name in names]
    second = None
    siamese = sorted({t for t in row_tasks if getattr(heads[t], "siamese", False)})
    if siamese:
        second = side_inputs(batch, "b")
        if INPUT_IDS not in second:
            raise PalUserError(
                f"Task(s) {siamese} encode pairs 'siamese', but the mixed batch has no second sentences "
                "(input_ids_b, attention_mask_b): build it with pal_lightning.core.batch.mix_batches, or set "
                "pair_encoding: cross."
            )
    return mixed_head_outputs(encoder, heads, pooling, side_inputs(batch, ""), second, row_tasks, names)


def mixed_head_outputs(
    encoder: MultiTaskEncoder,
    heads: nn.ModuleDict,
    pooling: str,
    first: dict[str, Tensor],
    second: dict[str, Tensor] | None,
    row_tasks: Sequence[str],
    keys: Sequence[str] | None = None,
) -> dict[str, TaskRows]:
    """``{key: TaskRows}`` (``keys``: a name per row, default its task) from one encoder pass with per-row
    routing; the rows of siamese heads add their ``second`` sentence as extra rows. Shared by
    ``forward_mixed`` and :class:`~pal_lightning.module.export.MixedTaskModel`."""
    keys = list(row_tasks) if keys is None else list(keys)
    tasks = list(row_tasks)
    siamese = [i for i, task in enumerate(tasks) if getattr(heads[task], "siamese", False)]
    inputs = first
    if siamese:
        assert second is not None
        picked = torch.tensor(siamese, device=second[INPUT_IDS].device)
        b = {key: value.index_select(0, picked) for key, value in second.items()}
        if TOKEN_TYPE_IDS in first:  # kept for the cross pairs among the rows
            b.setdefault(TOKEN_TYPE_IDS, torch.zeros_like(b[INPUT_IDS]))
        inputs = concat_inputs([first, b])
        tasks += [tasks[i] for i in siamese]
    vectors = pooled(encoder, inputs, pooling, tasks=tasks)
    rows_of: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        rows_of.setdefault(key, []).append(i)
    second_row = {i: len(keys) + k for k, i in enumerate(siamese)}
    outputs: dict[str, TaskRows] = {}
    for key, rows in rows_of.items():
        task, index = tasks[rows[0]], torch.tensor(rows, device=vectors.device)
        u = vectors.index_select(0, index)
        if rows[0] in second_row:
            at = torch.tensor([second_row[i] for i in rows], device=vectors.device)
            outputs[key] = TaskRows(index, heads[task](u, vectors.index_select(0, at)))
        else:
            outputs[key] = TaskRows(index, heads[task](u))
    return outputs
