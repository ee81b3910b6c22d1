"""The registry of per-task methods: name -> :class:`~pal_lightning.modeling.methods.base.AdapterMethod`.

The built-in methods are registered here, one line each, so any import of the registry sees them all; a
user's method is one :func:`register_method` call in their own code.
"""

from __future__ import annotations

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.base import AdapterMethod, NoAdapter
from pal_lightning.modeling.methods.bottleneck import BottleneckAlias, Houlsby, Pfeiffer
from pal_lightning.modeling.methods.lora import LoraMethod
from pal_lightning.modeling.methods.on_top import BertLayerOnTopMethod, ProjectedAttentionOnTopMethod
from pal_lightning.modeling.methods.pals import LowRank, Pals, PalsNoSharing, ProjectedFFN

METHODS: dict[str, AdapterMethod] = {}
"""Every registered method by name, in registration order."""


def register_method(method: AdapterMethod, *, replace: bool = False) -> AdapterMethod:
    """Add ``method`` under ``method.name`` and return it.

    Raises:
        PalUserError: for a method without a name, or a name already taken (unless ``replace``).
    """
    if not method.name:
        raise PalUserError(f"{type(method).__name__} has no name: set the class attribute `name`.")
    if method.name in METHODS and not replace:
        raise PalUserError(
            f"A method named {method.name!r} is already registered. Pick another name, or pass replace=True."
        )
    METHODS[method.name] = method
    return method


def get_method(name: str) -> AdapterMethod:
    """The method registered as ``name``.

    Raises:
        PalUserError: naming the registered methods and the guide for adding one.
    """
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


register_method(Pals())
register_method(PalsNoSharing())
register_method(LowRank())
register_method(ProjectedFFN())
register_method(ProjectedAttentionOnTopMethod())
register_method(BertLayerOnTopMethod())
register_method(LoraMethod())
register_method(Houlsby())
register_method(Pfeiffer())
register_method(BottleneckAlias())
register_method(NoAdapter())
