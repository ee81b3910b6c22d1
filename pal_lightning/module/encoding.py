"""Sentence vectors: of a batch (one sequence per example, or each side of a siamese pair alone), and of
plain sentences, as sentence-transformers' ``encode`` gives them.

``module.encode(["a fine film", "a dull one"])`` returns one vector per sentence (``float32 [N, d]``):
the sentences are tokenised by the model's tokenizer (cut at ``predict_max_length`` tokens), run in
batches of similar length on the module's device in eval mode without gradients, and pooled as the
model pools (``mean`` or ``cls``). ``task=None`` runs the shared encoder alone, without any task's
modules: for an unchanged pretrained encoder, the pretrained model's own embeddings. ``task="sst"``
runs it with that task's modules active (its PALs, its individual layers), as the task's head sees it.
``normalize_embeddings=True`` scales each vector to length 1, as sentence-transformers' models that end
in a ``Normalize`` module (all-MiniLM-L6-v2) do.

``module.forward_mixed(batch)`` runs a *mixed* batch, rows of several tasks
(:mod:`pal_lightning.core.batch`), in one encoder pass: each row gets its own task's modules (per-example
task routing, :mod:`pal_lightning.modeling.families.routing`) and its own task's head. Heads differ in
output width, so the result is per task: ``{task: TaskRows(rows, output)}``, ``rows`` the task's row
indices in the batch and ``output`` what :meth:`forward` gives a one-task batch of those rows. A siamese
task's second sentences (``input_ids_b``) join the same encoder pass as extra rows::

    rows 0..B-1  (every row; a siamese row's first sentence)  ┐  one encoder pass,   pooled ─┬─ head_sst(u[rows_sst])
    rows B..     (second sentences of the siamese rows)       ┘  tasks=<row tasks>           └─ head_sts(u[rows_sts], v[...])

How a pair task is encoded is decided per task by its head (``cross``: both sentences in one sequence;
``siamese``: each sentence alone, :mod:`pal_lightning.modeling.pair_heads`), and a batch must be laid out
the same way (the data module's ``pair_encoding``); a mismatch is one clear error, not a shape error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import numpy as np
import torch
from torch import Tensor, nn

from pal_lightning.core.batch import (
    ATTENTION_MASK,
    INPUT_IDS,
    LABELS,
    TASK,
    TASKS,
    TOKEN_TYPE_IDS,
    concat_inputs,
    side_inputs,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import pool
from pal_lightning.module.compile import EncoderCall
from pal_lightning.tasks.specs import TaskSpec

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from pal_lightning.modeling.encoder import MultiTaskBert

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object


class TaskRows(NamedTuple):
    """One task's share of a mixed batch's outputs (:meth:`PairEncodingMixin.forward_mixed`)."""

    rows: Tensor
    """``LongTensor``: the task's rows in the batch, ascending, on the module's device."""
    output: Tensor
    """The task's head output for those rows, as :meth:`forward` gives it for a one-task batch of them."""


