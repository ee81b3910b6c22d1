"""What a per-task method is: the questions the encoder, accounting, save/load and the CLI ask of it.

A *method* (an *adapter*: PALs, LoRA, a block on top, ...) is one :class:`AdapterMethod` object in the
registry; nothing else branches on its name. Where its module acts is its :attr:`AdapterMethod.where`;
a module that needs the pretrained weights at its start has ``start_from(last_layer)``, called after loading.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.batched import RowWeights
from pal_lightning.modeling.methods.where import Placement, Where

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pal_lightning.modeling.methods.config import AdapterConfig


#: The sites an ``INSIDE`` method may act on in every family's layers (a fused Q/K/V Linear is sliced).
SITES: tuple[str, ...] = ("query", "key", "value", "attention_output", "ffn_input", "ffn_output")


class AdapterMethod:
    """One per-task method: subclass it, set the class attributes, override what differs (the defaults:
    a projected space of width d_s beside the selected layers)."""

    name: str = ""
    """The name users write (``adapter.method: <name>``)."""

    where: Placement = Where.BESIDE
    """Where the per-task module acts (:mod:`~pal_lightning.modeling.methods.where`)."""

    size_at_768: int | None = None
    """d_s the literature uses at width 768; the default size scales it to the encoder's width
    (:meth:`default_size`). ``None``: the method has no projected space (``size`` must stay unset)."""

    headed: bool = False
    """Whether d_s is split into ``num_heads`` attention heads (which then shape the weights)."""

    has_up_projection: bool = False
    """Whether the output is a projection V^D that ``activation: gelu`` may follow."""

    starts_as_encoder: bool = True
    """Whether a new task's module (``init="zero"``) leaves the encoder's output unchanged."""

    def check(self, config: AdapterConfig) -> None:
        """Raise ``PalUserError`` (naming the option and the fix) for options this method cannot honour."""
        if config.activation != "none" and not self.has_up_projection:
            raise PalUserError(
                f"adapter.activation {config.activation!r} follows V^D, which method {self.name!r} does not "
                "have. Set adapter.activation: none, or use a method with a V^D."
            )
        if self.where is Where.TOP and config.placement != "all":
            raise PalUserError(
                f"Method {self.name!r} sits after the last layer, so adapter.placement {config.placement!r} "
                "does not apply. Set adapter.placement: all (and leave adapter.num_layers unset)."
            )
        if self.size_at_768 is None and config.size is not None and self.where is not Where.NOWHERE:
            raise PalUserError(
                f"adapter.size {config.size} does not apply to method {self.name!r} (it has no projected "
                "space). Leave adapter.size unset (null)."
            )
        if self.headed and config.size is not None and config.size % config.num_heads:
            raise PalUserError(
                f"adapter.size {config.size} is not divisible by adapter.num_heads {config.num_heads}: the "
                "attention splits d_s into equal heads. Pick a size that is a multiple of num_heads (or "
                "leave adapter.size unset for the default)."
            )

    def default_size(self, config: AdapterConfig, hidden_size: int) -> int:
        """d_s when ``config.size`` is unset: :attr:`size_at_768` scaled to ``hidden_size``, half up (never
        Python's banker's rounding), and to the nearest multiple of ``num_heads`` for a headed method.
        0 for a method without a projected space."""
        if self.size_at_768 is None:
            return 0
        ideal = hidden_size * self.size_at_768_for(config) / 768
        if not self.headed:
            return max(1, math.floor(ideal + 0.5))
        return config.num_heads * max(1, math.floor(ideal / config.num_heads + 0.5))

    def size_at_768_for(self, config: AdapterConfig) -> int:
        """The paper's d_s at width 768 for this configuration (some methods use another for half the
        layers)."""
        assert self.size_at_768 is not None
        return self.size_at_768

    def layer_indices(self, config: AdapterConfig, num_layers: int) -> tuple[int, ...]:
        """The 0-based layers that get the module (empty unless it acts in layers). Raises ``PalUserError``
        when the config's ``num_layers`` exceeds the encoder's depth."""
        if not self.where.in_layers:
            return ()
        if config.placement == "all":
            return tuple(range(num_layers))
        k = config.num_layers if config.num_layers is not None else math.ceil(num_layers / 2)
        if k > num_layers:
            raise PalUserError(
                f"adapter.num_layers={k} exceeds the encoder's {num_layers} layers. "
                f"Use at most {num_layers}, or adapter.placement: all."
            )
        return tuple(range(k)) if config.placement == "bottom" else tuple(range(num_layers - k, num_layers))

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module | None:
        """One task's module (``None``: none) for the encoder's ``transformers`` config, d_s = ``size``
        (resolved) and the ``layers`` it acts in (:meth:`layer_indices`)."""
        raise NotImplementedError(f"method {self.name!r} does not say how to build its module")

    def batch_rows(self, modules: Sequence[nn.Module | None], rows: RowWeights) -> nn.Module | None:
        """One module that acts for every row of a mixed batch sorted by task, as ``modules[k]`` acts on the
        rows of task ``k`` (``rows``: each row's ``k``, and products over the rows with each row's task's
        Linear; ``None`` in ``modules``: a task without a module, its rows unchanged), following
        the same protocol as a task's module (:attr:`where`). ``None`` (the default): the hooks loop over the
        tasks present, each module on its own slice of rows; a method overrides this to run them at once
        (docs/extending.md, "Mixed-task batches")."""
        return None

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        """Weight-matrix parameters one task adds (biases and LayerNorm vectors excluded), from the shapes
        alone: d the width, d_s = ``size``, k the layers it acts beside, d_ff the encoder's FFN width."""
        raise NotImplementedError(f"method {self.name!r} has no parameter formula")

    def signature(self, config: AdapterConfig, size: int, layers: tuple[int, ...]) -> dict[str, Any]:
        """The resolved options that fix the weights' shapes: equal signatures mean task weights fit."""
        signature: dict[str, Any] = {"method": self.name, "size": size, "layers": list(layers)}
        signature["num_heads"] = config.num_heads if self.headed else None
        if config.activation != "none":
            signature["activation"] = config.activation
        return signature


