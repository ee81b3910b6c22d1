"""Per-task methods (adapters): :class:`~pal_lightning.modeling.methods.base.AdapterMethod` objects in a
registry (:mod:`~pal_lightning.modeling.methods.registry`), each with its options' dataclass (an
:class:`~pal_lightning.modeling.methods.config.AdapterConfig` subclass). Adding one: ``docs/extending.md``.
"""

from pal_lightning.modeling.methods.base import SITES, AdapterMethod
from pal_lightning.modeling.methods.bottleneck import BottleneckConfig
from pal_lightning.modeling.methods.config import AdapterConfig, AdapterSpec, config_class, option_names
from pal_lightning.modeling.methods.inside import InsideConfig
from pal_lightning.modeling.methods.lora import LoraConfig
from pal_lightning.modeling.methods.registry import METHODS, get_method, register_method, unregister_method
from pal_lightning.modeling.methods.where import BesideModule, InsideModule, MergeableModule, TopModule, Where

__all__ = [
    "METHODS",
    "SITES",
    "AdapterConfig",
    "AdapterMethod",
    "AdapterSpec",
    "BesideModule",
    "BottleneckConfig",
    "InsideConfig",
    "InsideModule",
    "LoraConfig",
    "MergeableModule",
    "TopModule",
    "Where",
    "config_class",
    "get_method",
    "option_names",
    "register_method",
    "unregister_method",
]
