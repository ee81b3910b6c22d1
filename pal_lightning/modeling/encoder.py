"""``MultiTaskBert``: a pretrained BERT encoder with a task-specific function TS_t beside its layers.

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
(LN2), as the reference code does. Layers outside the placement, and every layer with ``adapter="none"``,
are the unchanged BERT layer. The variants on top (``pa_on_top``, ``bert_layer_on_top``;
:mod:`pal_lightning.modeling.top`) change no layer: the last layer hands its output to the task's block,
with the attention mask BERT built for its own layers.

Layer-sharing regimes (:mod:`pal_lightning.modeling.sharing`, ``layer_sharing="FFSSII"``): a frozen (F)
layer's parameters do not require gradients; an individual (I) layer is copied once per task into
``individual.<task>.<layer>`` (a :class:`PALBertLayer`, so PALs in that layer still apply) and its place in
``bert.encoder.layer`` holds an :class:`IndividualLayerSlot` without parameters that calls the active task's
copy. The pretrained ``encoder.layer.<i>.*`` weights are loaded into every task's copy. With
``task_groups`` the copies belong to groups of tasks (``individual.sst+qqp.<layer>``) instead.

Implementation: each ``BertLayer`` is replaced by :class:`PALBertLayer`, a subclass with the same
children (so every pretrained parameter keeps its name and ``from_pretrained`` loads it), whose forward
takes the active task's adapter as a ``pal=`` keyword that transformers threads from ``BertModel.forward``
down to every layer. Passing it per call, instead of storing it on the layers, keeps gradient
checkpointing correct (the recomputation sees the same call) and lets one model serve two forwards of
different inputs before a backward (siamese pairs).
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertModel
from transformers.models.bert.modeling_bert import BertLayer
from transformers.pytorch_utils import apply_chunking_to_forward

from pal_lightning.errors import PalUserError
from pal_lightning.hub import resolve_encoder
from pal_lightning.modeling.config import PALConfig
from pal_lightning.modeling.pal import TaskAdapter, additive_mask
from pal_lightning.modeling.sharing import (
    FROZEN,
    INDIVIDUAL,
    layers_with,
    parse_layer_sharing,
    resolve_task_groups,
)
from pal_lightning.modeling.top import build_top_adapter
from pal_lightning.tasks import task_name_of

logger = logging.getLogger(__name__)

ADAPTERS_PREFIX = "adapters"
"""State-dict prefix of every new (task-specific) parameter of :class:`MultiTaskBert`."""

INDIVIDUAL_PREFIX = "individual"
"""State-dict prefix of the per-task copies of individual (I) layers: ``individual.<task>.<layer>.*``."""


@dataclass(frozen=True)
class _TaskCall:
    """What a layer needs for one forward of one task: the adapter and the PAL mask built once."""

    adapter: TaskAdapter | None
    layers: frozenset[int]
    mask: torch.Tensor | None
    top: nn.Module | None = None
    """The task's block after the last layer (variants on top), called by layer ``last``."""
    last: int = -1
    individual: nn.ModuleDict | None = None
    """The task's copies of the individual layers, keyed by layer index (``None``: no I layer)."""


class IndividualLayerSlot(nn.Module):
    """The place of an individual (I) layer in ``bert.encoder.layer``: no parameters, it runs the active
    task's own copy of the layer (handed over in ``pal=``)."""

    def __init__(self, layer_index: int) -> None:
        super().__init__()
        self.layer_index = layer_index

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        pal: _TaskCall | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """The active task's copy of layer ``layer_index`` applied to ``hidden_states``."""
        if pal is None or pal.individual is None:
            raise RuntimeError(f"layer {self.layer_index} is individual: call MultiTaskBert with task=...")
        layer = pal.individual[str(self.layer_index)]
        return layer(hidden_states, attention_mask, encoder_hidden_states, pal=pal, **kwargs)


