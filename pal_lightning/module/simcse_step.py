"""SimCSE as an auxiliary loss of the training step (:class:`~pal_lightning.modeling.simcse.SimCSEConfig`).

The task forward's pooled sentence vectors (with their dropout) serve as SimCSE's first view, so
SimCSE adds one forward/backward of the sentences (none in ``sup`` mode), not two: the module's
``encode`` hands its pooled vectors to :meth:`SimCSEStepMixin._capture_simcse_view` while the
training step captures.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from pal_lightning.core.batch import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import attached_trainer
from pal_lightning.modeling.heads import pool
from pal_lightning.modeling.simcse import SimCSEConfig, simcse_batch_loss
from pal_lightning.tasks.specs import TaskSpec

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from pal_lightning.modeling.encoder import MultiTaskBert

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object


class SimCSEStepMixin(_ModuleBase):
    """The SimCSE part of the module: which steps add it, its loss, and the reuse of the task's view."""

    simcse: SimCSEConfig | None
    task_specs: dict[str, TaskSpec]
    encoder: MultiTaskBert

    if TYPE_CHECKING:  # provided by the module

        def _spec(self, batch: Mapping[str, Any]) -> TaskSpec: ...

        def _is_siamese(self, task: str) -> bool: ...

    def _init_simcse(self) -> None:
        """Check the SimCSE setting against the heads (built by now) and set up the view capture."""
        if self.simcse is not None:
            self._check_simcse_pairs()
            self._check_simcse_dropout()
        # SimCSE reuses the training step's own sentence vectors as its first view (see training_step)
        self._simcse_capturing = False
        self._simcse_view: Tensor | None = None

    def _check_simcse_dropout(self) -> None:
        """Unsupervised SimCSE's two views differ only by the encoder's dropout: refuse an encoder whose
        dropout is off everywhere (ModernBERT's checkpoints set every rate to 0), where both views would
        be the same vector and the objective would only push different sentences apart."""
        assert self.simcse is not None
        if self.simcse.mode != "unsup":
            return
        if any(isinstance(m, nn.Dropout) and m.p > 0 for m in self.encoder.modules()):
            return
        rates = self.encoder.config.to_dict().items()  # dropout applied functionally (attention) counts too
        if any("dropout" in k and isinstance(v, (int, float)) and v > 0 for k, v in rates):
            return
        raise PalUserError(
            f"simcse.mode 'unsup' makes its two views of a sentence with the encoder's dropout, but every "
            f"dropout rate of this {self.encoder.family.name} encoder is 0, so both views would be the same. "
            "Use simcse.mode: sup (pairs as positives), or an encoder whose config sets dropout "
            "(e.g. a copy of the checkpoint with hidden_dropout_prob / mlp_dropout above 0)."
        )

    def _check_simcse_pairs(self) -> None:
        """Supervised SimCSE needs each sentence of a pair alone: refuse ``cross`` pairs for it."""
        assert self.simcse is not None
        if self.simcse.mode != "sup":
            return
        cross = [t for t in self.simcse.active_tasks(self.task_specs) if not self._is_siamese(t)]
        if cross:
            raise PalUserError(
                f"simcse mode 'sup' needs pair_encoding 'siamese' for {cross} (anchor and positive "
                "encoded alone); set --model.pair_encoding siamese (and the data's)."
            )

    def simcse_active(self, task: str) -> bool:
        """Whether this training step adds the SimCSE loss (configured, weight > 0, task and step chosen)."""
        cfg = self.simcse
        if cfg is None or cfg.weight == 0 or task not in cfg.active_tasks(self.task_specs):
            return False
        step = self.trainer.global_step if attached_trainer(self) is not None else 0
        return step % cfg.every_k_steps == 0

    @contextmanager
    def _simcse_view_capture(self, active: bool) -> Iterator[None]:
        """While inside, ``encode`` keeps its pooled sentence vectors as SimCSE's first view (if ``active``)."""
        self._simcse_capturing, self._simcse_view = active, None
        try:
            yield
        finally:
            self._simcse_capturing = False

    def _capture_simcse_view(self, pooled: Tensor) -> None:
        """Keep the training step's pooled sentence vectors for SimCSE (only while training_step asks)."""
        if self._simcse_capturing:
            self._simcse_view = pooled

    def _simcse_term(self, batch: Mapping[str, Any], batch_size: int) -> Tensor:
        """The weighted SimCSE loss this step adds, on the captured view (logged unweighted)."""
        assert self.simcse is not None
        view, self._simcse_view = self._simcse_view, None
        auxiliary = self.simcse_loss(batch, first_view=view)
        self.log("train/simcse_loss", auxiliary, batch_size=batch_size)
        return self.simcse.weight * auxiliary

    def simcse_loss(self, batch: Mapping[str, Any], first_view: Tensor | None = None) -> Tensor:
        """The SimCSE loss of a batch's sentences, with the batch's task active and the module's pooling.

        Dropout must be on (training mode) for unsupervised SimCSE: the two views differ only by it.
        ``first_view``: the batch's sentences already pooled by this step's task forward (see
        :func:`~pal_lightning.modeling.simcse.simcse_batch_loss`); ``None`` encodes both views here.
        """
        assert self.simcse is not None, "simcse_loss needs a SimCSEConfig (--model.simcse)"
        spec = self._spec(batch)
        mode = self.hparams["pooling"]
        encoder = self.encoder

        def encode(inputs: Mapping[str, Tensor]) -> Tensor:
            mask = inputs[ATTENTION_MASK]
            hidden = encoder(inputs[INPUT_IDS], mask, inputs.get(TOKEN_TYPE_IDS), task=spec.name)
            return pool(hidden, mask, mode)

        return simcse_batch_loss(encode, batch, spec, self.simcse, first_view=first_view)
