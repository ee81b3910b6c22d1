"""What the methods acting *inside* a layer share (LoRA, bottleneck adapters): the sites' widths, the
targets a config selects, a per-site parameter formula summed over sites and layers, and a signature
that records the targets. Site widths in every family::

    site                                 in      out
    query, key, value, attention_output  d       d
    ffn_input                            d       d_ff
    ffn_output                           d_ff    d
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import SITES, AdapterMethod
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


def encoder_widths(encoder_config: Any) -> tuple[int, int]:
    """``(d, d_ff)``: ``hidden_size`` and ``intermediate_size`` of an encoder config (every family's
    normalised config has both)."""
    return int(encoder_config.hidden_size), int(encoder_config.intermediate_size)


def check_targets(targets: Any) -> tuple[str, ...]:
    """``targets`` as a tuple of distinct site names.

    Raises:
        PalUserError: for an empty or repeated selection, or a name that is not a site (naming them).
    """
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
    """``targets`` (a list from YAML or JSON, a tuple, or one name) as a tuple in SITES order: hashable,
    and equal for equal selections however they were written. The method checks the names.

    Raises:
        PalUserError: for a value that is not a list of strings.
    """
    chosen = (targets,) if isinstance(targets, str) else targets
    if not isinstance(chosen, (list, tuple)) or not all(isinstance(t, str) for t in chosen):
        raise PalUserError(
            f"adapter.targets must be a list of site names ({', '.join(SITES)}) or null (the method's "
            f"default), got {targets!r}."
        )
    order = {site: i for i, site in enumerate(SITES)}
    return tuple(sorted(chosen, key=lambda s: order.get(s, len(SITES))))


class InsideMethod(AdapterMethod):
    """A method whose per-task module acts on sites of the selected layers (LoRA, bottleneck adapters).

    Subclasses set :attr:`default_targets`, are registered with a subclass of :class:`InsideConfig`, and give :meth:`site_weights`, the
    weight-matrix parameters of one site of one layer.
    """

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

    def site_weights(self, config: AdapterConfig, size: int, in_features: int, out_features: int) -> int:
        """Weight-matrix parameters at one site of one layer whose Linear maps ``in_features`` to
        ``out_features``."""
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
