"""``MultiTaskEncoder``: a pretrained encoder of any family with per-task modules (PALs, LoRA, ...).

The design (hooks, layer sharing, mixed-task batches) is docs/design.md §2.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import torch
from torch import nn
from transformers import PretrainedConfig

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import resolve_encoder
from pal_lightning.modeling.encoder_files import local_encoder_dir, read_encoder_config, read_encoder_weights
from pal_lightning.modeling.encoder_state import (
    ADAPTERS_PREFIX,
    ENCODER_PREFIX,
    INDIVIDUAL_PREFIX,
    LoadingInfo,
)
from pal_lightning.modeling.families import EncoderFamily, family_of
from pal_lightning.modeling.families.build import (
    as_encoder_config,
    backbone,
    hook_layers,
    individual_copies,
    merge_adapter,
    parameter_safe_names,
    pretrained_load_plan,
    start_task_layers,
    task_adapters,
)
from pal_lightning.modeling.families.routed import (
    attention_bias,
    call_with_mask,
    forward_mixed,
    forward_task,
    routed_call,
)
from pal_lightning.modeling.families.routing import RowTasks, TaskRouting, route_rows
from pal_lightning.modeling.families.wiring import TaskCall, Wiring, enable_checkpointing
from pal_lightning.modeling.methods import AdapterConfig
from pal_lightning.modeling.sharing import (
    FROZEN,
    INDIVIDUAL,
    layers_with,
    parse_layer_sharing,
    resolve_task_groups,
)

logger = logging.getLogger(__name__)


class MultiTaskEncoder(nn.Module):
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

    _prefix_once: bool = False  # inside shared_prefix()
    _mixed_rows: Literal["auto", "gather", "loop"] = "auto"

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
        start_task_layers(self)
        self.loading_info: LoadingInfo | None = None

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
        own, info = pretrained_load_plan(self, state, source)
        self.load_state_dict(own, strict=False)  # the plan checked that only adapters.* are missing
        if info.unexpected:
            logger.info(
                "Ignored %d checkpoint key(s) unused by the encoder: %s",
                len(info.unexpected),
                info.unexpected,
            )
        self.loading_info = info
        start_task_layers(self)
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
    def num_layers(self) -> int:
        """L, the number of encoder layers."""
        return int(self.backbone.config.num_hidden_layers)

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

    def pretrained_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of every pretrained weight: ``backbone.*`` and ``individual.*``."""
        yield from self.backbone.named_parameters(prefix=ENCODER_PREFIX)
        yield from self.individual.named_parameters(prefix=INDIVIDUAL_PREFIX)

    def shared_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of the encoder every task uses (``backbone.*``)."""
        yield from self.backbone.named_parameters(prefix=ENCODER_PREFIX)

    def individual_parameters(self, task: str) -> Iterator[tuple[str, nn.Parameter]]:
        """(name, parameter) of the copies of the individual layers ``task`` uses (its group's)."""
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
        """(name, parameter) of ``task``'s adapter and (group's) individual layers."""
        yield from self.adapter_parameters(task)
        yield from self.individual_parameters(task)

    @property
    def mixed_rows(self) -> Literal["auto", "gather", "loop"]:
        """How a mixed batch runs the present tasks' modules: ``"gather"`` at once where the method can
        (``AdapterMethod.batch_rows``), ``"loop"`` the hooks' loop over the tasks, ``"auto"`` at once off
        the CPU and the loop on it, where the step is arithmetic (docs/design.md §2, "All present tasks at
        once"). Another value is refused when it is set, not at the next mixed forward."""
        return self._mixed_rows

    @mixed_rows.setter
    def mixed_rows(self, mode: Literal["auto", "gather", "loop"]) -> None:
        if mode not in ("auto", "gather", "loop"):
            raise PalUserError(
                f"encoder.mixed_rows must be 'auto', 'gather' or 'loop', got {mode!r}: 'auto' runs the tasks' "
                "modules at once off the CPU and loops over the tasks on it."
            )
        self._mixed_rows = mode

    @property
    def mixed_by_task(self) -> bool:
        """Whether a mixed batch runs one forward per task (the method acts on a ``row_shared_sites`` site)."""
        sites = {site for adapter in self.adapters.values() for site in getattr(adapter, "sites", ())}
        return bool(sites & set(self.family.row_shared_sites))

    def route(self, tasks: RowTasks, device: torch.device | str | None = None) -> TaskRouting:
        """Each row's task (indices or names) grouped by task once, to pass as ``tasks=`` to :meth:`forward`.
        Raises ``PalUserError`` for an unknown task or index, or no row."""
        return route_rows(
            tasks, self._task_names, self.task_group if self.individual_layers else None, device
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
            return forward_mixed(self, input_ids, attention_mask, token_type_ids, tasks, task)
        return forward_task(self, input_ids, attention_mask, token_type_ids, task)

    @contextmanager
    def shared_prefix(self) -> Iterator[None]:
        """Inside, a forward in eval mode without gradients runs the layers below every task's module (the
        shared prefix: :func:`~pal_lightning.modeling.families.prefix.first_task_layer`) once per distinct
        row (same token ids, mask and token types: one text asked of several tasks), and its rows branch where
        the modules begin; the outputs are a plain forward's within float rounding. Training, a forward with
        gradients and an encoder whose modules start at layer 0 take the plain path."""
        previous, self._prefix_once = self._prefix_once, True
        try:
            yield
        finally:
            self._prefix_once = previous

    def task_call(self, task: str, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """The hooks' call for one forward of ``task`` (``None``: nothing task-specific)."""
        return call_with_mask(
            self, task, attention_bias(self, attention_mask) if task in self.adapters else None
        )

    def mixed_task_call(self, routing: TaskRouting, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """The hooks' call for ``routing``'s rows sorted by task (``None``: nothing task-specific)."""
        return routed_call(self, routing, attention_mask)

    def _copies_of(self, task: str) -> nn.ModuleDict | None:
        group = self.task_group[task]
        return cast(nn.ModuleDict, self.individual[group]) if group in self.individual else None

    def _run(
        self,
        call: TaskCall | None,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.takes_token_types:
            inputs["token_type_ids"] = token_type_ids
        with self.wiring.active(call):
            return self.backbone(**inputs).last_hidden_state

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
