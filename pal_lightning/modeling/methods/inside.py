"""What the methods acting *inside* a layer share (LoRA, bottleneck adapters): the sites' widths, the
targets a config selects, per-site Linears, a per-site formula and a signature with the targets::

    site                                 in      out
    query, key, value, attention_output  d       d
    ffn_input                            d       d_ff
    ffn_output                           d_ff    d
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import SITES, AdapterMethod
from pal_lightning.modeling.methods.batched import BatchedModules, RowWeights
from pal_lightning.modeling.methods.config import AdapterConfig
from pal_lightning.modeling.methods.where import Where


def site_features(site: str, d: int, d_ff: int) -> tuple[int, int]:
    """``(in_features, out_features)`` of ``site`` in a layer of width ``d`` and FFN width ``d_ff``."""
    if site == "ffn_input":
        return d, d_ff
    if site == "ffn_output":
        return d_ff, d
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; the sites are {', '.join(SITES)}")
    return d, d


def check_targets(targets: Any) -> tuple[str, ...]:
    """``targets`` as a tuple of distinct site names; ``PalUserError`` for an empty or repeated selection, or
    a name that is not a site."""
    chosen = (targets,) if isinstance(targets, str) else tuple(targets)
    unknown = [t for t in chosen if t not in SITES]
    if unknown:
        raise PalUserError(
            f"Unknown adapter.targets {', '.join(map(repr, unknown))}. The sites are {', '.join(SITES)} "
            "(the attention's projections and the feed-forward block's input and output Linears)."
        )
    if not chosen or len(set(chosen)) != len(chosen):
        raise PalUserError(
            f"adapter.targets must name each site at most once and at least one, got {list(chosen)}. "
            f"Pick among {', '.join(SITES)}, or leave adapter.targets unset for the method's default."
        )
    return chosen


@dataclass(frozen=True)
class InsideConfig(AdapterConfig):
    """The options of a method on sites: the common ones and ``targets``."""

    targets: tuple[str, ...] | None = None
    """The sites it acts on, among ``query``, ``key``, ``value``, ``attention_output``, ``ffn_input`` and
    ``ffn_output``. ``None``: the method's default (``[query, value]`` for ``lora``, ``[attention_output,
    ffn_output]`` for ``houlsby``, ``[ffn_output]`` for ``pfeiffer``)."""

    def __post_init__(self) -> None:
        if self.targets is not None:
            object.__setattr__(self, "targets", _site_tuple(self.targets))
        super().__post_init__()


def _site_tuple(targets: Any) -> tuple[str, ...]:
    # a tuple in SITES order: hashable, and equal for equal selections however written (the method
    # checks the names)
    chosen = (targets,) if isinstance(targets, str) else targets
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(t, str) for t in chosen):
        raise PalUserError(
            f"adapter.targets must be a list of site names ({', '.join(SITES)}) or null (the method's "
            f"default), got {targets!r}."
        )
    order = {site: i for i, site in enumerate(SITES)}
    return tuple(sorted(chosen, key=lambda s: order.get(s, len(SITES))))


def positive_number(value: object) -> bool:
    """Whether ``value`` is a finite number above 0 (not a bool)."""
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def _site_linears(layers: Iterable[int], shapes: Mapping[str, tuple[int, int]], bias: bool) -> nn.ModuleDict:
    return nn.ModuleDict(
        {
            str(i): nn.ModuleDict({s: nn.Linear(*shape, bias=bias) for s, shape in shapes.items()})
            for i in layers
        }
    )


class SiteAdapter(nn.Module):
    """A task's module on sites (an :class:`~pal_lightning.modeling.methods.where.InsideModule`):
    ``down.<layer>.<site>`` and ``up.<layer>.<site>``, Linears of the ``(in, out)`` shapes given per site."""

    def __init__(
        self,
        layers: Iterable[int],
        down: Mapping[str, tuple[int, int]],
        up: Mapping[str, tuple[int, int]],
        bias: bool,
    ) -> None:
        super().__init__()
        self.layers: tuple[int, ...] = tuple(layers)
        self.sites: tuple[str, ...] = tuple(down)
        self.down = _site_linears(self.layers, down, bias)
        self.up = _site_linears(self.layers, up, bias)

    def pair(self, layer: int, site: str) -> tuple[nn.Linear, nn.Linear]:
        """``(down, up)`` of ``site`` in ``layer``."""
        down = cast(nn.ModuleDict, self.down[str(layer)])
        up = cast(nn.ModuleDict, self.up[str(layer)])
        return cast(nn.Linear, down[site]), cast(nn.Linear, up[site])


class BatchedSites(BatchedModules):
    """Every present task's :class:`SiteAdapter` at once on a mixed batch's rows (:class:`~pal_lightning.
    modeling.methods.batched.BatchedModules`; a task without a module: zero Linears, a zero delta):
    subclasses write ``delta`` with :meth:`down` and :meth:`up`, each one batched product over the rows."""

    def __init__(self, adapters: Sequence[SiteAdapter | None], rows: RowWeights) -> None:
        super().__init__(adapters, rows)
        self.sites: tuple[str, ...] = self._template.sites

    def _through(self, side: int, layer: int, site: str, x: torch.Tensor) -> torch.Tensor:
        if side == 0:
            self._rows.check(x, f"a site Linear of layer {layer}")
        linears = [None if a is None else a.pair(layer, site)[side] for a in self._tasks]
        return self._rows.linear(linears, x)

    def down(self, layer: int, site: str, x: torch.Tensor) -> torch.Tensor:
        """Each row through its task's ``down.<layer>.<site>``."""
        return self._through(0, layer, site, x)

    def up(self, layer: int, site: str, x: torch.Tensor) -> torch.Tensor:
        """Each row through its task's ``up.<layer>.<site>``."""
        return self._through(1, layer, site, x)


