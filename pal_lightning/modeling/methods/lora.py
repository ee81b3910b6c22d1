"""LoRA per task (Hu et al., 2021): a targeted site's output ``y = W x + b`` becomes
``y + (alpha / r) B A dropout(x)`` (A: [r, in], B: [out, r]; B starts at zero, A as ``peft`` draws it).
Defaults are the paper's GLUE runs and ``peft``'s: r = 8 at any width, alpha = 8, no dropout, targets
query and value. The update is linear in x: ``merge`` folds :meth:`LoraAdapter.weight_delta` in."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.batched import RowWeights, batch_exactly
from pal_lightning.modeling.methods.config import AdapterConfig
from pal_lightning.modeling.methods.inside import (
    BatchedSites,
    InsideConfig,
    InsideMethod,
    SiteAdapter,
    positive_number,
)
from pal_lightning.modeling.methods.pals import INIT_STD

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DEFAULT_RANK = 8
"""r when ``size`` is unset (the LoRA paper's GLUE runs; ``peft``'s default)."""

DEFAULT_ALPHA = 8.0
"""alpha when ``alpha`` is unset (the LoRA paper's GLUE runs; ``peft``'s default): scale alpha / r = 1."""


@dataclass(frozen=True)
class LoraConfig(InsideConfig):
    """``lora``'s options: the common ones, ``targets`` (default ``[query, value]``), ``alpha`` and
    ``dropout``; ``size`` is the rank r (default 8 at every width)."""

    method: str = "lora"

    alpha: float | None = None
    """The scale numerator (the update is scaled by ``alpha / size``); ``None``: 8."""

    dropout: float | None = None
    """Dropout on a site's input before A (training only); ``None``: 0."""


class LoraAdapter(SiteAdapter):
    """One task's LoRA in ``layers`` (a :class:`~pal_lightning.modeling.methods.where.MergeableModule`):
    ``down.<layer>.<site>`` (A, ``[rank, in]``) and ``up.<layer>.<site>`` (B, ``[out, rank]``), no biases,
    for each site of ``features`` (its Linear's ``(in, out)``); B is zero unless ``init="random"``."""

    def __init__(
        self,
        layers: tuple[int, ...],
        features: Mapping[str, tuple[int, int]],
        rank: int,
        alpha: float,
        dropout: float = 0.0,
        init: str = "zero",
    ) -> None:
        down = {s: (n_in, rank) for s, (n_in, _) in features.items()}
        super().__init__(layers, down, {s: (rank, n_out) for s, (_, n_out) in features.items()}, bias=False)
        self.rank = rank
        self.scaling = alpha / rank
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters(init)

    @torch.no_grad()
    def reset_parameters(self, init: str = "zero") -> None:
        """A Kaiming-uniform (``nn.Linear``'s own draw, a = sqrt(5)); B zero, or N(0, 0.02) for ``"random"``."""
        for a in self.down.modules():
            if isinstance(a, nn.Linear):
                nn.init.kaiming_uniform_(a.weight, a=math.sqrt(5))
        for b in self.up.modules():
            if isinstance(b, nn.Linear):
                if init == "random":
                    nn.init.normal_(b.weight, mean=0.0, std=INIT_STD)
                else:
                    nn.init.zeros_(b.weight)

    def delta(self, layer: int, site: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(alpha / r) B A dropout(x)`` for the site Linear's input ``x`` (its output ``y`` is not read)."""
        a, b = self.pair(layer, site)
        return b(a(self.dropout(x))) * self.scaling

    def weight_delta(self, layer: int, site: str) -> torch.Tensor:
        """``(alpha / r) B A``, ``[out, in]``: what ``merge`` adds to the site Linear's weight."""
        a, b = self.pair(layer, site)
        return (b.weight @ a.weight) * self.scaling


class BatchedLora(BatchedSites):
    """Every present task's :class:`LoraAdapter` at once on the rows of a mixed batch (:class:`BatchedSites`)."""

    def delta(self, layer: int, site: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's ``(alpha / r) B A dropout(x)`` with its task's A and B."""
        template = cast(LoraAdapter, self._template)
        return self.up(layer, site, self.down(layer, site, template.dropout(x))) * template.scaling


class LoraMethod(InsideMethod):
    """``lora``: :class:`LoraAdapter` on the targeted sites: ``k sum_sites r (in + out)`` weights."""

    name = "lora"
    size_at_768 = DEFAULT_RANK
    default_targets = ("query", "value")

    def default_size(self, config: AdapterConfig, hidden_size: int) -> int:
        # the rank is a property of the update, not of the width: the paper keeps r = 8 at 768 and 1024
        return DEFAULT_RANK

    def alpha(self, config: AdapterConfig) -> float:
        """The config's alpha, or :data:`DEFAULT_ALPHA`."""
        alpha = cast(LoraConfig, config).alpha
        return DEFAULT_ALPHA if alpha is None else float(alpha)

    def check(self, config: AdapterConfig) -> None:
        super().check(config)
        own = cast(LoraConfig, config)
        alpha, dropout = own.alpha, own.dropout
        if alpha is not None and not positive_number(alpha):
            raise PalUserError(
                f"adapter.alpha must be a positive number (the update is scaled by alpha / rank), got {alpha!r}. "
                f"Leave it unset for {DEFAULT_ALPHA:g}."
            )
        if dropout is not None and (
            isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1
        ):
            raise PalUserError(
                f"adapter.dropout must be a probability in [0, 1) (dropout on a LoRA site's input), got "
                f"{dropout!r}. Use 0 for none."
            )

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        dropout = cast(LoraConfig, config).dropout or 0.0
        shapes = self.site_shapes(config, encoder_config)
        return LoraAdapter(layers, shapes, size, self.alpha(config), dropout, config.init)

    def site_weights(self, config: AdapterConfig, size: int, in_features: int, out_features: int) -> int:
        return size * (in_features + out_features)

    def batch_rows(self, modules: Sequence[nn.Module | None], rows: RowWeights) -> nn.Module | None:
        return batch_exactly(LoraAdapter, BatchedLora, modules, rows)

    def signature(self, config: AdapterConfig, size: int, layers: tuple[int, ...]) -> dict[str, Any]:
        signature = super().signature(config, size, layers)
        # alpha fixes no shape, but the same A and B mean another update under another alpha
        signature["alpha"] = self.alpha(config)
        return signature
