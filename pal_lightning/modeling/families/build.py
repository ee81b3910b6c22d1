"""How :class:`~pal_lightning.modeling.encoder.MultiTaskEncoder` is built and merged."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, BertConfig, PretrainedConfig, PreTrainedModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.attention import register as register_attention
from pal_lightning.modeling.encoder_state import ENCODER_PREFIX, LoadingInfo, plan_pretrained_load
from pal_lightning.modeling.families import EncoderFamily, family_of
from pal_lightning.modeling.families.wiring import IndividualLayerSlot, Wiring, fold_deltas
from pal_lightning.modeling.methods import AdapterConfig, MergeableModule
from pal_lightning.tasks.specs import repeated_names, task_name_of

if TYPE_CHECKING:
    from pal_lightning.modeling.encoder import MultiTaskEncoder


def parameter_safe_names(tasks: Sequence[Any] | str) -> list[str]:
    """The names of ``tasks``, each once and usable as an ``nn.ModuleDict`` key. Raises ``PalUserError`` for
    no task, a task listed twice or a name that cannot be a parameter name."""
    names = [task_name_of(t) for t in ([tasks] if isinstance(tasks, str) else tasks)]
    if not names:
        raise PalUserError("MultiTaskEncoder needs at least one task; pass tasks=['sst', ...].")
    for name in names:
        if not name or "." in name or hasattr(nn.ModuleDict(), name):
            raise PalUserError(
                f"Task name {name!r} cannot be used as a parameter name: use a non-empty name without '.' "
                "that is not a torch.nn.ModuleDict attribute (such as 'keys' or 'train')."
            )
    dupes = repeated_names(names)
    if dupes:
        raise PalUserError(f"Tasks listed twice: {dupes}. List each task once.")
    return names


def as_encoder_config(config: PretrainedConfig | Mapping[str, Any]) -> PretrainedConfig:
    """A copy of ``config`` (or of the config a mapping describes; ``model_type`` defaults to BERT). Raises
    ``PalUserError`` for a decoder config or a model type no family wires."""
    if isinstance(config, Mapping):
        options = dict(config)
        model_type = options.pop("model_type", "bert")
        config = (
            BertConfig(**options) if model_type == "bert" else AutoConfig.for_model(model_type, **options)
        )
    config = copy.deepcopy(config)
    family_of(config)
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise PalUserError(
            "MultiTaskEncoder needs an encoder config: set is_decoder=False and no cross-attention."
        )
    if not hasattr(config, "intermediate_size") and hasattr(config, "hidden_dim"):
        config.intermediate_size = config.hidden_dim  # DistilBERT's name for the FFN width
    if getattr(config, "chunk_size_feed_forward", 0):
        config.chunk_size_feed_forward = 0  # a chunked FFN would see a slice of the PAL term
    return config


def backbone(
    config: PretrainedConfig, family: EncoderFamily, attn_implementation: str | None = None
) -> PreTrainedModel:
    """A random base model of ``config`` (no pooler); ``sdpa`` becomes ``pal_sdpa`` (modeling/attention.py).
    Raises ``PalUserError`` for an attention implementation that is not available."""
    options: dict[str, Any] = {"add_pooling_layer": False} if family.pooler_option else {}
    model: PreTrainedModel = AutoModel.from_config(config, **options)
    if attn_implementation is None and model.config._attn_implementation == "sdpa":
        attn_implementation = "sdpa"
    if attn_implementation == "sdpa":
        attn_implementation = register_attention()
    if attn_implementation is not None:
        try:
            model.set_attn_implementation(attn_implementation)
        except (ValueError, ImportError) as err:
            if attn_implementation != "pal_sdpa":
                raise PalUserError(
                    f"Attention implementation {attn_implementation!r} is not available: {err} "
                    "Use 'sdpa' or 'eager'."
                ) from err
    return model


def individual_copies(
    model: PreTrainedModel,
    family: EncoderFamily,
    wiring: Wiring,
    layers: Sequence[int],
    groups: Iterable[str],
) -> nn.ModuleDict:
    """Per group, its copies of ``model``'s individual ``layers``; their places become parameter-free slots.
    Each copy is a new layer reading ``model.config`` itself, so ``set_attn_implementation`` reaches it."""
    shared = family.layer_list(model)
    copies = nn.ModuleDict()
    if layers:
        for group in dict.fromkeys(groups):
            copies[group] = own = nn.ModuleDict({str(i): family.new_layer(model.config, i) for i in layers})
            for i in layers:
                own[str(i)].load_state_dict(shared[i].state_dict())
        for i in layers:
            shared[i] = IndividualLayerSlot(i, wiring, shared[i])  # the copies replace the shared layer
    return copies


def task_adapters(
    config: AdapterConfig, encoder_config: PretrainedConfig, names: Sequence[str], size: int
) -> nn.ModuleDict:
    """Per task, its module of width ``size`` as the config's method builds it. Raises ``PalUserError`` for a
    module that does not follow its placement's Protocol."""
    method = config.adapter_method
    protocol = method.where.protocol
    layers = config.layer_indices(int(encoder_config.num_hidden_layers))
    adapters = nn.ModuleDict()
    for name in names:
        module = method.build(config, encoder_config, size, layers)
        if module is not None and protocol is not None and not isinstance(module, protocol):
            raise PalUserError(
                f"Method {method.name!r} built a {type(module).__name__}, which is not a {protocol.__name__} "
                f"(its placement is {method.where!r}): give the module what docs/extending.md lists."
            )
        if module is not None:
            adapters[name] = module
    return adapters


