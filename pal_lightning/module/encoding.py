"""Sentence vectors of a batch: one sequence per example, or each side of a siamese pair alone.

How a pair task is encoded is decided per task by its head (``cross``: both sentences in one sequence;
``siamese``: each sentence alone, :mod:`pal_lightning.modeling.pair_heads`), and a batch must be laid out
the same way (the data module's ``pair_encoding``); a mismatch is one clear error, not a shape error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from pal_lightning.core.batch import (
    ATTENTION_MASK,
    INPUT_IDS,
    TASK,
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

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object


class PairEncodingMixin(_ModuleBase):
    """:meth:`encode`: the pooled vectors of a batch, through the module's (maybe compiled) encoder."""

    heads: nn.ModuleDict
    task_specs: dict[str, TaskSpec]
    _encoder_call: EncoderCall

    if TYPE_CHECKING:  # provided by the module

        def _capture_simcse_view(self, pooled: Tensor) -> None: ...

    def _is_siamese(self, task: str) -> bool:
        return bool(getattr(self.heads[task], "siamese", False))

    def encode(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor | None]:
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
