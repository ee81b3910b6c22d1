"""Bottleneck adapters per task (Houlsby et al., 2019; Pfeiffer et al., 2021): a targeted site's output
y (width n) becomes ``y + U act(D y + b_D) + b_U`` (D: [m, n], U: [n, m]), U starting at zero.
``houlsby`` acts after the attention and feed-forward outputs, ``pfeiffer`` (alias ``bottleneck``) after
the feed-forward output; m is ``size``, else ``round(d / 16)``; act is AdapterHub's per variant."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.nn.functional as F
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
from pal_lightning.modeling.methods.pals import init_like_bert

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DEFAULT_REDUCTION_FACTOR = 16.0
"""d / m when neither ``size`` nor ``reduction_factor`` is set (AdapterHub's default for both variants)."""

NONLINEARITIES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "swish": F.silu,
    "tanh": torch.tanh,
}
"""The non-linearities a bottleneck adapter may use between D and U, by name (swish is x·sigmoid(x))."""


@dataclass(frozen=True)
class BottleneckConfig(InsideConfig):
    """The options of ``houlsby`` and ``pfeiffer``/``bottleneck``: the common ones, ``targets``,
    ``reduction_factor`` and ``nonlinearity``; ``size`` is the bottleneck width m."""

    method: str = "pfeiffer"

    reduction_factor: float | None = None
    """d / m (m = ``round(hidden_size / reduction_factor)``); ``None``: 16, unless ``size`` sets m (set
    one of the two)."""

    nonlinearity: Literal["relu", "gelu", "swish", "tanh"] | None = None
    """The non-linearity between D and U; ``None``: ``swish`` for ``houlsby``, ``relu`` for ``pfeiffer``
    (AdapterHub's)."""


class BottleneckAdapter(SiteAdapter):
    """One task's bottleneck adapters in ``layers`` (an
    :class:`~pal_lightning.modeling.methods.where.InsideModule`): ``down.<layer>.<site>`` (D, ``[size, n]``)
    and ``up.<layer>.<site>`` (U, ``[n, size]``) with biases, n the site's output width (``widths``); U is
    zero unless ``init="random"``."""

    def __init__(
        self,
        layers: tuple[int, ...],
        widths: Mapping[str, int],
        size: int,
        nonlinearity: str = "relu",
        init: str = "zero",
    ) -> None:
        down = {s: (n, size) for s, n in widths.items()}
        super().__init__(layers, down, {s: (size, n) for s, n in widths.items()}, bias=True)
        self.nonlinearity = nonlinearity
        self._act = NONLINEARITIES[nonlinearity]
        self.reset_parameters(init)

    @torch.no_grad()
    def reset_parameters(self, init: str = "zero") -> None:
        """Weights N(0, 0.02), biases 0; with ``init="zero"`` U (weight and bias) is 0 so the delta is 0."""
        init_like_bert(self, zero=self.up if init == "zero" else None)

    def delta(self, layer: int, site: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``U act(D y)`` for the site Linear's output ``y`` (its input ``x`` is not read)."""
        down, up = self.pair(layer, site)
        return up(self._act(down(y)))


class BatchedBottleneck(BatchedSites):
    """Every present task's :class:`BottleneckAdapter` at once on the rows of a mixed batch
    (:class:`BatchedSites`); the tasks share the method's non-linearity."""

    def delta(self, layer: int, site: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's ``U act(D y)`` with its task's D and U."""
        template = cast(BottleneckAdapter, self._template)
        return self.up(layer, site, template._act(self.down(layer, site, y)))


class _Bottleneck(InsideMethod):
    """The bottleneck adapters: :class:`BottleneckAdapter` on the variant's sites."""

    size_at_768 = 48  # 768 / 16; the default is computed from reduction_factor (default_size)
    default_nonlinearity = "relu"
    signature_name = ""
    """The name the signature records (an alias records its method's, so weight files interchange)."""

    def default_size(self, config: AdapterConfig, hidden_size: int) -> int:
        factor = cast(BottleneckConfig, config).reduction_factor or DEFAULT_REDUCTION_FACTOR
        return max(1, math.floor(hidden_size / factor + 0.5))

    def nonlinearity(self, config: AdapterConfig) -> str:
        """The config's non-linearity, or the variant's default."""
        return cast(BottleneckConfig, config).nonlinearity or self.default_nonlinearity

    def check(self, config: AdapterConfig) -> None:
        super().check(config)
        own = cast(BottleneckConfig, config)
        factor, nonlinearity = own.reduction_factor, own.nonlinearity
        if factor is not None:
            if not positive_number(factor):
                raise PalUserError(
                    f"adapter.reduction_factor must be a positive number (the bottleneck width is "
                    f"hidden_size / reduction_factor), got {factor!r}. Leave it unset for "
                    f"{DEFAULT_REDUCTION_FACTOR:g}."
                )
            if config.size is not None:
                raise PalUserError(
                    f"adapter.size ({config.size}) and adapter.reduction_factor ({factor}) both set the "
                    "bottleneck width. Set one of them and leave the other unset."
                )
        if nonlinearity is not None and (
            not isinstance(nonlinearity, str) or nonlinearity not in NONLINEARITIES
        ):
            raise PalUserError(
                f"Unknown adapter.nonlinearity {nonlinearity!r}. Choose one of {', '.join(NONLINEARITIES)}."
            )

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module:
        widths = {s: out for s, (_, out) in self.site_shapes(config, encoder_config).items()}
        return BottleneckAdapter(layers, widths, size, self.nonlinearity(config), config.init)

    def site_weights(self, config: AdapterConfig, size: int, in_features: int, out_features: int) -> int:
        return 2 * out_features * size

    def batch_rows(self, modules: Sequence[nn.Module | None], rows: RowWeights) -> nn.Module | None:
        return batch_exactly(BottleneckAdapter, BatchedBottleneck, modules, rows)

    def signature(self, config: AdapterConfig, size: int, layers: tuple[int, ...]) -> dict[str, Any]:
        signature = super().signature(config, size, layers)
        signature["method"] = self.signature_name or self.name
        # fixes no shape, but the same weights compute another function under another non-linearity
        signature["nonlinearity"] = self.nonlinearity(config)
        return signature


class Houlsby(_Bottleneck):
    """``houlsby``: adapters after the attention output and the feed-forward output (``k 2 2 d m``)."""

    name = "houlsby"
    default_targets = ("attention_output", "ffn_output")
    default_nonlinearity = "swish"


class Pfeiffer(_Bottleneck):
    """``pfeiffer``: one adapter after the feed-forward output (``k 2 d m`` weights)."""

    name = "pfeiffer"
    default_targets = ("ffn_output",)
    default_nonlinearity = "relu"


class BottleneckAlias(Pfeiffer):
    """``bottleneck``: another name for ``pfeiffer`` (its signature says ``pfeiffer``)."""

    name = "bottleneck"
    signature_name = "pfeiffer"
