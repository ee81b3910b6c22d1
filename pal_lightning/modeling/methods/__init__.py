"""Per-task methods (adapters) behind a registry: one file per family, one line per method below.

Each method is an :class:`~pal_lightning.modeling.methods.base.AdapterMethod`: its default size, how it
builds a task's module, where that acts in the encoder, its parameter formula and its checkpoint
signature. :class:`~pal_lightning.modeling.methods.config.AdapterConfig` names one by ``method``;
the encoder, accounting, save/load and the CLI ask the registry instead of branching on a name.
Adding a method: ``docs/extending.md``.
"""

from pal_lightning.modeling.methods.base import SITES, AdapterMethod, NoAdapter, Where
from pal_lightning.modeling.methods.bottleneck import BottleneckAlias, Houlsby, Pfeiffer
from pal_lightning.modeling.methods.lora import LoraMethod
from pal_lightning.modeling.methods.on_top import BertLayerOnTopMethod, ProjectedAttentionOnTopMethod
from pal_lightning.modeling.methods.pals import LowRank, Pals, PalsNoSharing, ProjectedFFN
from pal_lightning.modeling.methods.registry import METHODS, get_method, register_method, unregister_method

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

from pal_lightning.modeling.methods.config import AdapterConfig  # noqa: E402  (validates against METHODS)

__all__ = [
    "METHODS",
    "SITES",
    "AdapterConfig",
    "AdapterMethod",
    "Where",
    "get_method",
    "register_method",
    "unregister_method",
]
