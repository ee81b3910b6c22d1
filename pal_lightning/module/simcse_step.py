"""SimCSE as an auxiliary loss of the training step: the task forward's pooled sentence vectors serve as
its first view, so it adds one forward of the sentences (none in ``sup`` mode), not two."""

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
    """The SimCSE part of the module: which steps add it, its loss, the reuse of the task's view."""

    simcse: SimCSEConfig | None
    task_specs: dict[str, TaskSpec]
    encoder: MultiTaskBert

    if TYPE_CHECKING:  # provided by the module

        def _spec(self, batch: Mapping[str, Any]) -> TaskSpec: ...

        def _is_siamese(self, task: str) -> bool: ...

    def _init_simcse(self) -> None:
        if self.simcse is not None:
            self._check_simcse_pairs()
            self._check_simcse_dropout()
        self._simcse_capturing = False
        self._simcse_view: Tensor | None = None

    def _check_simcse_dropout(self) -> None:
        """Refuse unsupervised SimCSE on an encoder without dropout (its two views would be equal)."""
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
        """Refuse supervised SimCSE on ``cross`` pairs (it needs each sentence alone)."""
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
        """Whether this training step adds the SimCSE loss."""
        cfg = self.simcse
        if cfg is None or cfg.weight == 0 or task not in cfg.active_tasks(self.task_specs):
            return False
        step = self.trainer.global_step if attached_trainer(self) is not None else 0
        return step % cfg.every_k_steps == 0

    @contextmanager
    def _simcse_view_capture(self, active: bool) -> Iterator[None]:
        self._simcse_capturing, self._simcse_view = active, None
        try:
            yield
        finally:
            self._simcse_capturing = False

    def _capture_simcse_view(self, pooled: Tensor) -> None:
        if self._simcse_capturing:
            self._simcse_view = pooled

    def _simcse_term(self, batch: Mapping[str, Any], batch_size: int) -> Tensor:
        assert self.simcse is not None
        view, self._simcse_view = self._simcse_view, None
        auxiliary = self.simcse_loss(batch, first_view=view)
        self.log("train/simcse_loss", auxiliary, batch_size=batch_size)
        return self.simcse.weight * auxiliary

    def simcse_loss(self, batch: Mapping[str, Any], first_view: Tensor | None = None) -> Tensor:
        """The SimCSE loss of a batch's sentences (``first_view``: already pooled by the task forward)."""
        assert self.simcse is not None, "simcse_loss needs a SimCSEConfig (--model.simcse)"
        spec = self._spec(batch)
        mode = self.hparams["pooling"]
        encoder = self.encoder

        def encode(inputs: Mapping[str, Tensor]) -> Tensor:
            mask = inputs[ATTENTION_MASK]
            hidden = encoder(inputs[INPUT_IDS], mask, inputs.get(TOKEN_TYPE_IDS), task=spec.name)
            return pool(hidden, mask, mode)

        return simcse_batch_loss(encode, batch, spec, self.simcse, first_view=first_view)
