"""The configuration of a model's per-task modules (adapters): which method, and its options
(:class:`AdapterConfig`; a method with options of its own has a subclass, which ``AdapterConfig(method=...)``
builds). Default sizes follow Stickland & Murray (2019), scaled from BERT-base (d = 768) to the width d, half up:
``pals`` 204 (276 on half the layers), ``pals_no_sharing`` 84, ``low_rank`` 100, ``pff`` and ``pa_on_top``
204, each ``* d / 768`` (102 at 384), attention methods then to a multiple of ``num_heads``; ``lora``
rank 8 at every width; ``houlsby``/``pfeiffer`` ``d / 16`` (48 at 768); ``bert_layer_on_top`` none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import CONFIGS, METHODS, AdapterMethod, get_method

Placement = Literal["all", "top", "bottom"]
InitKind = Literal["zero", "random"]
ActivationKind = Literal["none", "gelu"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def config_class(method: str) -> type[AdapterConfig]:
    """The options' dataclass of the registered ``method`` (``PalUserError`` for an unregistered one)."""
    get_method(method)
    return CONFIGS.get(method, AdapterConfig)


def option_names(method: str) -> tuple[str, ...]:
    """The options ``adapter`` accepts with ``method`` (its config's fields)."""
    return tuple(f.name for f in fields(config_class(method)))


def _set(value: Any) -> bool:
    return value is not None and (isinstance(value, bool) or value != 0)


def _check_known(method: str, options: Mapping[str, Any]) -> type[AdapterConfig]:
    cls = config_class(method)
    accepted = option_names(method)
    foreign = [k for k in options if k not in accepted]
    if foreign:
        users = [m for m in METHODS if foreign[0] in option_names(m)]
        if not users:
            raise PalUserError(
                f"Unknown adapter option adapter.{foreign[0]}: no registered method has it. Check its spelling: the "
                f"options of method {method!r} are {', '.join(accepted)}."
            )
        raise PalUserError(
            f"adapter.{foreign[0]} does not apply to method {method!r} ({foreign[0]} is an option of "
            f"{', '.join(users)}). Its options are {', '.join(accepted)}: leave adapter.{foreign[0]} unset, "
            "or choose a method that has it."
        )
    return cls


@dataclass(frozen=True)
class AdapterConfig:
    """Which per-task module (adapter) each task adds to the shared encoder, and the options every method
    reads. ``AdapterConfig(method=name, **options)`` gives the method's own subclass (``LoraConfig``, ...).
    Raises ``PalUserError`` for an unknown method or value, or an option the method does not have."""

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

    def __new__(cls, *args: Any, **options: Any) -> AdapterConfig:
        # AdapterConfig(method=...) dispatches to the method's own class; copy and pickle call cls.__new__(cls)
        method = options.get("method", args[0] if args else None)
        if method is None:
            return object.__new__(cls)
        target = _check_known(method, options)
        return object.__new__(target if cls is AdapterConfig else cls)

    def __post_init__(self) -> None:
        method = get_method(self.method)
        if type(self) is not config_class(self.method):
            raise PalUserError(
                f"{type(self).__name__} is not the config of method {self.method!r}. Use "
                f"AdapterConfig(method={self.method!r}, ...), which picks {config_class(self.method).__name__}."
            )
        for name, kind in (("placement", Placement), ("init", InitKind), ("activation", ActivationKind)):
            value, allowed = getattr(self, name), get_args(kind)
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
    def coerce(cls, value: AdapterSpec) -> AdapterConfig:
        """``value`` as the chosen method's config: a config as it is, a method name, a mapping of its
        options (YAML, the command line, a checkpoint), or ``None`` (the defaults). Another method's option
        left null or 0 is dropped (earlier versions saved every method's). Raises ``PalUserError`` for
        anything else, or an option the chosen method does not have."""
        if value is None:
            return AdapterConfig()
        if isinstance(value, AdapterConfig):
            return value
        if isinstance(value, str):
            return AdapterConfig(method=value)
        if isinstance(value, Mapping):
            # jsonargparse 4.53 hands `--model.adapter.size null` over as the string "None"
            options: dict[str, Any] = {k: None if v == "None" else v for k, v in value.items()}
            method = options.setdefault("method", "pals")
            known = {name for m in METHODS for name in option_names(m)}
            accepted = option_names(method)
            return AdapterConfig(
                **{k: v for k, v in options.items() if k in accepted or k not in known or _set(v)}
            )
        raise PalUserError(
            f"adapter must be a method name, a mapping of its options or an AdapterConfig, got "
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
        """The 0-based layers that get the module (:meth:`AdapterMethod.layer_indices`)."""
        return self.adapter_method.layer_indices(self, num_hidden_layers)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict, tuples as lists (for metadata and hyper-parameters)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def replace(self, **changes: Any) -> AdapterConfig:
        """A copy with ``changes`` applied and validated (a new ``method`` drops the old one's own options).
        Raises ``PalUserError`` for an option that no registered method, or the method, has."""
        known = {name for m in METHODS for name in option_names(m)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise PalUserError(
                f"Unknown adapter option(s) {unknown}. Known options: {', '.join(sorted(known))}."
            )
        common = {f.name for f in fields(AdapterConfig)}
        kept = {k: v for k, v in self.to_dict().items() if k in common or "method" not in changes}
        return AdapterConfig.coerce({**kept, **changes})


if TYPE_CHECKING:
    AdapterSpec = AdapterConfig | Mapping[str, Any] | str | None
else:  # what the command line parses: a method's options as a mapping (dotted keys, layered YAML), or its name
    AdapterSpec = dict[str, Any] | str | None
"""What ``adapter`` arguments take: an :class:`AdapterConfig`, a mapping of the method's options, a method
name, or ``None`` (the defaults)."""
