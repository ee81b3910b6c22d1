"""The configuration of a model's per-task modules (adapters): which method, and its options.

:class:`AdapterConfig` says *what* each task adds to the shared encoder; the method it names
(:mod:`pal_lightning.modeling.methods`) says how that is built, where it acts and what it costs. The
encoder resolves the config against a concrete shape with :meth:`AdapterConfig.resolved_size` and
:meth:`AdapterConfig.layer_indices`.

Default sizes follow Stickland & Murray (2019), scaled to the encoder width d by the ratio the paper uses
for BERT-base (d = 768)::

    method                       d_s at 768   default for width d
    pals, all layers             204          round(d * 204 / 768)   (102 for 384)
    pals, top/bottom half        276          round(d * 276 / 768)   (138 for 384)
    pals_no_sharing              84           round(d * 84 / 768)    (42 for 384)
    low_rank                     100          round(d * 100 / 768)   (50 for 384)
    pff (projected FFN)          204          round(d * 204 / 768)   (102 for 384)
    pa_on_top                    204          round(d * 204 / 768)   (102 for 384)
    bert_layer_on_top            -            (a full encoder layer of width d: no d_s)
    lora (rank r)                8            8 at every width (the rank does not scale)
    houlsby, pfeiffer (width m)  48           round(d / reduction_factor), factor 16 (24 for 384)

For the attention methods the result is then moved to the nearest multiple of ``num_heads`` (at least
``num_heads``), because the attention splits d_s into equal heads. Rounding is "half up", never Python's
banker's rounding.
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

    For PALs, inside a selected layer l for the active task t (docs/design.md §2)::

        h^{l+1} = LN2( h_att + FFN(h_att) + TS_t(h) ),   TS_t(h) = V^D_t g_{l,t}( V^E_t h )

    Raises:
        PalUserError: for an unknown method, placement or init, a non-positive size or head count, a
            ``size`` that ``num_heads`` does not divide, ``num_layers`` without top/bottom placement, or an
            option the method cannot honour or does not read (``alpha`` for PALs, ...).
    """

    method: str = "pals"
    """The method (:data:`pal_lightning.modeling.methods.METHODS`). ``"pals"``: V^E/V^D (d -> d_s -> d)
    shared by all layers of a task, plus a per-layer multi-head self-attention g in d_s.
    ``"pals_no_sharing"``: the same with V^E/V^D per layer. ``"low_rank"``: g = identity, V^E/V^D per
    layer. ``"pff"``: as ``"pals"`` with g a per-layer feed-forward network in d_s (``W_2 GELU(W_1 x)``,
    inner width ``3 d_s / 2`` so that it costs what the PAL attention costs). ``"pa_on_top"``: nothing
    inside the layers; after the last layer h becomes ``h + V^D_t B_t(V^E_t h)``, B_t a stack of projected
    attention blocks in d_s. ``"bert_layer_on_top"``: a whole encoder layer per task after the last layer.
    ``"lora"``: a low-rank update ``(alpha / r) B A`` of the ``targets`` projections of each layer
    (rank r = ``size``, 8 by default). ``"houlsby"``: bottleneck adapters after the attention output and
    after the feed-forward output of each layer; ``"pfeiffer"`` (also named ``"bottleneck"``): after the
    feed-forward output only (width m = ``size``, or d / ``reduction_factor``). ``"none"``: no
    task-specific module (the paper's "shared" baseline: only the heads differ)."""

    size: int | None = None
    """d_s, the width of the projected space. ``None`` picks the paper's size for the method scaled to
    the encoder width (204 for 768 and 102 for 384 with ``pals``; see the module docstring)."""

    num_heads: int = 6
    """Heads of the projected attention (the reference uses 6). Must divide ``size``. Unused by methods
    without attention (``low_rank``, ``pff``, ``none``)."""

    placement: Placement = "all"
    """Which layers get the module: ``"all"``, the ``"top"`` k or the ``"bottom"`` k layers. Must be
    ``"all"`` for the methods on top (``pa_on_top``, ``bert_layer_on_top``), which sit after the layers."""

    num_layers: int | None = None
    """k for ``placement="top"``/``"bottom"``; ``None`` means half of the layers (rounded up). Must be left
    ``None`` with ``placement="all"``."""

    init: InitKind = "zero"
    """``"zero"`` (default): V^D starts at zero, so the module adds 0 and step 0 is exactly the pretrained
    encoder; the other weights are N(0, 0.02). ``"random"``: every weight N(0, 0.02) as the reference code
    does. Biases start at zero in both cases. ``bert_layer_on_top`` has no V^D: ``"zero"`` copies the
    encoder's last (pretrained) layer into each task's top layer, the closest start to the pretrained
    encoder a full layer allows; ``"random"`` draws a fresh layer as the reference code does."""

    activation: ActivationKind = "none"
    """What follows V^D: ``"none"`` (default) adds V^D g(V^E h) as the equation states; ``"gelu"`` applies a
    GELU after V^D as the reference code does for PALs (GELU(0) = 0, so a zero V^D still starts at the
    pretrained encoder). Only for methods with a V^D (not ``none`` or ``bert_layer_on_top``). The bottleneck
    adapters' own non-linearity is ``nonlinearity``."""

    targets: tuple[str, ...] | None = None
    """The sites of each selected layer that ``lora``, ``houlsby`` and ``pfeiffer`` act on, among
    ``query``, ``key``, ``value``, ``attention_output`` (the attention's projections), ``ffn_input`` and
    ``ffn_output`` (the feed-forward block's Linears). ``None``: the method's default, ``[query, value]``
    for ``lora`` (the LoRA paper's), ``[attention_output, ffn_output]`` for ``houlsby`` and
    ``[ffn_output]`` for ``pfeiffer``. Only for those methods."""

    alpha: float | None = None
    """LoRA's scale numerator: the update ``B A x`` is multiplied by ``alpha / r`` (r = ``size``, the
    rank). ``None``: 8, the LoRA paper's and ``peft``'s default. Only for ``lora``."""

    dropout: float | None = None
    """Dropout probability on a LoRA site's input before A (training only). ``None``: 0, no dropout (the
    LoRA paper's GLUE runs and ``peft``'s default). Only for ``lora``."""

    reduction_factor: float | None = None
    """d / m for the bottleneck adapters (``houlsby``, ``pfeiffer``): the bottleneck width m is
    ``round(hidden_size / reduction_factor)``. ``None``: 16 (m = 48 at width 768), unless ``size`` sets
    m directly (set one of the two). Only for those methods."""

    nonlinearity: NonlinearityKind | None = None
    """The bottleneck adapters' non-linearity between their down and up projections: ``"relu"``,
    ``"gelu"``, ``"swish"`` (x sigmoid(x)) or ``"tanh"``. ``None``: the variant's default in AdapterHub's
    ``adapters``, ``"swish"`` for ``houlsby`` and ``"relu"`` for ``pfeiffer``. Only for those methods."""

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