def hook_layers(encoder: MultiTaskEncoder) -> None:
    """Hook every layer of ``encoder`` (shared ones and copies) where its method acts."""
    where = encoder.adapter_config.adapter_method.where
    sites = sorted({site for adapter in encoder.adapters.values() for site in getattr(adapter, "sites", ())})
    layers: list[tuple[int, nn.Module]] = list(enumerate(encoder.family.layer_list(encoder.backbone)))
    for copies in encoder.individual.values():
        layers += [(int(i), layer) for i, layer in cast(nn.ModuleDict, copies).items()]
    for index, layer in layers:
        if not isinstance(layer, IndividualLayerSlot):
            where.place(layer, index, encoder.family, encoder.wiring, sites)


def pretrained_load_plan(
    encoder: MultiTaskEncoder, state: Mapping[str, torch.Tensor], source: str
) -> tuple[dict[str, torch.Tensor], LoadingInfo]:
    """The tensors of ``state`` to load into ``encoder`` and the :class:`LoadingInfo`
    (:func:`~pal_lightning.modeling.encoder_state.plan_pretrained_load`). Raises ``PalUserError`` when a
    non-adapter key is missing or a shape differs."""
    # buffers BERT does not save (e.g. embeddings.position_ids, which old transformers versions saved)
    saved = set(encoder.backbone.state_dict(prefix=f"{ENCODER_PREFIX}."))
    buffers = {n for n, _ in encoder.backbone.named_buffers(prefix=ENCODER_PREFIX, remove_duplicate=False)}
    return plan_pretrained_load(
        state,
        encoder.state_dict(),
        individual_layers=encoder.individual_layers,
        groups=list(encoder.individual),
        not_saved=buffers - saved,
        source=source,
        model_prefix=str(getattr(encoder.backbone, "base_model_prefix", "")),
        layers_path=encoder.family.layers,
    )


@torch.no_grad()
def start_task_layers(encoder: MultiTaskEncoder) -> None:
    """Start each task's module that starts from a layer (``start_from``: a BERT layer on top) from
    ``encoder``'s last layer, or the task's copy of it."""
    # again after loading: a BERT layer on top with init="zero" copies the *pretrained* last layer
    top = encoder.num_layers - 1
    for task, adapter in encoder.adapters.items():
        start = getattr(adapter, "start_from", None)
        if callable(start):
            copies = encoder._copies_of(task)
            start(
                copies[str(top)]
                if copies is not None and top in encoder.individual_layers
                else encoder.family.layer_list(encoder.backbone)[top]
            )


def merge_adapter(encoder: MultiTaskEncoder, task: str) -> None:
    """Fold ``task``'s module into the weights of the layers it acts in (:meth:`MultiTaskEncoder.merge`). Raises
    ``PalUserError`` for a method whose modules are not a ``MergeableModule``."""
    adapter = encoder.adapters[task]
    if not isinstance(adapter, MergeableModule):
        raise PalUserError(
            f"Method {encoder.adapter_config.method!r} cannot be merged into the encoder's weights (only "
            "methods whose per-task change is linear in the weights, such as lora, can). Export it unmerged."
        )
    family = encoder.family
    fold_deltas(dict(enumerate(family.layer_list(encoder.backbone))), family, adapter)
    copies = encoder._copies_of(task)  # an I layer's copy takes the task's delta too
    if copies is not None:
        fold_deltas({int(i): layer for i, layer in copies.items()}, family, adapter)