class PALBertLayer(BertLayer):
    """A ``BertLayer`` that adds TS_t(h) before its output LayerNorm when given ``pal=``.

    Same submodules and parameter names as ``BertLayer``; without ``pal`` (or for a layer outside the
    placement) it is exactly ``BertLayer``.
    """

    def __init__(self, config: BertConfig, layer_idx: int | None = None) -> None:
        super().__init__(config, layer_idx=layer_idx)
        self.layer_index = layer_idx

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        pal: _TaskCall | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """``LN2(h_att + FFN(h_att) + TS_t(h))`` with ``TS_t`` from ``pal``; plain BERT layer otherwise.

        The last layer then applies the task's block on top, if the variant has one.
        """
        if pal is None or pal.adapter is None or self.layer_index not in pal.layers:
            out = super().forward(
                hidden_states,
                attention_mask,
                encoder_hidden_states,
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        else:
            task_term = pal.adapter(self.layer_index, hidden_states, pal.mask)
            attention_output, _ = self.attention(hidden_states, attention_mask, cache=cache, **kwargs)
            # chunking splits both tensors along the sequence the same way
            out = apply_chunking_to_forward(
                self._feed_forward_with_task_term,
                self.chunk_size_feed_forward,
                self.seq_len_dim,
                attention_output,
                task_term,
            )
        if pal is not None and pal.top is not None and self.layer_index == pal.last:
            # BERT's own mask (its format depends on the attention implementation) for a BERT layer on
            # top; the PAL mask for projected attention on top
            out = pal.top(out, attention_mask, pal.mask)
        return out

    def _feed_forward_with_task_term(
        self, attention_output: torch.Tensor, task_term: torch.Tensor
    ) -> torch.Tensor:
        # BertOutput computes LayerNorm(dropout(dense(x)) + input_tensor): the TS term joins the residual.
        return self.output(self.intermediate(attention_output), attention_output + task_term)


@dataclass
class LoadingInfo:
    """What :meth:`MultiTaskBert.from_pretrained` found in the checkpoint."""

    source: str
    """The checkpoint file(s) read."""

    missing_new: list[str] = field(default_factory=list)
    """Keys absent from the checkpoint that are new task-specific parameters (expected)."""

    unexpected: list[str] = field(default_factory=list)
    """Checkpoint keys the encoder does not use (pooler, pre-training heads, ...): ignored."""


def _parameter_safe_name(task: Any) -> str:
    """The name of ``task`` (:func:`~pal_lightning.tasks.task_name_of`), checked to be usable as a key of the
    encoder's ``nn.ModuleDict`` objects (it becomes part of parameter names)."""
    name = task_name_of(task)
    if not name or "." in name or hasattr(nn.ModuleDict(), name):
        raise PalUserError(
            f"Task name {name!r} cannot be used as a parameter name: use a non-empty name without '.' "
            "that is not a torch.nn.ModuleDict attribute (such as 'keys' or 'train')."
        )
    return name


class MultiTaskBert(nn.Module):
    """A BERT encoder shared by all tasks with a task-specific function TS_t per selected layer.

    Args:
        bert_config: the ``transformers.BertConfig`` of the encoder (copied, not modified).
        tasks: task names or :class:`~pal_lightning.tasks.TaskSpec` objects (their ``name`` is used).
        pal: the TS_t configuration; ``None`` means :class:`PALConfig` defaults.
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
        bert_config: BertConfig,
        tasks: Sequence[Any],
        pal: PALConfig | None = None,
        *,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(tasks, str):
            tasks = [tasks]
        names = [_parameter_safe_name(t) for t in tasks]
        if not names:
            raise PalUserError("MultiTaskBert needs at least one task; pass tasks=['sst', ...].")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PalUserError(f"Tasks listed twice: {dupes}. List each task once.")
        config = copy.deepcopy(bert_config)
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            raise PalUserError(
                "MultiTaskBert needs an encoder config: set is_decoder=False and no cross-attention."
            )
        self.pal_config = pal if pal is not None else PALConfig()
        self._task_names: tuple[str, ...] = tuple(names)

        self.bert = BertModel(config, add_pooling_layer=False)
        if attn_implementation is not None:
            try:
                self.bert.set_attn_implementation(attn_implementation)
            except (ValueError, ImportError) as err:
                raise PalUserError(
                    f"Attention implementation {attn_implementation!r} is not available: {err} "
                    "Use 'sdpa' or 'eager'."
                ) from err
        layers = self.bert.encoder.layer
        for i, old in enumerate(layers):
            new = PALBertLayer(self.bert.config, layer_idx=i)
            new.load_state_dict(old.state_dict())  # keep BERT's own initialisation
            layers[i] = new

        num_layers = self.bert.config.num_hidden_layers
        self.layer_sharing: str = parse_layer_sharing(layer_sharing, num_layers)
        self.individual_layers: tuple[int, ...] = layers_with(self.layer_sharing, INDIVIDUAL)
        for i in layers_with(self.layer_sharing, FROZEN):
            layers[i].requires_grad_(False)
        if task_groups and not self.individual_layers:
            raise PalUserError(
                f"task_groups {list(task_groups)} share individual (I) layers, but layer_sharing "
                f"{self.layer_sharing!r} has none: mark the layers to share within groups with I, or drop "
                "task_groups."
            )
        self.task_group: dict[str, str] = resolve_task_groups(task_groups, names)
        """Task -> the name of the group whose copies of the individual layers it uses."""
        self.individual = nn.ModuleDict()
        if self.individual_layers:
            for group in dict.fromkeys(self.task_group.values()):
                self.individual[group] = nn.ModuleDict(
                    {str(i): self._layer_copy(layers[i], i) for i in self.individual_layers}
                )
            for i in self.individual_layers:
                layers[i] = IndividualLayerSlot(i)  # the copies replace the shared layer
        self.pal_layers: tuple[int, ...] = self.pal_config.layer_indices(num_layers)
        self.pal_size: int = self.pal_config.resolved_size(self.hidden_size)
        self.adapters = nn.ModuleDict()
        for name in names:
            if self.pal_config.in_layers:
                self.adapters[name] = TaskAdapter(
                    self.pal_config, self.hidden_size, self.pal_size, self.pal_layers
                )
            elif self.pal_config.on_top:
                self.adapters[name] = build_top_adapter(self.pal_config, self.bert.config, self.pal_size)
        self._start_task_layers()
        self.loading_info: LoadingInfo | None = None

    def _layer_copy(self, layer: nn.Module, index: int) -> PALBertLayer:
        """A new layer with ``layer``'s weights that reads the encoder's own config object (not a deep copy),
        so a later ``set_attn_implementation`` on the encoder reaches it too."""
        new = PALBertLayer(self.bert.config, layer_idx=index)
        new.load_state_dict(layer.state_dict())
        return new

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
                individual = top in self.individual_layers
                group = self.task_group[task]
                start(self.individual[group][str(top)] if individual else self.bert.encoder.layer[top])

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        bert_config: BertConfig | Mapping[str, Any],
        tasks: Sequence[Any],
        adapter: str | None = None,
        pal_size: int | None = None,
        *,
        pal: PALConfig | None = None,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
        **pal_overrides: Any,
    ) -> MultiTaskBert:
        """A randomly initialised encoder (tests, parameter counts).

        Args:
            bert_config: a ``BertConfig`` or the keyword arguments of one (e.g. ``{"hidden_size": 32, ...}``).
            tasks: task names or specs.
            adapter: PAL variant, see :class:`PALConfig` (``None``: the base config's, ``"pals"`` by default).
            pal_size: d_s (``None``: the base config's, i.e. the scaled default unless ``pal`` sets one).
            pal: a base :class:`PALConfig`; ``adapter``, ``pal_size`` and ``pal_overrides`` replace its fields.
            attn_implementation: BERT attention implementation (``"sdpa"``, ``"eager"``).
            layer_sharing: the layer-sharing regime (``None``: all shared), see :class:`MultiTaskBert`.
            task_groups: tasks sharing their individual layers, see :class:`MultiTaskBert`.
            **pal_overrides: other :class:`PALConfig` fields (``num_heads``, ``placement``, ``num_layers``,
                ``init``).
        """
        if isinstance(bert_config, Mapping):
            bert_config = BertConfig(**bert_config)
        base = pal if pal is not None else PALConfig()
        if adapter is not None:
            pal_overrides["adapter"] = adapter
        if pal_size is not None:
            pal_overrides["pal_size"] = pal_size
        config = base.replace(**pal_overrides) if pal_overrides else base
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
        pal: PALConfig | None = None,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
        **pal_overrides: Any,
    ) -> MultiTaskBert:
        """The pretrained encoder ``name_or_path`` with new, task-specific PAL parameters.

        The name goes through :func:`pal_lightning.hub.resolve_encoder` (offline copies first). The
        weights are loaded with a strict check: the only keys the checkpoint may lack are the new
        ``adapters.*`` ones; keys it has that the encoder does not use (pooler, pre-training heads) are
        reported in ``model.loading_info`` and logged at INFO level.

        Raises:
            PalUserError: for an unknown encoder, a non-BERT config, a checkpoint lacking encoder weights
                or with mismatching shapes.
        """
        base = pal if pal is not None else PALConfig()
        config = base.replace(**pal_overrides) if pal_overrides else base
        directory = _local_dir(resolve_encoder(name_or_path))
        try:
            bert_config = BertConfig.from_pretrained(directory, local_files_only=True)
        except (OSError, ValueError) as err:
            raise PalUserError(f"Cannot read the encoder config in {directory}: {err}") from err
        model_type = json.loads((Path(directory) / "config.json").read_text()).get("model_type")
        if model_type not in (None, "bert"):
            raise PalUserError(
                f"Encoder {name_or_path!r} is a {model_type!r} model; MultiTaskBert needs a BERT encoder "
                "(model_type 'bert'), e.g. sentence-transformers/all-MiniLM-L6-v2 or bert-base-uncased."
            )
        model = cls(
            bert_config,
            tasks,
            config,
            attn_implementation=attn_implementation,
            layer_sharing=layer_sharing,
            task_groups=task_groups,
        )
        state, source = _read_checkpoint(Path(directory))
        model.load_pretrained_state(state, source=source)
        return model

    def load_pretrained_state(
        self, state: Mapping[str, torch.Tensor], source: str = "<state dict>"
    ) -> LoadingInfo:
        """Load pretrained BERT weights into :attr:`bert`, checking that only PAL keys are missing.

        Keys may carry a ``bert.`` prefix (``BertFor...`` checkpoints) and old ``LayerNorm.gamma/beta``
        names; both are normalised.

        Raises:
            PalUserError: when a non-PAL key is missing or a shape differs.
        """
        renamed: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            name = key[len("bert.") :] if key.startswith("bert.") else key
            if name.endswith("LayerNorm.gamma"):
                name = name[: -len("gamma")] + "weight"
            elif name.endswith("LayerNorm.beta"):
                name = name[: -len("beta")] + "bias"
            renamed[f"bert.{name}"] = value
        # an individual layer has no place in bert.*: its pretrained weights go to every task's copy
        copied: set[str] = set()
        for i in self.individual_layers:
            prefix = f"bert.encoder.layer.{i}."
            for key in [k for k in renamed if k.startswith(prefix)]:
                copied.add(key)
                for group in self.individual:
                    renamed[f"{INDIVIDUAL_PREFIX}.{group}.{i}.{key[len(prefix) :]}"] = renamed[key]

        expected = self.state_dict()
        # e.g. embeddings.position_ids: saved by old transformers versions, recomputed by new ones
        non_persistent = {
            f"bert.{mod}.{buf}" if mod else f"bert.{buf}"
            for mod, module in self.bert.named_modules()
            for buf in module._non_persistent_buffers_set
        }
        missing = sorted(set(expected) - set(renamed))
        not_new = [k for k in missing if not k.startswith(f"{ADAPTERS_PREFIX}.")]
        if not_new:
            shown = ", ".join(not_new[:8]) + (f" and {len(not_new) - 8} more" if len(not_new) > 8 else "")
            raise PalUserError(
                f"The checkpoint {source} lacks {len(not_new)} encoder weight(s) that are not new PAL "
                f"parameters: {shown}. Point the encoder at a complete BERT checkpoint (a folder saved with "
                "save_pretrained(), or a hub id)."
            )
        unexpected = sorted(
            k for k in renamed if k not in expected and k not in non_persistent and k not in copied
        )
        mismatched = [
            f"{k} (checkpoint {tuple(renamed[k].shape)}, model {tuple(expected[k].shape)})"
            for k in expected
            if k in renamed and renamed[k].shape != expected[k].shape
        ]
        if mismatched:
            raise PalUserError(
                f"Shapes in {source} do not match the encoder config: {', '.join(mismatched[:5])}. "
                "Check that config.json belongs to these weights."
            )
        own = {k: v for k, v in renamed.items() if k in expected}
        result = self.load_state_dict(own, strict=False)
        # checked above: only the new adapters are missing
        assert all(k.startswith(f"{ADAPTERS_PREFIX}.") for k in result.missing_keys), result.missing_keys
        info = LoadingInfo(
            source=source,
            missing_new=[k for k in missing if k.startswith(f"{ADAPTERS_PREFIX}.")],
            unexpected=[k[len("bert.") :] for k in unexpected],
        )
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
    def config(self) -> BertConfig:
        """The encoder's ``BertConfig``."""
        return self.bert.config

    @property
    def hidden_size(self) -> int:
        """d, the encoder width."""
        return int(self.bert.config.hidden_size)

    @property
    def num_layers(self) -> int:
        """L, the number of BERT layers."""
        return int(self.bert.config.num_hidden_layers)

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

    # ------------------------------------------------------------------ parameters
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

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        task: str,
    ) -> torch.Tensor:
        """The last hidden state ``[B, T, d]`` of the encoder with ``task``'s TS_t active.

        Args:
            input_ids: ``[B, T]`` token ids.
            attention_mask: ``[B, T]``, 1 for tokens and 0 for padding (``None``: no padding).
            token_type_ids: ``[B, T]`` segment ids (``None``: all zeros).
            task: the active task; its adapter is used, the others are untouched.

        Raises:
            PalUserError: for a task the encoder was not built with.
        """
        self.check_task(task)
        extra: dict[str, Any] = {}
        group = self.task_group[task]
        if task in self.adapters or group in self.individual:
            adapter = self.adapters[task] if task in self.adapters else None
            dtype = self.bert.embeddings.word_embeddings.weight.dtype
            mask = additive_mask(attention_mask, dtype) if adapter is not None else None  # once per forward
            on_top = self.pal_config.on_top
            extra["pal"] = _TaskCall(
                None if on_top else adapter,
                frozenset(self.pal_layers),
                mask,
                top=adapter if on_top else None,
                last=self.num_layers - 1,
                individual=self.individual[group] if group in self.individual else None,
            )
        out = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            **extra,
        )
        return out.last_hidden_state

    def extra_repr(self) -> str:
        p = self.pal_config
        return (
            f"tasks={list(self._task_names)}, adapter={p.adapter!r}, pal_size={self.pal_size}, "
            f"num_heads={p.num_heads}, layers={list(self.pal_layers)}, init={p.init!r}, "
            f"layer_sharing={self.layer_sharing!r}"
        )


def _local_dir(resolved: str) -> str:
    """A local directory for ``resolved`` (downloads a hub id, which resolve_encoder only returns online)."""
    if Path(resolved).is_dir():
        return resolved
    from huggingface_hub import snapshot_download

    return snapshot_download(resolved, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt"])


def _read_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The state dict in ``directory``: safetensors (single or sharded) first, then pytorch_model.bin."""
    from safetensors.torch import load_file

    single = directory / "model.safetensors"
    if single.is_file():
        return load_file(str(single)), str(single)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(str(directory / shard)))
        return state, str(index)
    legacy = directory / "pytorch_model.bin"
    if legacy.is_file():
        return torch.load(legacy, map_location="cpu", weights_only=True), str(legacy)
    raise PalUserError(
        f"No weights found in {directory}: expected model.safetensors, a sharded safetensors index, or "
        "pytorch_model.bin. Save the encoder with save_pretrained()."
    )
