"""``MultiTaskEncoder``: a pretrained encoder of any family with per-task modules (PALs, LoRA, ...).

The design (hooks, layer sharing, mixed-task batches) is docs/design.md §2.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import resolve_encoder
from pal_lightning.modeling.encoder_files import local_encoder_dir, read_encoder_config, read_encoder_weights
from pal_lightning.modeling.encoder_state import ENCODER_PREFIX, LoadingInfo, plan_pretrained_load
from pal_lightning.modeling.families import EncoderFamily, family_of
from pal_lightning.modeling.families.build import (
    as_encoder_config,
    backbone,
    hook_layers,
    individual_copies,
    merge_adapter,
    parameter_safe_names,
    task_adapters,
)
from pal_lightning.modeling.families.routed import RoutedForward
from pal_lightning.modeling.families.routing import RowTasks, TaskRouting
from pal_lightning.modeling.families.wiring import Wiring, enable_checkpointing
from pal_lightning.modeling.methods import AdapterConfig
from pal_lightning.modeling.sharing import (
    FROZEN,
    INDIVIDUAL,
    layers_with,
    parse_layer_sharing,
    resolve_task_groups,
)

logger = logging.getLogger(__name__)


class MultiTaskEncoder(RoutedForward, nn.Module):
    """An encoder shared by all tasks with a task-specific module per selected layer (random weights).

    Args:
        encoder_config: the encoder's ``transformers`` config (any family) or its keyword arguments; copied.
        tasks: task names or :class:`~pal_lightning.tasks.specs.TaskSpec` objects.
        adapter: an :class:`AdapterConfig`, a method name, or ``None`` (PALs).
        attn_implementation: ``"sdpa"``, ``"eager"``, ...; ``None`` keeps the config's choice.
        layer_sharing: one letter per layer (F frozen, S shared, I individual), e.g. ``"FFSSII"``;
            ``None``: all shared.
        task_groups: groups of tasks sharing their copies of the I layers, e.g. ``[["sst", "qqp"]]``.
    """

    def __init__(
        self,
        encoder_config: PretrainedConfig | Mapping[str, Any],
        tasks: Sequence[Any],
        adapter: AdapterConfig | str | None = None,
        *,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__()
        names = parameter_safe_names(tasks)
        self.adapter_config = AdapterConfig.coerce(adapter)
        self._task_names: tuple[str, ...] = tuple(names)
        config = as_encoder_config(encoder_config)
        self.family: EncoderFamily = family_of(config)
        self.wiring = Wiring(family_pre_norm=self.family.join_norm is None)
        # RoBERTa and DeBERTa checkpoints have one segment (or none): their token types are all 0
        self.takes_token_types = self.family.token_types and int(getattr(config, "type_vocab_size", 2)) > 1
        self.backbone = backbone(config, self.family, attn_implementation)
        num_layers = self.num_layers
        self.layer_sharing: str = parse_layer_sharing(layer_sharing, num_layers)
        self.individual_layers: tuple[int, ...] = layers_with(self.layer_sharing, INDIVIDUAL)
        for i in layers_with(self.layer_sharing, FROZEN):
            self.family.layer_list(self.backbone)[i].requires_grad_(False)
        self.task_group: dict[str, str] = resolve_task_groups(task_groups, names, self.layer_sharing)
        """Task -> the name of the group whose copies of the individual layers it uses."""
        self.individual = individual_copies(
            self.backbone, self.family, self.wiring, self.individual_layers, self.task_group.values()
        )
        self.adapter_layers: tuple[int, ...] = self.adapter_config.layer_indices(num_layers)
        self.adapter_size: int = self.adapter_config.resolved_size(self.hidden_size)
        self.adapters = task_adapters(self.adapter_config, self.backbone.config, names, self.adapter_size)
        hook_layers(self)
        self._start_task_layers()
        self.loading_info: LoadingInfo | None = None

    @torch.no_grad()
    def _start_task_layers(self) -> None:
        # again after loading: a BERT layer on top with init="zero" copies the *pretrained* last layer
        top = self.num_layers - 1
        for task, adapter in self.adapters.items():
            start = getattr(adapter, "start_from", None)
            if callable(start):
                copies = self._copies_of(task)
                start(
                    copies[str(top)]
                    if copies is not None and top in self.individual_layers
                    else self.family.layer_list(self.backbone)[top]
                )

    @classmethod
    def from_config(
        cls,
        encoder_config: PretrainedConfig | Mapping[str, Any],
        tasks: Sequence[Any],
        adapter: AdapterConfig | str | None = None,
        *,
        attn_implementation: str | None = None,
        layer_sharing: str | None = None,
        task_groups: Sequence[Sequence[str]] | None = None,
        **adapter_options: Any,
    ) -> MultiTaskEncoder:
        """A randomly initialised encoder; ``encoder_config`` may be a config's keyword arguments
        (``"model_type"`` picks the family) and ``adapter_options`` replace :class:`AdapterConfig` fields."""
        if isinstance(adapter, Mapping):  # its fields and the options, validated together
            adapter_options = {**adapter, **adapter_options}
            adapter = None
        config = AdapterConfig.coerce(adapter)
        if adapter_options:
            config = config.replace(**adapter_options)
        return cls(
            encoder_config,
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
        **options: Any,
    ) -> MultiTaskEncoder:
        """The pretrained encoder ``name_or_path`` (:func:`~pal_lightning.core.hub.resolve_encoder`) with new
        task modules; ``options`` (``attn_implementation``, ``layer_sharing``, ``task_groups``, adapter
        options) as :meth:`from_config`. Unused checkpoint keys go to ``loading_info``. Raises
        ``PalUserError`` for an unknown encoder or family, missing encoder weights or mismatching shapes."""
        directory = local_encoder_dir(resolve_encoder(os.fspath(name_or_path)))
        model = cls.from_config(read_encoder_config(directory, name_or_path), tasks, adapter, **options)
        state, source = read_encoder_weights(Path(directory))
        model.load_pretrained_state(state, source=source)
        return model

    def load_pretrained_state(
        self, state: Mapping[str, torch.Tensor], source: str = "<state dict>"
    ) -> LoadingInfo:
        """Load pretrained weights into :attr:`backbone`
        (:func:`~pal_lightning.modeling.encoder_state.plan_pretrained_load`). Raises ``PalUserError`` when a
        non-adapter key is missing or a shape differs."""
        # buffers BERT does not save (e.g. embeddings.position_ids, which old transformers versions saved)
        saved = set(self.backbone.state_dict(prefix=f"{ENCODER_PREFIX}."))
        buffers = {n for n, _ in self.backbone.named_buffers(prefix=ENCODER_PREFIX, remove_duplicate=False)}
        own, info = plan_pretrained_load(
            state,
            self.state_dict(),
            individual_layers=self.individual_layers,
            groups=list(self.individual),
            not_saved=buffers - saved,
            source=source,
            model_prefix=str(getattr(self.backbone, "base_model_prefix", "")),
            layers_path=self.family.layers,
        )
        self.load_state_dict(own, strict=False)  # the plan checked that only adapters.* are missing
        if info.unexpected:
            logger.info(
                "Ignored %d checkpoint key(s) unused by the encoder: %s",
                len(info.unexpected),
                info.unexpected,
            )
        self.loading_info = info
        self._start_task_layers()
        return info

    @property
    def config(self) -> PretrainedConfig:
        """The encoder's ``transformers`` config."""
        return self.backbone.config

    @property
    def embeddings(self) -> nn.Module:
        """The encoder's embedding block."""
        return self.backbone.get_submodule("embeddings")

    @property
    def hidden_size(self) -> int:
        """d, the encoder width."""
        return int(self.backbone.config.hidden_size)

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

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        task: str | None = None,
        tasks: TaskRouting | RowTasks | None = None,
    ) -> torch.Tensor:
        """The last hidden state ``[B, T, d]`` with ``task``'s modules active, or each row's own task's
        (``tasks``: a ``LongTensor[B]`` of indices into :attr:`task_names`, ``B`` names, or a
        :class:`TaskRouting` from :meth:`route`); rows come back in the input order. Raises ``PalUserError``
        for an unknown task, or not exactly one of ``task`` and ``tasks``."""
        if tasks is not None or task is None:
            return self._forward_mixed(input_ids, attention_mask, token_type_ids, tasks, task)
        return self._forward_task(input_ids, attention_mask, token_type_ids, task)

    def merge(self, task: str) -> None:
        """Fold ``task``'s LoRA into the encoder's weights and drop every task's module (a single-task copy).
        Raises ``PalUserError`` when the method's modules cannot be folded (only linear deltas can)."""
        self.check_task(task)
        if task in self.adapters:
            merge_adapter(self, task)
        for name in list(self.adapters):
            del self.adapters[name]

    def gradient_checkpointing_enable(self) -> None:
        """Non-reentrant activation checkpointing, with the task's modules active in the recomputation."""
        enable_checkpointing(self.backbone, self.individual, self.wiring)

    def extra_repr(self) -> str:
        p = self.adapter_config
        return (
            f"family={self.family.name!r}, tasks={list(self._task_names)}, adapter={p.method!r}, size={self.adapter_size}, "
            f"num_heads={p.num_heads}, layers={list(self.adapter_layers)}, init={p.init!r}, "
            f"layer_sharing={self.layer_sharing!r}"
        )
