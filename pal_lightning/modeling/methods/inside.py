"""What the methods acting *inside* a layer share (LoRA, bottleneck adapters): the sites' widths, the
targets a config selects, a per-site parameter formula summed over sites and layers, and a signature
that records the targets. Site widths in every family::

    site                                 in      out
    query, key, value, attention_output  d       d
    ffn_input                            d       d_ff
    ffn_output                           d_ff    d
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import SITES, AdapterMethod
from pal_lightning.modeling.methods.where import Where

if TYPE_CHECKING:
    from pal_lightning.modeling.methods.config import AdapterConfig


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


class InsideMethod(AdapterMethod):
    """A method whose per-task module acts on sites of the selected layers (LoRA, bottleneck adapters).

    Subclasses set :attr:`default_targets` and :attr:`options` and give :meth:`site_weights`, the
    weight-matrix parameters of one site of one layer.
    """

    where = Where.INSIDE

    default_targets: tuple[str, ...] = ()
    """The sites a config with ``targets`` unset acts on."""

    options: tuple[str, ...] = ("targets",)
    """The method-specific :class:`AdapterConfig` fields this method reads (``targets``, ``alpha``,
    ``dropout``, ``reduction_factor``, ``nonlinearity``); the config refuses the others when set."""

    def targets(self, config: AdapterConfig) -> tuple[str, ...]:
        """The sites ``config`` selects (its ``targets``, else :attr:`default_targets`), in
        :data:`~pal_lightning.modeling.methods.base.SITES` order."""
        chosen = self.default_targets if config.targets is None else config.targets
        return tuple(s for s in SITES if s in chosen)

    def check(self, config: AdapterConfig) -> None:
        super().check(config)
        if config.targets is not None:
            check_targets(config.targets)

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