class InsideMethod(AdapterMethod):
    """A method whose per-task module acts on sites of the selected layers: subclasses set
    :attr:`default_targets`, register a subclass of :class:`InsideConfig` and give :meth:`site_weights`."""

    where = Where.INSIDE

    default_targets: tuple[str, ...] = ()
    """The sites a config with ``targets`` unset acts on."""

    def targets(self, config: AdapterConfig) -> tuple[str, ...]:
        """The sites ``config`` selects (its ``targets``, else :attr:`default_targets`), in
        :data:`~pal_lightning.modeling.methods.base.SITES` order."""
        targets = getattr(config, "targets", None)
        chosen = self.default_targets if targets is None else targets
        return tuple(s for s in SITES if s in chosen)

    def check(self, config: AdapterConfig) -> None:
        super().check(config)
        targets = getattr(config, "targets", None)
        if targets is not None:
            check_targets(targets)

    def site_shapes(self, config: AdapterConfig, encoder_config: Any) -> dict[str, tuple[int, int]]:
        """``(in_features, out_features)`` of each site ``config`` selects, in a layer of ``encoder_config``."""
        d, d_ff = int(encoder_config.hidden_size), int(encoder_config.intermediate_size)
        return {s: site_features(s, d, d_ff) for s in self.targets(config)}

    def site_weights(self, config: AdapterConfig, size: int, in_features: int, out_features: int) -> int:
        """Weight-matrix parameters at one site (``in_features`` -> ``out_features``) of one layer."""
        raise NotImplementedError(f"method {self.name!r} has no per-site formula")

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        per_layer = sum(
            self.site_weights(config, size, *site_features(s, d, d_ff)) for s in self.targets(config)
        )
        return k * per_layer

    def signature(self, config: AdapterConfig, size: int, layers: tuple[int, ...]) -> dict[str, Any]:
        signature = super().signature(config, size, layers)
        signature["targets"] = list(self.targets(config))
        return signature
