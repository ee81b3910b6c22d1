"""The registry of per-task methods: the built-in ones, one line each (a user's method is one
:func:`register_method` call in their own code)."""

from __future__ import annotations

from pal_lightning.modeling.methods.base import (
    CONFIGS,
    METHODS,
    NoAdapter,
    get_method,
    register_method,
    unregister_method,
)
from pal_lightning.modeling.methods.bottleneck import BottleneckAlias, BottleneckConfig, Houlsby, Pfeiffer
from pal_lightning.modeling.methods.lora import LoraConfig, LoraMethod
from pal_lightning.modeling.methods.on_top import BertLayerOnTopMethod, ProjectedAttentionOnTopMethod
from pal_lightning.modeling.methods.pals import LowRank, Pals, PalsNoSharing, ProjectedFFN

__all__ = ["CONFIGS", "METHODS", "get_method", "register_method", "unregister_method"]

register_method(Pals())
register_method(PalsNoSharing())
register_method(LowRank())
register_method(ProjectedFFN())
register_method(ProjectedAttentionOnTopMethod())
register_method(BertLayerOnTopMethod())
register_method(LoraMethod(), config=LoraConfig)
register_method(Houlsby(), config=BottleneckConfig)
register_method(Pfeiffer(), config=BottleneckConfig)
register_method(BottleneckAlias(), config=BottleneckConfig)
register_method(NoAdapter())