class PairEncodingMixin(_ModuleBase):
    """:meth:`encode`: the pooled vectors of a batch, through the module's (maybe compiled) encoder."""

    heads: nn.ModuleDict
    task_specs: dict[str, TaskSpec]
    encoder: MultiTaskBert
    tokenizer: Any
    predict_max_length: int
    _encoder_call: EncoderCall

    if TYPE_CHECKING:  # provided by the module

        def _capture_simcse_view(self, pooled: Tensor) -> None: ...

        eval_views: dict[str, Any]

        def spec_of(self, task: str) -> TaskSpec: ...

        def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor: ...

    def _is_siamese(self, task: str) -> bool:
        return bool(getattr(self.heads[task], "siamese", False))

    @overload
    def encode(self, sentences: Mapping[str, Any]) -> tuple[Tensor, Tensor | None]: ...

    @overload
    def encode(
        self,
        sentences: str | Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
    ) -> Any: ...

    def encode(
        self,
        sentences: Mapping[str, Any] | str | Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
    ) -> Any:
        """Sentence embeddings of plain sentences, or the pooled vectors of a batch.

        Given sentences (a string or a list of them), as sentence-transformers' ``encode``: ``float32
        [N, d]`` in input order (``[d]`` for one string), pooled as the model pools; see the module
        docstring. Given a batch (a mapping with ``"task"``, as the data module makes them): ``(u, None)``,
        or ``(u, v)`` for a siamese pair, which is what :meth:`forward` calls and a subclass may override
        (an override for batches hands other inputs to ``super().encode``, so that sentences still work).

        Args:
            sentences: the sentences, or a batch.
            task: the task whose modules are active; ``None``: the shared encoder alone.
            batch_size: sentences per forward pass (the result does not depend on it).
            normalize_embeddings: scale every vector to unit length (cosine similarity = dot product).
            convert_to_numpy: a ``numpy`` array (else a list of tensors).
            convert_to_tensor: one tensor on the module's device (wins over ``convert_to_numpy``).

        Raises:
            PalUserError: for a task the model was not built with, a text that is not a string, or a
                ``batch_size`` below 1.
        """
        if isinstance(sentences, Mapping):
            return self._encode_batch(sentences)
        single = isinstance(sentences, str)
        texts = [sentences] if isinstance(sentences, str) else list(sentences)
        vectors = self._sentence_vectors(texts, task, batch_size)
        if normalize_embeddings:
            vectors = torch.nn.functional.normalize(vectors, p=2.0, dim=-1)
        if single:
            vectors = vectors[0]
        if convert_to_tensor:
            return vectors
        if convert_to_numpy:
            return vectors.cpu().numpy()
        return list(vectors)

    def _sentence_vectors(self, texts: list[Any], task: str | None, batch_size: int) -> Tensor:
        """``float32 [N, d]`` vectors of ``texts`` in input order, on the module's device."""
        if task is not None and task not in self.task_specs:
            raise PalUserError(
                f"Unknown task {task!r}: this model has {', '.join(self.task_specs)}. Pick one."
            )
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise PalUserError(f"encode takes sentences (strings), but input {bad} is {texts[bad]!r}.")
        if batch_size < 1:
            raise PalUserError(f"batch_size must be >= 1, got {batch_size}.")
        if not texts:
            return torch.zeros(0, self.encoder.hidden_size, device=self.device)
        # longest first, as sentence-transformers does: batches of similar length pad little
        order = np.argsort([-len(t) for t in texts], kind="stable")
        chunks: list[Tensor] = []
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(texts), batch_size):
                    tokens = self.tokenizer(
                        [texts[i] for i in order[start : start + batch_size]],
                        padding=True,
                        truncation=True,
                        max_length=int(self.predict_max_length),
                        return_tensors="pt",
                    )
                    ids, mask = tokens["input_ids"].to(self.device), tokens["attention_mask"].to(self.device)
                    chunks.append(self._pooled_sentences(ids, mask, task).float())
        finally:
            self.train(was_training)
        vectors = torch.cat(chunks)
        return vectors[torch.from_numpy(np.argsort(order)).to(vectors.device)]  # back to input order

    def _pooled_sentences(self, ids: Tensor, mask: Tensor, task: str | None) -> Tensor:
        """Pooled vectors of single sentences (token types all 0, the encoder's default)."""
        if task is None:  # no task's hooks are active outside a task's forward: the shared encoder
            hidden = self.encoder.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        else:
            hidden = self._encoder_call(ids, mask, None, task=task)
        return pool(hidden, mask, self.hparams["pooling"])

    def _encode_batch(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor | None]:
        """Pooled sentence vectors of a batch: ``(u, None)``, or ``(u, v)`` for a siamese pair.

        Siamese sentences are padded to one length and run through the encoder in
        one pass of ``2B`` sequences (padding does not change mean or CLS pooling).
        """
        task = batch[TASK]
        if self._is_siamese(task):
            return self._encode_siamese(batch, task)
        if INPUT_IDS not in batch:
            raise PalUserError(
                f"Task {task!r}: the model encodes pairs 'cross' but the batch is 'siamese'. "
                "Set the same pair_encoding for the model and the data."
            )
        mask = batch[ATTENTION_MASK]
        hidden = self._encoder_call(batch[INPUT_IDS], mask, batch.get(TOKEN_TYPE_IDS), task=task)
        pooled = pool(hidden, mask, self.hparams["pooling"])
        if not self.task_specs[task].is_pair:  # a cross pair's vector is not a sentence's
            self._capture_simcse_view(pooled)
        return pooled, None

    def _encode_siamese(self, batch: Mapping[str, Any], task: str) -> tuple[Tensor, Tensor]:
        """Both sentences of a siamese pair, padded to one length, in one encoder pass of ``2B`` sequences."""
        side_a, side_b = side_inputs(batch, "a"), side_inputs(batch, "b")
        if INPUT_IDS not in side_a:
            raise PalUserError(
                f"Task {task!r}: the model encodes pairs 'siamese' but the batch is 'cross'. "
                "Set the same pair_encoding for the model and the data."
            )
        stacked = concat_inputs([side_a, side_b])  # token_type_ids are optional
        mask = stacked[ATTENTION_MASK]
        hidden = self._encoder_call(stacked[INPUT_IDS], mask, stacked.get(TOKEN_TYPE_IDS), task=task)
        pooled = pool(hidden, mask, self.hparams["pooling"])
        self._capture_simcse_view(pooled)  # [a; b]: the sentence order SimCSE uses
        u, v = pooled.chunk(2)
        return u, v

    # ------------------------------------------------------------------ mixed batches
    def forward_mixed(self, batch: Mapping[str, Any]) -> dict[str, TaskRows]:
        """Each row's head output of a mixed batch (rows of several tasks, :mod:`pal_lightning.core.batch`),
        from one encoder pass with each row's own task's modules: ``{task: TaskRows(rows, output)}`` per
        task present, in the order tasks first appear. An evaluation view's rows go through its task's
        modules and head and are keyed by the view's name. The encoder runs eagerly (not compiled).

        Raises:
            PalUserError: for an unknown task, or a siamese task's row without its second sentence.
        """
        names = self._row_task_names(batch[TASKS])
        parents = {name: self._parent_task(name) for name in dict.fromkeys(names)}
        row_tasks = [parents[name] for name in names]
        second = None
        if any(self._is_siamese(task) for task in parents.values()):
            second = side_inputs(batch, "b")
            if INPUT_IDS not in second:
                raise PalUserError(
                    f"Task(s) {sorted({t for t in row_tasks if self._is_siamese(t)})} encode pairs 'siamese', but "
                    "the mixed batch has no second sentences (input_ids_b, attention_mask_b): build it with "
                    "pal_lightning.core.batch.mix_batches, or set pair_encoding: cross."
                )
        first = side_inputs(batch, "")
        return mixed_head_outputs(
            self.encoder, self.heads, self.hparams["pooling"], first, second, row_tasks, names
        )

    def mixed_losses(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        """Per task present in a labelled mixed batch, the loss of its rows (each task's own loss, as
        :meth:`compute_loss` gives it for a one-task batch of them).

        Raises:
            PalUserError: for a batch without labels, or as :meth:`forward_mixed`.
        """
        if LABELS not in batch:
            raise PalUserError("A mixed batch without labels has no loss: add 'labels' (one per row).")
        labels = torch.as_tensor(batch[LABELS])
        return {
            task: self.compute_loss(task, out.output, labels.to(out.rows.device)[out.rows])
            for task, out in self.forward_mixed(batch).items()
        }

    def _row_task_names(self, tasks: Any) -> list[str]:
        """Each row's task name from names or a ``LongTensor`` of indices into the model's tasks."""
        if not isinstance(tasks, Tensor):
            return [str(t) for t in tasks]
        known = self.encoder.task_names
        indices = tasks.tolist()
        bad = sorted({i for i in indices if not 0 <= i < len(known)})
        if bad:
            raise PalUserError(
                f"Task indices {bad} are out of range: this model's tasks are "
                f"{', '.join(f'{i}={n}' for i, n in enumerate(known))}."
            )
        return [known[i] for i in indices]

    def _parent_task(self, name: str) -> str:
        """The task whose modules and head serve rows named ``name`` (a view's task, else itself)."""
        self.spec_of(name)  # an unknown name: one message naming the model's tasks
        return str(self.eval_views[name].parent) if name in self.eval_views else name


def mixed_head_outputs(
    encoder: MultiTaskBert,
    heads: nn.ModuleDict,
    pooling: str,
    first: dict[str, Tensor],
    second: dict[str, Tensor] | None,
    row_tasks: Sequence[str],
    keys: Sequence[str] | None = None,
) -> dict[str, TaskRows]:
    """Each row's head output from one encoder pass with per-row task routing: ``{key: TaskRows}`` per key
    (``keys``: a name per row, default its task) in order of first appearance. ``first``: every row's
    sequence; ``second``: every row's second sentence, used for the rows of siamese heads only (their
    second sentences join the pass as extra rows). Shared by ``forward_mixed`` and the exported
    :class:`~pal_lightning.module.export.MixedTaskModel`."""
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
    mask = inputs[ATTENTION_MASK]
    hidden = encoder(inputs[INPUT_IDS], mask, inputs.get(TOKEN_TYPE_IDS), tasks=tasks)
    pooled = pool(hidden, mask, pooling)
    rows_of: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        rows_of.setdefault(key, []).append(i)
    second_row = {i: len(keys) + k for k, i in enumerate(siamese)}
    outputs: dict[str, TaskRows] = {}
    for key, rows in rows_of.items():
        task, index = tasks[rows[0]], torch.tensor(rows, device=pooled.device)
        u = pooled.index_select(0, index)
        if rows[0] in second_row:
            at = torch.tensor([second_row[i] for i in rows], device=pooled.device)
            outputs[key] = TaskRows(index, heads[task](u, pooled.index_select(0, at)))
        else:
            outputs[key] = TaskRows(index, heads[task](u))
    return outputs