METHODS: dict[str, AdapterMethod] = {}
"""Every registered method by name, in registration order (the built-in ones: ``registry.py``)."""

CONFIGS: dict[str, type] = {}
"""The config dataclass of each method registered with one (the others take ``AdapterConfig``)."""


def register_method(
    method: AdapterMethod, *, config: type | None = None, replace: bool = False
) -> AdapterMethod:
    """Add ``method`` under ``method.name``, with ``config``, its options' dataclass (an ``AdapterConfig``
    subclass; ``None``: the common options only). Raises ``PalUserError`` for a method without a name, or a
    name already taken (unless ``replace``)."""
    if not method.name:
        raise PalUserError(f"{type(method).__name__} has no name: set the class attribute `name`.")
    if method.name in METHODS and not replace:
        raise PalUserError(
            f"A method named {method.name!r} is already registered. Pick another name, or pass replace=True."
        )
    METHODS[method.name] = method
    CONFIGS.pop(method.name, None)
    if config is not None:
        CONFIGS[method.name] = config
    return method


def get_method(name: str) -> AdapterMethod:
    """The method registered as ``name``; ``PalUserError`` naming the registered ones if none is."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise PalUserError(
            f"Unknown adapter method {name!r}. Choose one of {', '.join(METHODS)} "
            "(or register your own: docs/extending.md)."
        ) from None


def unregister_method(name: str) -> None:
    """Remove ``name`` from the registry (tests that register a method of their own)."""
    METHODS.pop(name, None)
    CONFIGS.pop(name, None)


class NoAdapter(AdapterMethod):
    """``none``: no task-specific module; only the heads differ between tasks (the paper's "shared")."""

    name = "none"
    where = Where.NOWHERE

    def build(
        self, config: AdapterConfig, encoder_config: PretrainedConfig, size: int, layers: tuple[int, ...]
    ) -> nn.Module | None:
        return None

    def weight_formula(self, config: AdapterConfig, d: int, size: int, k: int, d_ff: int) -> int:
        return 0
