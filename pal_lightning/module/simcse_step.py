"""SimCSE as an auxiliary loss of the training step; the task forward's pooled vectors are its first view."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.simcse import SimCSEConfig, simcse_batch_loss
from pal_lightning.module.encoding import pooled
from pal_lightning.tasks.specs import TaskSpec

if TYPE_CHECKING:
    from pal_lightning.modeling.encoder import MultiTaskEncoder


def check_simcse(
    config: SimCSEConfig,
    specs: Mapping[str, TaskSpec],
    encoder: MultiTaskEncoder,
    siamese: Callable[[str], bool],
) -> None:
    """Refuse supervised SimCSE on ``cross`` pairs, and unsupervised SimCSE on an encoder without dropout."""
    cross = [t for t in config.active_tasks(specs) if not siamese(t)] if config.mode == "sup" else []
    if cross:
        raise PalUserError(
            f"simcse mode 'sup' needs pair_encoding 'siamese' for {cross} (anchor and positive "
            "encoded alone); set --model.pair_encoding siamese (and the data's)."
        )
    if config.mode != "unsup" or any(isinstance(m, nn.Dropout) and m.p > 0 for m in encoder.modules()):
        return
    rates = encoder.config.to_dict().items()  # dropout applied functionally (attention) counts too
    if any("dropout" in k and isinstance(v, (int, float)) and v > 0 for k, v in rates):
        return
    raise PalUserError(
        f"simcse.mode 'unsup' makes its two views of a sentence with the encoder's dropout, but every "
        f"dropout rate of this {encoder.family.name} encoder is 0, so both views would be the same. "
        "Use simcse.mode: sup (pairs as positives), or an encoder whose config sets dropout "
        "(e.g. a copy of the checkpoint with hidden_dropout_prob / mlp_dropout above 0)."
    )


def simcse_active(config: SimCSEConfig | None, specs: Mapping[str, TaskSpec], task: str, step: int) -> bool:
    """Whether the training step ``step`` of ``task`` adds the SimCSE loss."""
    if config is None or config.weight == 0 or task not in config.active_tasks(specs):
        return False
    return step % config.every_k_steps == 0


def simcse_loss(
    encoder: MultiTaskEncoder,
    pooling: str,
    spec: TaskSpec,
    config: SimCSEConfig,
    batch: Mapping[str, Any],
    first_view: Tensor | None = None,
) -> Tensor:
    """The SimCSE loss of a batch's sentences (``first_view``: already pooled by the task forward)."""
    return simcse_batch_loss(
        partial(pooled, encoder, pooling=pooling, task=spec.name), batch, spec, config, first_view=first_view
    )


class ViewCapture:
    """Keeps the pooled vectors of the task forward inside :meth:`capture` as SimCSE's first view."""

    def __init__(self) -> None:
        self.active = False
        self.view: Tensor | None = None

    @contextmanager
    def capture(self, active: bool) -> Iterator[None]:
        """Keep what :meth:`offer` gets inside the block (when ``active``)."""
        self.active, self.view = active, None
        try:
            yield
        finally:
            self.active = False

    def offer(self, pooled: Tensor) -> None:
        """A forward's pooled sentence vectors, kept while capturing."""
        if self.active:
            self.view = pooled

    def take(self) -> Tensor | None:
        """The kept view, forgotten."""
        view, self.view = self.view, None
        return view
