"""The configuration of a model's per-task modules (adapters): which method, and its options.

Default sizes follow Stickland & Murray (2019), scaled from BERT-base (d = 768) to the width d, half up:
``pals`` 204 (276 on half the layers), ``pals_no_sharing`` 84, ``low_rank`` 100, ``pff`` and ``pa_on_top``
204, each ``* d / 768`` (102 at 384), attention methods then to a multiple of ``num_heads``; ``lora``
rank 8 at every width; ``houlsby``/``pfeiffer`` ``d / 16`` (48 at 768); ``bert_layer_on_top`` none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import SITES, AdapterMethod
from pal_lightning.modeling.methods.registry import METHODS, get_method

Placement = Literal["all", "top", "bottom"]
InitKind = Literal["zero", "random"]
ActivationKind = Literal["none", "gelu"]
NonlinearityKind = Literal["relu", "gelu", "swish", "tanh"]

PLACEMENTS: tuple[str, ...] = ("all", "top", "bottom")
INITS: tuple[str, ...] = ("zero", "random")
ACTIVATIONS: tuple[str, ...] = ("none", "gelu")

METHOD_OPTIONS: dict[str, tuple[object, ...]] = {
    "targets": (None,),
    "alpha": (None,),
    "dropout": (None, 0.0),
    "reduction_factor": (None,),
    "nonlinearity": (None,),
}
"""The fields only some methods read (those listing them in their ``options``), with the values that
leave them unset (a dropout of 0 is no dropout for any method)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class AdapterConfig:
    """Which per-task module (adapter) each task adds to the shared encoder, and its options.

    Raises:
        PalUserError: for an unknown method, placement or init, a non-positive size or head count, a
            ``size`` that ``num_heads`` does not divide, ``num_layers`` without top/bottom placement, or an
            option the method cannot honour or does not read (``alpha`` for PALs, ...).
    """

    method: str = "pals"
    """The method (:data:`pal_lightning.modeling.methods.METHODS`): ``pals`` (V^E/V^D shared by a task's
    layers, a projected attention g per layer), ``pals_no_sharing`` (V^E/V^D per layer), ``low_rank`` (g
    the identity), ``pff`` (g a feed-forward network), ``pa_on_top`` (projected attention blocks after the
    last layer), ``bert_layer_on_top`` (a whole layer per task after the last), ``lora`` (rank ``size``
    updates of the ``targets``), ``houlsby`` and ``pfeiffer``/``bottleneck`` (bottleneck adapters), or
    ``none`` (only the heads differ: the paper's "shared" baseline)."""

    size: int | None = None
    """d_s, the width of the projected space (LoRA's rank, a bottleneck's width). ``None``: the method's
    default scaled to the encoder width (102 at 384 with ``pals``)."""

    num_heads: int = 6
    """Heads of the projected attention (the reference uses 6); must divide ``size``."""

    placement: Placement = "all"
    """Which layers get the module: ``"all"``, the ``"top"`` k or the ``"bottom"`` k (``"all"`` for the
    methods on top)."""

    num_layers: int | None = None
    """k for ``placement="top"``/``"bottom"``; ``None``: half of the layers, rounded up."""

    init: InitKind = "zero"
    """``"zero"``: the output projection (V^D, LoRA's B) starts at zero, so step 0 is the pretrained
    encoder (``bert_layer_on_top``: a copy of the last layer); ``"random"``: N(0, 0.02) as the reference
    code draws it."""

    activation: ActivationKind = "none"
    """What follows V^D: ``"none"`` (the equation as stated) or ``"gelu"`` (the reference code's PALs).
    Only for methods with a V^D."""

    targets: tuple[str, ...] | None = None
    """The sites ``lora``, ``houlsby`` and ``pfeiffer`` act on, among ``query``, ``key``, ``value``,
    ``attention_output``, ``ffn_input`` and ``ffn_output``. ``None``: the method's default (``[query,
    value]`` for ``lora``, ``[attention_output, ffn_output]`` for ``houlsby``, ``[ffn_output]`` for
    ``pfeiffer``)."""

    alpha: float | None = None
    """LoRA's scale numerator (the update is scaled by ``alpha / size``); ``None``: 8. Only for ``lora``."""

    dropout: float | None = None
    """Dropout on a LoRA site's input before A (training only); ``None``: 0. Only for ``lora``."""

    reduction_factor: float | None = None
    """d / m for ``houlsby`` and ``pfeiffer`` (m = ``round(hidden_size / reduction_factor)``); ``None``:
    16, unless ``size`` sets m (set one of the two)."""

    nonlinearity: NonlinearityKind | None = None
    """The bottleneck adapters' non-linearity (``relu``, ``gelu``, ``swish``, ``tanh``); ``None``:
    ``swish`` for ``houlsby``, ``relu`` for ``pfeiffer`` (AdapterHub's)."""

    def __post_init__(self) -> None:
        method = get_method(self.method)
        if self.targets is not None:
            object.__setattr__(self, "targets", _site_tuple(self.targets))
        _check_method_options(self, method)
        for name, value, allowed in (
            ("placement", self.placement, PLACEMENTS),
            ("init", self.init, INITS),
            ("activation", self.activation, ACTIVATIONS),
        ):
            if value not in allowed:
                raise PalUserError(f"Unknown adapter.{name} {value!r}. Choose one of {', '.join(allowed)}.")
        if not _is_int(self.num_heads) or self.num_heads < 1:
            raise PalUserError(f"adapter.num_heads must be a positive integer, got {self.num_heads!r}.")
        if self.size is not None and (not _is_int(self.size) or self.size < 1):
            raise PalUserError(
                f"adapter.size must be a positive integer or null (default size), got {self.size!r}."
            )
        if self.num_layers is not None:
            if not _is_int(self.num_layers) or self.num_layers < 1:
                raise PalUserError(
                    f"adapter.num_layers must be a positive integer or null (half), got {self.num_layers!r}."
                )
            if self.placement == "all":
                raise PalUserError(
                    f"adapter.num_layers={self.num_layers} only applies to placement 'top' or 'bottom', but "
                    "placement is 'all'. Set adapter.placement: top (or bottom), or leave num_layers unset."
                )
        method.check(self)

    @classmethod
    def coerce(cls, value: AdapterConfig | str | Any | None) -> AdapterConfig:
        """``value`` as a config: a config as it is, a method name, or a mapping of the fields (what a
        checkpoint's hyper-parameters and a YAML file hold); ``None`` gives the defaults.

        Raises:
            PalUserError: for anything else, or a mapping with unknown fields.
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(method=value)
        if hasattr(value, "items"):
            return cls().replace(**dict(value.items()))
        raise PalUserError(
            f"adapter must be a method name, a mapping of AdapterConfig fields or an AdapterConfig, got "
            f"{type(value).__name__}."
        )

    @property
    def adapter_method(self) -> AdapterMethod:
        """The registered method this config names."""
        return get_method(self.method)

    def resolved_size(self, hidden_size: int) -> int:
        """d_s for an encoder of width ``hidden_size`` (``size`` or the method's scaled default); 0 for a
        method without a projected space."""
        method = self.adapter_method
        if method.size_at_768 is None:
            return 0
        return self.size if self.size is not None else method.default_size(self, hidden_size)

    def layer_indices(self, num_hidden_layers: int) -> tuple[int, ...]:
        """The 0-based indices of the layers that get the module (empty unless the method acts beside
        the layers).

        Raises:
            PalUserError: when ``num_layers`` exceeds the encoder's depth.
        """
        return self.adapter_method.layer_indices(self, num_hidden_layers)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for metadata and hyper-parameters; ``targets`` as a list, which
        YAML and JSON write plainly)."""
        fields = asdict(self)
        if self.targets is not None:
            fields["targets"] = list(self.targets)
        return fields

    def replace(self, **changes: Any) -> AdapterConfig:
        """A copy with ``changes`` applied (and validated).

        Raises:
            PalUserError: for a field name that does not exist.
        """
        unknown = sorted(set(changes) - set(self.to_dict()))
        if unknown:
            raise PalUserError(
                f"Unknown adapter option(s) {unknown}. Known options: {', '.join(sorted(self.to_dict()))}."
            )
        return AdapterConfig(**{**self.to_dict(), **changes})


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


def _check_method_options(config: AdapterConfig, method: AdapterMethod) -> None:
    """Refuse a method-specific field set for a method that does not read it (naming those that do)."""
    reads = getattr(method, "options", ())
    for name, unset in METHOD_OPTIONS.items():
        value = getattr(config, name)
        if name in reads or value in unset:
            continue
        users = [m.name for m in METHODS.values() if name in getattr(m, "options", ())]
        raise PalUserError(
            f"adapter.{name} does not apply to method {method.name!r} (only to {', '.join(users) or 'none'}). "
            f"Leave adapter.{name} unset, or choose one of those methods."
        )


DEFAULT_ADAPTER = AdapterConfig()
"""The defaults: PALs of the paper's size beside every layer, starting at zero."""
