"""``MultiTaskBert``: a pretrained encoder of any family with a task-specific function TS_t beside its layers.

Wiring of one selected layer l for the active task t (Stickland & Murray 2019; docs/design.md §2)::

                  h  (layer input, [B, T, d])
                  |
        +---------+-----------------------------+
        |         |                             |
        |    SA (BERT self-attention)      V^E_t (d -> d_s)       shared by all layers (pals)
        |         |                             |
        +-------> + (residual)             g_{l,t}: multi-head attention in d_s
                  |                             |       (identity for low_rank)
                 LN1                       V^D_t (d_s -> d)
                  |                             |
                h_att ------+                   |
                  |         |                   |
                 FFN        |                   |
                  |         |                   |
                  +-------> + <-----------------+   TS_t(h)
                            |
                           LN2
                            |
                         h^{l+1} = LN2( h_att + FFN(h_att) + TS_t(h) )

TS_t reads the layer *input* h and is added into the residual sum right before the FFN's output LayerNorm
(LN2), as the reference code does (a pre-LN family such as ModernBERT adds it to the layer's output
instead). Layers outside the placement, and every layer with ``adapter="none"``,
are the unchanged BERT layer. The variants on top (``pa_on_top``, ``bert_layer_on_top``;
:mod:`pal_lightning.modeling.methods.on_top`) change no layer: the last layer hands its output to the task's block,
with the attention mask BERT built for its own layers.

Layer-sharing regimes (:mod:`pal_lightning.modeling.sharing`, ``layer_sharing="FFSSII"``): a frozen (F)
layer's parameters do not require gradients; an individual (I) layer is copied once per task into
``individual.<task>.<layer>`` (hooked like the shared layers, so PALs in that layer still apply) and its place in
``bert.encoder.layer`` holds an :class:`IndividualLayerSlot` without parameters that calls the active task's
copy. The pretrained ``encoder.layer.<i>.*`` weights are loaded into every task's copy. With
``task_groups`` the copies belong to groups of tasks (``individual.sst+qqp.<layer>``) instead.

Implementation: the family's ``transformers`` model stays as it is (same modules, same parameter names, so
``from_pretrained`` loads every pretrained weight), and forward hooks placed once on its layers, join
norms and site Linears (:mod:`~pal_lightning.modeling.families.wiring`, where the family record says)
read the active task's call, which each forward makes and scopes to itself (``wiring.active(call)``).
Scoping the call to the forward, instead of storing the task on the layers, keeps gradient checkpointing
correct (the recomputation gets the same call back) and lets one model run two forwards of different
inputs before a backward (siamese pairs).

Per-example task routing (``forward(..., tasks=...)``): a batch whose rows belong to several tasks runs in
one pass; the rows are grouped by task once and every hooked place runs each present task's module on
its rows (:mod:`~pal_lightning.modeling.families.routing`, :class:`RoutedForward`).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, BertConfig, PretrainedConfig, PreTrainedModel

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import resolve_encoder
from pal_lightning.modeling.attention import register as register_attention
from pal_lightning.modeling.encoder_files import local_encoder_dir, read_encoder_config, read_encoder_weights
from pal_lightning.modeling.encoder_state import (
    ADAPTERS_PREFIX,
    ENCODER_PREFIX,
    INDIVIDUAL_PREFIX,
    LoadingInfo,
    plan_pretrained_load,
)
from pal_lightning.modeling.families import EncoderFamily, family_of
from pal_lightning.modeling.families.routing import RowTasks, TaskRouting, route_rows
from pal_lightning.modeling.families.wiring import (
    IndividualLayerSlot,
    Part,
    Segment,
    TaskCall,
    Wiring,
    enable_checkpointing,
    fold_deltas,
    mixed_call,
    narrowed,
    place_hooks,
    task_call,
)
from pal_lightning.modeling.methods import AdapterConfig, Where
from pal_lightning.modeling.methods.pals import additive_mask, scores_dtype
from pal_lightning.modeling.sharing import (
    FROZEN,
    INDIVIDUAL,
    layers_with,
    parse_layer_sharing,
    resolve_task_groups,
)
from pal_lightning.tasks.specs import repeated_names, task_name_of

__all__ = [
    "ADAPTERS_PREFIX",
    "INDIVIDUAL_PREFIX",
    "IndividualLayerSlot",
    "LoadingInfo",
    "MultiTaskBert",
    "MultiTaskEncoder",
    "TaskRouting",
]

logger = logging.getLogger(__name__)


def _parameter_safe_names(tasks: Sequence[Any] | str) -> list[str]:
    """The names of ``tasks`` (:func:`~pal_lightning.tasks.specs.task_name_of`), each once and usable as a key of
    the encoder's ``nn.ModuleDict`` objects (it becomes part of parameter names).

    Raises:
        PalUserError: for no task, a task listed twice or a name that cannot be a parameter name.
    """
    names = [task_name_of(t) for t in ([tasks] if isinstance(tasks, str) else tasks)]
    if not names:
        raise PalUserError("MultiTaskBert needs at least one task; pass tasks=['sst', ...].")
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


def encoder_config(config: PretrainedConfig | Mapping[str, Any]) -> PretrainedConfig:
    """A copy of ``config`` (or the config the keyword arguments describe, by their ``model_type``,
    BERT when absent) with the width names every family answers to (``intermediate_size``).

    Raises:
        PalUserError: for a decoder config or a model type no family wires.
    """
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
            "MultiTaskBert needs an encoder config: set is_decoder=False and no cross-attention."
        )
    if not hasattr(config, "intermediate_size") and hasattr(config, "hidden_dim"):
        config.intermediate_size = config.hidden_dim  # DistilBERT's name for the FFN width
    if getattr(config, "chunk_size_feed_forward", 0):
        config.chunk_size_feed_forward = 0  # a chunked FFN would see a slice of the PAL term
    return config


def backbone(
    config: PretrainedConfig, family: EncoderFamily, attn_implementation: str | None = None
) -> PreTrainedModel:
    """A random model of ``config`` (the family's base model, no pooler), with the attention
    implementation asked for: ``sdpa`` (the default where the family has it) becomes ``pal_sdpa``
    (torch's SDPA, in fp32 on a CPU under autocast: modeling/attention.py).

    Raises:
        PalUserError: for an attention implementation that is not available.
    """
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


def layer_copy(family: EncoderFamily, config: PretrainedConfig, layer: nn.Module, index: int) -> nn.Module:
    """A new layer of ``family`` with ``layer``'s weights that reads ``config`` itself (the encoder's config
    object, not a copy), so a later ``set_attn_implementation`` on the encoder reaches it too."""
    new = family.new_layer(config, index)
    new.load_state_dict(layer.state_dict())
    return new


def individual_copies(
    model: PreTrainedModel,
    family: EncoderFamily,
    wiring: Wiring,
    layers: Sequence[int],
    groups: Iterable[str],
) -> nn.ModuleDict:
    """Per group of tasks, its copies of ``model``'s individual ``layers`` (keyed by layer index, each with
    the layer's current weights); their places in the layer list become parameter-free slots."""
    shared = family.layer_list(model)
    config: PretrainedConfig = model.config
    copies = nn.ModuleDict()
    if layers:
        for group in dict.fromkeys(groups):
            copies[group] = nn.ModuleDict({str(i): layer_copy(family, config, shared[i], i) for i in layers})
        for i in layers:
            shared[i] = IndividualLayerSlot(i, wiring, shared[i])  # the copies replace the shared layer
    return copies


def task_adapters(
    config: AdapterConfig, encoder_config: PretrainedConfig, names: Sequence[str], size: int
) -> nn.ModuleDict:
    """Per task, its module of width ``size`` as the config's method builds it (none for ``none``)."""
    method = config.adapter_method
    layers = config.layer_indices(int(encoder_config.num_hidden_layers))
    adapters = nn.ModuleDict()
    for name in names:
        module = method.build(config, encoder_config, size, layers)
        if module is not None:
            adapters[name] = module
    return adapters


def hook_layers(encoder: MultiTaskBert) -> None:
    """Hook every layer of ``encoder`` (the shared ones and the copies of individual ones) where its
    method acts (:func:`~pal_lightning.modeling.families.wiring.place_hooks`)."""
    where = encoder.adapter_config.adapter_method.where.value
    if where == "nowhere":
        return  # individual layers need no hook: their slots read the call themselves
    sites = sorted({site for adapter in encoder.adapters.values() for site in getattr(adapter, "sites", ())})
    layers: list[tuple[int, nn.Module]] = list(enumerate(encoder.family.layer_list(encoder.bert)))
    for copies in encoder.individual.values():
        layers += [(int(i), layer) for i, layer in cast(nn.ModuleDict, copies).items()]
    for index, layer in layers:
        if not isinstance(layer, IndividualLayerSlot):
            place_hooks(layer, index, encoder.family, encoder.wiring, where, sites)


def merge_adapter(encoder: MultiTaskBert, task: str) -> None:
    """Fold ``task``'s module into the weights of the layers it acts in (shared ones and the task's copies
    of individual ones); :meth:`MultiTaskBert.merge`.

    Raises:
        PalUserError: for a method whose modules have no ``weight_delta``.
    """
    adapter = encoder.adapters[task]
    if not hasattr(adapter, "weight_delta"):
        raise PalUserError(
            f"Method {encoder.adapter_config.method!r} cannot be merged into the encoder's weights (only "
            "methods whose per-task change is linear in the weights, such as lora, can). Export it unmerged."
        )
    family = encoder.family
    fold_deltas(dict(enumerate(family.layer_list(encoder.bert))), family, adapter)
    copies = encoder._copies_of(task)  # an I layer's copy takes the task's delta too
    if copies is not None:
        fold_deltas({int(i): layer for i, layer in copies.items()}, family, adapter)


class TaskParameters:
    """The encoder's parameters by role (shared, per task, pretrained, new), for optimiser groups, GEM and
    accounting. Mixed into :class:`MultiTaskBert`, which provides ``bert``, ``individual``, ``adapters``,
    ``task_group`` and ``check_task``."""

    bert: PreTrainedModel
    individual: nn.ModuleDict
    adapters: nn.ModuleDict
    task_group: dict[str, str]

    def check_task(self, task: str) -> None:  # pragma: no cover - MultiTaskBert's
        raise NotImplementedError

    def pretrained_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of every weight that starts from the pretrained encoder: the shared encoder
        (``bert.*``) and the per-task copies of individual layers (``individual.*``). They train at the
        encoder's learning rate and ``freeze_encoder`` freezes them."""
        yield from self.bert.named_parameters(prefix="bert")
        yield from self.individual.named_parameters(prefix=INDIVIDUAL_PREFIX)

    def shared_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of the encoder every task uses (``bert.*``: embeddings, F and S layers)."""
        yield from self.bert.named_parameters(prefix="bert")

    def individual_parameters(self, task: str) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of the copies of the individual layers ``task`` uses (its group's; nothing
        without I layers)."""
        self.check_task(task)
        group = self.task_group[task]
        if group in self.individual:
            yield from self.individual[group].named_parameters(prefix=f"{INDIVIDUAL_PREFIX}.{group}")

    def adapter_parameters(self, task: str) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of ``task``'s adapter (nothing with ``adapter="none"``)."""
        self.check_task(task)
        if task in self.adapters:
            yield from self.adapters[task].named_parameters(prefix=f"{ADAPTERS_PREFIX}.{task}")

    def new_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of every task-specific adapter (``adapters.*``)."""
        yield from self.adapters.named_parameters(prefix=ADAPTERS_PREFIX)

    def task_parameters(self, task: str) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of everything ``task`` uses beside the shared encoder: its adapter and its
        (group's) individual layers."""
        yield from self.adapter_parameters(task)
        yield from self.individual_parameters(task)


class RoutedForward:
    """The mixed-task forward of :class:`MultiTaskBert` (rows of several tasks in one pass: ``tasks=``), and
    the calls the hooks read. Mixed into :class:`MultiTaskBert`, which provides the attributes below."""

    bert: PreTrainedModel
    family: EncoderFamily
    wiring: Wiring
    adapters: nn.ModuleDict
    individual: nn.ModuleDict
    adapter_config: AdapterConfig
    adapter_layers: tuple[int, ...]
    individual_layers: tuple[int, ...]
    task_group: dict[str, str]
    takes_token_types: bool
    _task_names: tuple[str, ...]

    if TYPE_CHECKING:  # MultiTaskBert's

        @property
        def num_layers(self) -> int: ...

        def _copies_of(self, task: str) -> nn.ModuleDict | None: ...

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor | None = None,
            token_type_ids: torch.Tensor | None = None,
            *,
            task: str | None = None,
            tasks: TaskRouting | RowTasks | None = None,
        ) -> torch.Tensor: ...

    @property
    def mixed_by_task(self) -> bool:
        """Whether a mixed-task batch runs one forward per task present rather than one routed pass: the
        method acts on a site the family also feeds row-shared tensors (``EncoderFamily.row_shared_sites``)."""
        sites = {site for adapter in self.adapters.values() for site in getattr(adapter, "sites", ())}
        return bool(sites & set(self.family.row_shared_sites))

    def route(self, tasks: RowTasks, device: torch.device | str | None = None) -> TaskRouting:
        """Each row's task (indices into :attr:`task_names`, or names) grouped by task once
        (:func:`~pal_lightning.modeling.families.routing.route_rows`): pass it as ``tasks=`` to
        :meth:`forward`, and read each task's rows with :meth:`TaskRouting.rows`. ``device``: the inputs'.

        Raises:
            PalUserError: for an unknown task or index, or no row.
        """
        return route_rows(
            tasks, self._task_names, self.task_group if self.individual_layers else None, device
        )

    def _forward_mixed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        tasks: TaskRouting | RowTasks | None,
        task: str | None = None,
    ) -> torch.Tensor:
        """:meth:`forward` of rows of several tasks: sorted by task, one pass, back in the input order."""
        if tasks is None or task is not None:
            raise PalUserError(
                "MultiTaskBert needs the rows' task: task='sst' for every row, or tasks=[...] with one per "
                "row (not both)."
            )
        routing = tasks if isinstance(tasks, TaskRouting) else self.route(tasks, input_ids.device)
        if routing.size != input_ids.shape[0]:
            raise PalUserError(
                f"tasks names {routing.size} rows but input_ids has {input_ids.shape[0]}: give one task per row."
            )
        if len(routing.tasks) == 1:  # one task: the single-task path, rows in place
            return self.forward(input_ids, attention_mask, token_type_ids, task=routing.tasks[0])
        mask = None if attention_mask is None else routing.sort(attention_mask)
        if self.mixed_by_task:
            return routing.unsort(self._forward_by_task(routing, input_ids, mask, token_type_ids))
        call = self.mixed_task_call(routing, mask)
        if call is None:  # no task present has a module: the shared encoder, rows in place
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        else:
            inputs = {"input_ids": routing.sort(input_ids), "attention_mask": mask}
        if self.takes_token_types:
            inputs["token_type_ids"] = (
                token_type_ids if call is None or token_type_ids is None else routing.sort(token_type_ids)
            )
        with self.wiring.active(call):
            out = self.bert(**inputs).last_hidden_state
        return out if call is None else routing.unsort(out)

    def _forward_by_task(
        self,
        routing: TaskRouting,
        input_ids: torch.Tensor,
        mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        """The sorted rows' hidden states from one single-task forward per task present, on its slice."""
        ids = routing.sort(input_ids)
        types = None if token_type_ids is None else routing.sort(token_type_ids)
        return torch.cat(
            [
                self.forward(
                    ids[start:stop],
                    None if mask is None else mask[start:stop],
                    None if types is None else types[start:stop],
                    task=task,
                )
                for task, start, stop in routing.slices()
            ]
        )

    def mixed_task_call(self, routing: TaskRouting, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """What the hooks need for one forward of ``routing``'s rows (sorted by task, as is
        ``attention_mask``): each present task's call on its slice (``None``: nothing task-specific)."""
        pal_mask = self._pal_mask(attention_mask)
        segments = [
            Segment(
                start, stop, self._call_with_mask(task, None if pal_mask is None else pal_mask[start:stop])
            )
            for task, start, stop in routing.slices()
        ]
        if all(segment.call is None for segment in segments):
            return None
        call = mixed_call(segments, self.num_layers)
        parts = [
            Part(start, stop, cast(nn.ModuleDict, self.individual[group]), narrowed(call, start, stop))
            for group, start, stop in routing.groups
        ]
        return mixed_call(segments, self.num_layers, parts) if parts else call

    def task_call(self, task: str, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """What the hooks need for one forward of ``task`` (``None``: nothing task-specific)."""
        # the PAL mask, once per forward, for a task with a module that reads it
        return self._call_with_mask(task, self._pal_mask(attention_mask) if task in self.adapters else None)

    def _pal_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The PAL mask of a forward whose method reads one (BESIDE, TOP), else ``None``."""
        if not len(self.adapters) or self.adapter_config.adapter_method.where not in (
            Where.BESIDE,
            Where.TOP,
        ):
            return None
        weight = self.bert.get_input_embeddings().weight
        assert isinstance(weight, torch.Tensor)
        return additive_mask(attention_mask, scores_dtype(weight.dtype, weight.device))

    def _call_with_mask(self, task: str, pal_mask: torch.Tensor | None) -> TaskCall | None:
        """:meth:`task_call` with the PAL mask made already (a slice of a mixed batch's)."""
        adapter = self.adapters[task] if task in self.adapters else None
        individual = self._copies_of(task)
        if adapter is None and individual is None:
            return None
        where = self.adapter_config.adapter_method.where.value
        mask = pal_mask if adapter is not None else None
        return task_call(adapter, where, self.adapter_layers, self.num_layers, mask, individual)


class MultiTaskBert(RoutedForward, TaskParameters, nn.Module):
    """A BERT encoder shared by all tasks with a task-specific function TS_t per selected layer.

    Args:
        bert_config: the ``transformers`` config of the encoder, of any family
            (:mod:`pal_lightning.modeling.families`; copied, not modified).
        tasks: task names or :class:`~pal_lightning.tasks.specs.TaskSpec` objects (their ``name`` is used).
        adapter: the per-task modules: an :class:`AdapterConfig`, a method name, or ``None`` for the
            defaults (PALs).
        attn_implementation: ``"sdpa"``, ``"eager"``, ... for BERT's own attention; ``None`` keeps the
            config's choice (transformers' default is sdpa). PALs build their own mask, so any works.
        layer_sharing: the layer-sharing regime, one letter per layer (F frozen, S shared, I individual),
            e.g. ``"FFSSII"``; ``None``: every layer shared (:mod:`pal_lightning.modeling.sharing`).
        task_groups: groups of tasks that share their copies of the individual layers, e.g.
            ``[["sst", "qqp"]]``; a task in no group has its own. Needs at least one ``I`` layer.

    The weights are random: use :meth:`from_pretrained` for a pretrained encoder and :meth:`from_config`
    for a random one with keyword overrides.
    """

    def __init__(
        self,
        bert_config: PretrainedConfig,
        tasks: Sequence[Any],
        adapter: AdapterConfig | str | None = None,
        *,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        names = _parameter_safe_names(tasks)
        self.adapter_config = AdapterConfig.coerce(adapter)
        self._task_names: tuple[str, ...] = tuple(names)
        config = encoder_config(bert_config)
        self.family: EncoderFamily = family_of(config)
        self.wiring = Wiring(family_pre_norm=self.family.join_norm is None)
        # RoBERTa and DeBERTa checkpoints have one segment (or none): their token types are all 0
        self.takes_token_types = self.family.token_types and int(getattr(config, "type_vocab_size", 2)) > 1
        self.bert = backbone(config, self.family, attn_implementation)
        num_layers = self.num_layers
        self.layer_sharing: str = parse_layer_sharing(layer_sharing, num_layers)
        self.individual_layers: tuple[int, ...] = layers_with(self.layer_sharing, INDIVIDUAL)
        for i in layers_with(self.layer_sharing, FROZEN):
            self.family.layer_list(self.bert)[i].requires_grad_(False)
        self.task_group: dict[str, str] = resolve_task_groups(task_groups, names, self.layer_sharing)
        """Task -> the name of the group whose copies of the individual layers it uses."""
        self.individual = individual_copies(
            self.bert, self.family, self.wiring, self.individual_layers, self.task_group.values()
        )
        self.adapter_layers: tuple[int, ...] = self.adapter_config.layer_indices(num_layers)
        self.adapter_size: int = self.adapter_config.resolved_size(self.hidden_size)
        self.adapters = task_adapters(self.adapter_config, self.bert.config, names, self.adapter_size)
        hook_layers(self)
        self._start_task_layers()
        self.loading_info: LoadingInfo | None = None

    @torch.no_grad()
    def _start_task_layers(self) -> None:
        """Start task-specific layers from the encoder's current (pretrained, once loaded) weights.

        Called after construction and again after :meth:`load_pretrained_state`, so a BERT layer on top
        with ``init="zero"`` is a copy of the *pretrained* last layer.
        """
        top = self.num_layers - 1
        for task, adapter in self.adapters.items():
            start = getattr(adapter, "start_from", None)
            if callable(start):
                copies = self._copies_of(task)
                start(
                    copies[str(top)]
                    if copies is not None and top in self.individual_layers
                    else self.family.layer_list(self.bert)[top]
                )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        bert_config: PretrainedConfig | Mapping[str, Any],
        tasks: Sequence[Any],
        adapter: AdapterConfig | str | None = None,
        *,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
        **adapter_options: Any,
    ) -> MultiTaskBert:
        """A randomly initialised encoder (tests, parameter counts).

        Args:
            bert_config: a ``transformers`` config or the keyword arguments of one (e.g.
                ``{"hidden_size": 32, ...}``; with ``"model_type": "roberta"``, ... for another family).
            tasks: task names or specs.
            adapter: an :class:`AdapterConfig`, a method name or ``None`` (the defaults: PALs).
            attn_implementation: BERT attention implementation (``"sdpa"``, ``"eager"``).
            layer_sharing: the layer-sharing regime (``None``: all shared), see :class:`MultiTaskBert`.
            task_groups: tasks sharing their individual layers, see :class:`MultiTaskBert`.
            **adapter_options: :class:`AdapterConfig` fields that replace ``adapter``'s (``size``,
                ``num_heads``, ``placement``, ``num_layers``, ``init``, ``activation``).
        """
        bert_config = encoder_config(bert_config)
        if isinstance(adapter, Mapping):  # its fields and the options, validated together
            adapter_options = {**adapter, **adapter_options}
            adapter = None
        config = AdapterConfig.coerce(adapter)
        if adapter_options:
            config = config.replace(**adapter_options)
        return cls(
            bert_config,
            tasks,
            config,
            attn_implementation=attn_implementation,
            layer_sharing=layer_sharing,
            task_groups=task_groups,
        )

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike[str],
        tasks: Sequence[Any],
        adapter: AdapterConfig | str | None = None,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
        **adapter_options: Any,
    ) -> MultiTaskBert:
        """The pretrained encoder ``name_or_path`` with new, task-specific PAL parameters.

        The arguments after ``name_or_path`` are those of :meth:`from_config`. The name goes through
        :func:`pal_lightning.core.hub.resolve_encoder` (offline copies first). The weights are loaded with a
        strict check: the only keys the checkpoint may lack are the new ``adapters.*`` ones; keys it has
        that the encoder does not use (pooler, pre-training heads) are reported in ``model.loading_info``
        and logged at INFO level.

        Raises:
            PalUserError: for an unknown encoder, a non-BERT config, a checkpoint lacking encoder weights
                or with mismatching shapes.
        """
        directory = local_encoder_dir(resolve_encoder(os.fspath(name_or_path)))
        model = cls.from_config(
            read_encoder_config(directory, name_or_path),
            tasks,
            adapter,
            attn_implementation=attn_implementation,
            layer_sharing=layer_sharing,
            task_groups=task_groups,
            **adapter_options,
        )
        state, source = read_encoder_weights(Path(directory))
        model.load_pretrained_state(state, source=source)
        return model

    def load_pretrained_state(
        self, state: Mapping[str, torch.Tensor], source: str = "<state dict>"
    ) -> LoadingInfo:
        """Load pretrained BERT weights into :attr:`bert`, checking that only PAL keys are missing.

        Keys may carry a ``bert.`` prefix (``BertFor...`` checkpoints) and old ``LayerNorm.gamma/beta``
        names; both are normalised (:func:`~pal_lightning.modeling.encoder_state.plan_pretrained_load`).

        Raises:
            PalUserError: when a non-PAL key is missing or a shape differs.
        """
        # buffers BERT does not save (e.g. embeddings.position_ids, which old transformers versions saved)
        saved = set(self.bert.state_dict(prefix=f"{ENCODER_PREFIX}."))
        buffers = {n for n, _ in self.bert.named_buffers(prefix=ENCODER_PREFIX, remove_duplicate=False)}
        own, info = plan_pretrained_load(
            state,
            self.state_dict(),
            individual_layers=self.individual_layers,
            groups=list(self.individual),
            not_saved=buffers - saved,
            source=source,
            model_prefix=str(getattr(self.bert, "base_model_prefix", "")),
            layers_path=self.family.layers,
        )
        result = self.load_state_dict(own, strict=False)
        # checked by the plan: only the new adapters are missing
        assert all(k.startswith(f"{ADAPTERS_PREFIX}.") for k in result.missing_keys), result.missing_keys
        if info.unexpected:
            logger.info(
                "Ignored %d checkpoint key(s) unused by the encoder: %s",
                len(info.unexpected),
                info.unexpected,
            )
        self.loading_info = info
        self._start_task_layers()
        return info

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> PretrainedConfig:
        """The encoder's ``transformers`` config."""
        return self.bert.config

    @property
    def embeddings(self) -> nn.Module:
        """The encoder's embedding block (every family calls it ``embeddings``)."""
        return self.bert.get_submodule("embeddings")

    @property
    def hidden_size(self) -> int:
        """d, the encoder width."""
        return int(self.bert.config.hidden_size)

    @property
    def num_layers(self) -> int:
        """L, the number of encoder layers."""
        return int(self.bert.config.num_hidden_layers)

    def _copies_of(self, task: str) -> nn.ModuleDict | None:
        """The copies of the individual layers ``task`` uses (its group's), ``None`` without I layers."""
        group = self.task_group[task]
        return cast(nn.ModuleDict, self.individual[group]) if group in self.individual else None

    @property
    def task_names(self) -> tuple[str, ...]:
        """The tasks this encoder knows, in order."""
        return self._task_names

    def check_task(self, task: str) -> None:
        """Raise :class:`PalUserError` naming the known tasks when ``task`` is not one of them."""
        if task not in self._task_names:
            raise PalUserError(
                f"Unknown task {task!r} for this encoder. Known tasks: {', '.join(self._task_names)}. "
                "Build the model with that task in its task list."
            )

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        task: str | None = None,
        tasks: TaskRouting | RowTasks | None = None,
    ) -> torch.Tensor:
        """The last hidden state ``[B, T, d]`` of the encoder with ``task``'s TS_t active, or with each row's
        own task's modules active (``tasks``).

        Args:
            input_ids: ``[B, T]`` token ids.
            attention_mask: ``[B, T]``, 1 for tokens and 0 for padding (``None``: no padding).
            token_type_ids: ``[B, T]`` segment ids (``None``: all zeros).
            task: the active task of every row; its adapter is used, the others are untouched.
            tasks: instead of ``task``, each row's task: a ``LongTensor[B]`` of indices into
                :attr:`task_names`, a sequence of ``B`` names, or a :class:`TaskRouting` of the rows made by
                :meth:`route` (to reuse its grouping). Rows are grouped by task once; every layer runs each
                present task's modules on its rows (:mod:`~pal_lightning.modeling.families.routing`). The
                output is in the input's row order, each row as a forward with ``task=`` its task gives it.

        Raises:
            PalUserError: for a task the encoder was not built with, or not exactly one of ``task`` and
                ``tasks``.
        """
        if tasks is not None or task is None:
            return self._forward_mixed(input_ids, attention_mask, token_type_ids, tasks, task)
        self.check_task(task)
        call = self.task_call(task, attention_mask)
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.takes_token_types:
            inputs["token_type_ids"] = token_type_ids
        with self.wiring.active(call):
            out = self.bert(**inputs)
        return out.last_hidden_state

    def merge(self, task: str) -> None:
        """Fold ``task``'s LoRA into the encoder's weights and drop every task's module: the encoder then
        computes ``task``'s outputs with no per-task work (for a single-task copy: export, serving).

        Raises:
            PalUserError: when the method's modules cannot be folded (only linear deltas can).
        """
        self.check_task(task)
        if task in self.adapters:
            merge_adapter(self, task)
        for name in list(self.adapters):
            del self.adapters[name]

    def gradient_checkpointing_enable(self) -> None:
        """Recompute each layer's activations in the backward pass (less memory, a third more compute),
        with the task's modules active in the recomputation too (non-reentrant checkpointing)."""
        enable_checkpointing(self.bert, self.individual, self.wiring)

    def extra_repr(self) -> str:
        p = self.adapter_config
        return (
            f"family={self.family.name!r}, tasks={list(self._task_names)}, adapter={p.method!r}, size={self.adapter_size}, "
            f"num_heads={p.num_heads}, layers={list(self.adapter_layers)}, init={p.init!r}, "
            f"layer_sharing={self.layer_sharing!r}"
        )


MultiTaskEncoder = MultiTaskBert
"""The same class under a name that says what it holds: an encoder of any family."""
