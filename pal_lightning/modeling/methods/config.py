"""Configuration of the task-specific functions TS_t (PALs and their variants).

:class:`PALConfig` says *what* is added beside the pretrained layers; the
encoder (:mod:`pal_lightning.modeling.encoder`) resolves it against a concrete
BERT shape with :meth:`PALConfig.resolved_size` and
:meth:`PALConfig.layer_indices`.

Default sizes follow Stickland & Murray (2019), scaled to the encoder width d
by the ratio the paper uses for BERT-base (d = 768)::

    variant                      d_s at 768   default for width d
    pals, all layers             204          round(d * 204 / 768)   (102 for 384)
    pals, top/bottom half        276          round(d * 276 / 768)   (138 for 384)
    pals_no_sharing              84           round(d * 84 / 768)    (42 for 384)
    low_rank                     100          round(d * 100 / 768)   (50 for 384)
    pff (projected FFN)          204          round(d * 204 / 768)   (102 for 384)
    pa_on_top                    204          round(d * 204 / 768)   (102 for 384)
    bert_layer_on_top            -            (a full BERT layer of width d: no d_s)

Three variants are not PAL attention beside the layers: ``pa_on_top`` and ``bert_layer_on_top`` apply one
task-specific block after the last layer (see :mod:`pal_lightning.modeling.methods.on_top`), and ``pff`` replaces the
PAL attention g by a small feed-forward network (see :mod:`pal_lightning.modeling.methods.pals`). The sizes of
``pff`` and ``pa_on_top`` are the reference code's (``hidden_size_aug`` 204 in its PAL and top-attention
configs).

For the attention variants the result is then moved to the nearest multiple
of ``num_heads`` (at least ``num_heads``), because the PAL attention splits
d_s into equal heads. Rounding is "half up", never Python's banker's rounding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pal_lightning.core.errors import PalUserError

AdapterKind = Literal["pals", "pals_no_sharing", "low_rank", "pff", "pa_on_top", "bert_layer_on_top", "none"]
Placement = Literal["all", "top", "bottom"]
InitKind = Literal["zero", "random"]
ActivationKind = Literal["none", "gelu"]

ADAPTERS: tuple[str, ...] = (
    "pals",
    "pals_no_sharing",
    "low_rank",
    "pff",
    "pa_on_top",
    "bert_layer_on_top",
    "none",
)
PLACEMENTS: tuple[str, ...] = ("all", "top", "bottom")
INITS: tuple[str, ...] = ("zero", "random")
ACTIVATIONS: tuple[str, ...] = ("none", "gelu")

#: d_s the paper uses for BERT-base (d = 768), per variant; see the module docstring.
_PAPER_SIZE_AT_768: dict[str, int] = {
    "pals": 204,
    "pals_no_sharing": 84,
    "low_rank": 100,
    "pff": 204,
    "pa_on_top": 204,
}
_PAPER_HALF_PALS_AT_768 = 276
#: variants whose g is a multi-head attention inside the layers
_ATTENTION_ADAPTERS = ("pals", "pals_no_sharing")
#: variants whose d_s is split into attention heads (so d_s must be a multiple of num_heads)
_HEADED_ADAPTERS = ("pals", "pals_no_sharing", "pa_on_top")
#: variants applied once after the last layer instead of beside the layers
TOP_ADAPTERS: tuple[str, ...] = ("pa_on_top", "bert_layer_on_top")
#: variants with a V^D (d_s -> d) that ``activation`` may follow
_PROJECTED_ADAPTERS = ("pals", "pals_no_sharing", "low_rank", "pff", "pa_on_top")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class PALConfig:
    """Which task-specific function TS_t sits beside the selected BERT layers, and how big it is.

    Inside a selected layer l, for the active task t (docs/design.md §2)::

        h^{l+1} = LN2( h_att + FFN(h_att) + TS_t(h) ),   TS_t(h) = V^D_t g_{l,t}( V^E_t h )

    Raises:
        PalUserError: for an unknown adapter, placement or init, a non-positive size or head count, a
            ``pal_size`` that ``num_heads`` does not divide, or ``num_layers`` without top/bottom placement.
    """

    adapter: AdapterKind = "pals"
    """The variant. ``"pals"``: V^E/V^D (d -> d_s -> d) shared by all layers of a task, plus a per-layer
    multi-head self-attention g in d_s. ``"pals_no_sharing"``: the same with V^E/V^D per layer.
    ``"low_rank"``: g = identity, V^E/V^D per layer. ``"pff"``: as ``"pals"`` with g a per-layer feed-forward
    network in d_s (``W_2 GELU(W_1 x)``, inner width ``3 d_s / 2`` so that it costs what the PAL attention
    costs, 3 d_s^2 weights per layer). ``"pa_on_top"``: nothing inside the layers; after the last layer the
    encoder output h becomes ``h + V^D_t B_t(V^E_t h)``, B_t a stack of projected attention blocks in d_s
    (:mod:`pal_lightning.modeling.methods.on_top`). ``"bert_layer_on_top"``: a whole BERT layer per task after the last
    layer. ``"none"``: no task-specific function (the paper's "shared" baseline, only the heads differ
    between tasks)."""

    pal_size: int | None = None
    """d_s, the width of the projected space. ``None`` picks the paper's size for the variant scaled to
    the encoder width (204 for 768 and 102 for 384 with ``pals``; see the module docstring)."""

    num_heads: int = 6
    """Heads of the PAL attention g (the reference uses 6). Must divide ``pal_size``. Unused by
    ``low_rank`` and ``none``."""

    placement: Placement = "all"
    """Which layers get TS_t: ``"all"``, the ``"top"`` k or the ``"bottom"`` k layers. Must be ``"all"`` for
    the variants on top (``pa_on_top``, ``bert_layer_on_top``), which sit after the layers."""

    num_layers: int | None = None
    """k for ``placement="top"``/``"bottom"``; ``None`` means half of the layers (rounded up). Must be left
    ``None`` with ``placement="all"``."""

    init: InitKind = "zero"
    """``"zero"`` (default): V^D starts at zero, so TS_t = 0 and step 0 is exactly the pretrained encoder;
    the other weights are N(0, 0.02). ``"random"``: every weight N(0, 0.02) as the reference code does, so
    the model does not start as the pretrained encoder. Biases start at zero in both cases.
    ``bert_layer_on_top`` has no V^D: ``"zero"`` copies the encoder's last (pretrained) layer into each task's
    top layer, the closest start to the pretrained encoder a full layer allows (the copy has seen the
    pretraining; a fresh layer would scramble the pretrained features the heads read at step 0);
    ``"random"`` draws a fresh BERT layer (N(0, 0.02) weights, unit LayerNorms) as the reference code does."""

    activation: ActivationKind = "none"
    """What follows V^D: ``"none"`` (default) adds V^D g(V^E h) as the equation states; ``"gelu"`` applies a
    GELU after V^D as the reference code does for PALs (GELU(0) = 0, so a zero V^D still starts at the
    pretrained encoder). Only for variants with a V^D (not ``none`` or ``bert_layer_on_top``). The reference's
    low-rank layer has its GELU between V^E and V^D instead; here ``"gelu"`` means after V^D for every
    variant, so that one switch measures one thing."""

    def __post_init__(self) -> None:
        if self.adapter not in ADAPTERS:
            raise PalUserError(f"Unknown adapter {self.adapter!r}. Choose one of {', '.join(ADAPTERS)}.")
        if self.placement not in PLACEMENTS:
            raise PalUserError(
                f"Unknown PAL placement {self.placement!r}. Choose one of {', '.join(PLACEMENTS)}."
            )
        if self.init not in INITS:
            raise PalUserError(f"Unknown PAL init {self.init!r}. Choose one of {', '.join(INITS)}.")
        if self.activation not in ACTIVATIONS:
            raise PalUserError(
                f"Unknown pal_activation {self.activation!r}. Choose one of {', '.join(ACTIVATIONS)}."
            )
        if self.activation != "none" and self.adapter not in _PROJECTED_ADAPTERS:
            raise PalUserError(
                f"pal_activation {self.activation!r} follows V^D, which adapter {self.adapter!r} does not have. "
                f"Set pal_activation: none, or use one of {', '.join(_PROJECTED_ADAPTERS)}."
            )
        if self.adapter in TOP_ADAPTERS and self.placement != "all":
            raise PalUserError(
                f"Adapter {self.adapter!r} sits after the last layer, so pal_placement {self.placement!r} does "
                "not apply. Set pal_placement: all (and leave pal_num_layers unset)."
            )
        if self.adapter == "bert_layer_on_top" and self.pal_size is not None:
            raise PalUserError(
                f"pal_size {self.pal_size} does not apply to adapter 'bert_layer_on_top' (a full BERT layer of "
                "the encoder's width). Leave pal_size unset (null)."
            )
        if not _is_int(self.num_heads) or self.num_heads < 1:
            raise PalUserError(f"PAL num_heads must be a positive integer, got {self.num_heads!r}.")
        if self.pal_size is not None:
            if not _is_int(self.pal_size) or self.pal_size < 1:
                raise PalUserError(
                    f"pal_size must be a positive integer or None (default size), got {self.pal_size!r}."
                )
            if self.adapter in _HEADED_ADAPTERS and self.pal_size % self.num_heads:
                raise PalUserError(
                    f"pal_size {self.pal_size} is not divisible by num_heads {self.num_heads}: the PAL "
                    "attention splits d_s into equal heads. Pick a pal_size that is a multiple of num_heads "
                    "(or leave pal_size unset for the default)."
                )
        if self.num_layers is not None:
            if not _is_int(self.num_layers) or self.num_layers < 1:
                raise PalUserError(
                    f"PAL num_layers must be a positive integer or None (half), got {self.num_layers!r}."
                )
            if self.placement == "all":
                raise PalUserError(
                    f"PAL num_layers={self.num_layers} only applies to placement 'top' or 'bottom', but "
                    "placement is 'all'. Set placement='top' (or 'bottom'), or leave num_layers unset."
                )

    @property
    def has_attention(self) -> bool:
        """Whether g is a multi-head attention (``pals``, ``pals_no_sharing``) rather than the identity."""
        return self.adapter in _ATTENTION_ADAPTERS

    @property
    def shares_projections(self) -> bool:
        """Whether V^E/V^D are shared by all layers of a task (``pals`` and ``pff``)."""
        return self.adapter in ("pals", "pff")

    @property
    def on_top(self) -> bool:
        """Whether the variant is one block after the last layer (``pa_on_top``, ``bert_layer_on_top``)."""
        return self.adapter in TOP_ADAPTERS

    @property
    def in_layers(self) -> bool:
        """Whether the variant adds TS_t inside the selected layers (``pals``, ..., ``pff``)."""
        return self.adapter not in TOP_ADAPTERS and self.adapter != "none"

    def resolved_size(self, hidden_size: int) -> int:
        """d_s for an encoder of width ``hidden_size`` (``pal_size`` or the scaled paper default).

        Returns 0 for ``adapter="none"`` and ``"bert_layer_on_top"`` (no projected space).
        """
        if self.adapter in ("none", "bert_layer_on_top"):
            return 0
        if self.pal_size is not None:
            return self.pal_size
        at_768 = _PAPER_SIZE_AT_768[self.adapter]
        if self.adapter == "pals" and self.placement != "all":
            at_768 = _PAPER_HALF_PALS_AT_768
        ideal = hidden_size * at_768 / 768
        if self.adapter not in _HEADED_ADAPTERS:
            return max(1, math.floor(ideal + 0.5))
        # nearest multiple of num_heads, half up, at least one head wide
        return self.num_heads * max(1, math.floor(ideal / self.num_heads + 0.5))

    def layer_indices(self, num_hidden_layers: int) -> tuple[int, ...]:
        """The 0-based indices of the layers that get TS_t (empty for ``none`` and the variants on top).

        Raises:
            PalUserError: when ``num_layers`` exceeds the encoder's depth.
        """
        if not self.in_layers:
            return ()
        if self.placement == "all":
            return tuple(range(num_hidden_layers))
        k = self.num_layers if self.num_layers is not None else math.ceil(num_hidden_layers / 2)
        if k > num_hidden_layers:
            raise PalUserError(
                f"PAL num_layers={k} exceeds the encoder's {num_hidden_layers} layers. "
                f"Use at most {num_hidden_layers}, or placement='all'."
            )
        if self.placement == "bottom":
            return tuple(range(k))
        return tuple(range(num_hidden_layers - k, num_hidden_layers))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for metadata and hyper-parameters)."""
        return asdict(self)

    def replace(self, **changes: Any) -> PALConfig:
        """A copy with ``changes`` applied (and validated).

        Raises:
            PalUserError: for a field name that does not exist.
        """
        unknown = sorted(set(changes) - set(self.to_dict()))
        if unknown:
            raise PalUserError(
                f"Unknown PAL option(s) {unknown}. Known options: {', '.join(sorted(self.to_dict()))}."
            )
        return PALConfig(**{**self.to_dict(), **changes})
