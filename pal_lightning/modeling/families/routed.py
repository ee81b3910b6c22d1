"""The forwards of :class:`~pal_lightning.modeling.encoder.MultiTaskEncoder` and the calls its hooks read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, cast

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families import EncoderFamily
from pal_lightning.modeling.families.build import TaskParameters
from pal_lightning.modeling.families.prefix import distinct_rows, first_task_layer, run_once_below
from pal_lightning.modeling.families.routing import RowTasks, TaskRouting, route_rows
from pal_lightning.modeling.families.wiring import Part, Segment, TaskCall, Wiring, mixed_call, narrowed
from pal_lightning.modeling.methods import AdapterConfig
from pal_lightning.modeling.methods.batched import RowWeights
from pal_lightning.modeling.methods.pals import additive_mask, scores_dtype


def _rows(tensor: torch.Tensor | None, start: int, stop: int) -> torch.Tensor | None:
    return None if tensor is None else tensor[start:stop]


class RoutedForward(TaskParameters):
    """The forwards of :class:`MultiTaskEncoder` (one task, or rows of several: ``tasks=``) and the calls its
    hooks read; mixed into :class:`MultiTaskEncoder`, which sets the attributes below."""

    family: EncoderFamily
    wiring: Wiring
    adapter_config: AdapterConfig
    adapter_layers: tuple[int, ...]
    individual_layers: tuple[int, ...]
    takes_token_types: bool
    _task_names: tuple[str, ...]
    training: bool  # nn.Module's
    _prefix_once: bool = False  # inside shared_prefix()
    _mixed_rows: Literal["auto", "gather", "loop"] = "auto"

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
    def num_layers(self) -> int:
        """L, the number of encoder layers."""
        return int(self.backbone.config.num_hidden_layers)

    def _copies_of(self, task: str) -> nn.ModuleDict | None:
        group = self.task_group[task]
        return cast(nn.ModuleDict, self.individual[group]) if group in self.individual else None

    def _forward_task(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        task: str,
    ) -> torch.Tensor:
        self.check_task(task)
        return self._run_rows(self.task_call(task, attention_mask), input_ids, attention_mask, token_type_ids)

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

    def _run_rows(
        self,
        call: TaskCall | None,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
    ) -> torch.Tensor:
        # _run, the shared prefix once per distinct row inside shared_prefix()
        if self._prefix_once and not self.training and not torch.is_grad_enabled():
            first = first_task_layer(self)
            types = token_type_ids if self.takes_token_types else None  # the model ignores them otherwise
            rows = distinct_rows(input_ids, attention_mask, types) if first > 0 else None
            if rows is not None and (first < self.num_layers or call is None):
                return run_once_below(self, first, call, (input_ids, attention_mask, token_type_ids), rows)
        return self._run(call, input_ids, attention_mask, token_type_ids)

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

    def _forward_mixed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        tasks: TaskRouting | RowTasks | None,
        task: str | None = None,
    ) -> torch.Tensor:
        if tasks is None or task is not None:
            raise PalUserError(
                "MultiTaskEncoder needs the rows' task: task='sst' for every row, or tasks=[...] with one per "
                "row (not both)."
            )
        routing = tasks if isinstance(tasks, TaskRouting) else self.route(tasks, input_ids.device)
        if routing.size != input_ids.shape[0]:
            raise PalUserError(
                f"tasks names {routing.size} rows but input_ids has {input_ids.shape[0]}: give one task per row."
            )
        if len(routing.tasks) == 1:  # one task: the single-task path, rows in place
            return self._forward_task(input_ids, attention_mask, token_type_ids, routing.tasks[0])
        mask = None if attention_mask is None else routing.sort(attention_mask)
        ids = routing.sort(input_ids)
        types = None if token_type_ids is None or not self.takes_token_types else routing.sort(token_type_ids)
        if self.mixed_by_task:  # one forward per task, on its slice of the sorted rows
            return routing.unsort(
                torch.cat(
                    [
                        self._forward_task(
                            ids[start:stop], _rows(mask, start, stop), _rows(types, start, stop), task
                        )
                        for task, start, stop in routing.slices()
                    ]
                )
            )
        call = self.mixed_task_call(routing, mask)
        if call is None:  # no task present has a module: the shared encoder, rows in place
            return self._run_rows(None, input_ids, attention_mask, token_type_ids)
        return routing.unsort(self._run_rows(call, ids, mask, types))

    def mixed_task_call(self, routing: TaskRouting, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """The hooks' call for ``routing``'s rows sorted by task (``None``: nothing task-specific)."""
        attention_bias = self._attention_bias(attention_mask)
        if self.mixed_rows != "loop":  # every task's module at once, where the method can
            batched = self._batched_call(routing, attention_bias)
            if batched is not None:
                return batched
        segments = [
            Segment(
                start,
                stop,
                self._call_with_mask(task, None if attention_bias is None else attention_bias[start:stop]),
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

    def _batched_call(self, routing: TaskRouting, attention_bias: torch.Tensor | None) -> TaskCall | None:
        # routing's sorted rows with the method's one module for all of them (AdapterMethod.batch_rows,
        # docs/design.md §2); None where the hooks must loop: a method without batch_rows or outside the
        # layers (a block on top), groups of individual layers (their copies run per group), no present task
        # with a module, or mixed_rows "auto" on the CPU (where the step is arithmetic, the loop as fast)
        mode = self.mixed_rows
        method = self.adapter_config.adapter_method
        if not method.where.in_layers or routing.groups:
            return None
        modules = [self.adapters[task] if task in self.adapters else None for task in routing.tasks]
        present = [m for m in modules if m is not None]
        if not present:
            return None
        device = next(present[0].parameters()).device
        if mode == "auto" and device.type == "cpu":
            return None
        counts = torch.tensor([stop - start for _, start, stop in routing.slices()])
        row_tasks = torch.repeat_interleave(torch.arange(len(counts)), counts).to(device)  # each row's k
        module = method.batch_rows(modules, RowWeights(row_tasks))
        if module is None:
            return None
        return method.where.call(module, self.adapter_layers, self.num_layers, attention_bias, None)

    def task_call(self, task: str, attention_mask: torch.Tensor | None) -> TaskCall | None:
        """The hooks' call for one forward of ``task`` (``None``: nothing task-specific)."""
        return self._call_with_mask(
            task, self._attention_bias(attention_mask) if task in self.adapters else None
        )

    def _attention_bias(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        if not len(self.adapters) or not self.adapter_config.adapter_method.where.reads_mask:
            return None
        weight = self.backbone.get_input_embeddings().weight
        assert isinstance(weight, torch.Tensor)
        return additive_mask(attention_mask, scores_dtype(weight.dtype, weight.device))

    def _call_with_mask(self, task: str, attention_bias: torch.Tensor | None) -> TaskCall | None:
        adapter = self.adapters[task] if task in self.adapters else None
        individual = self._copies_of(task)
        if adapter is None and individual is None:
            return None
        mask = attention_bias if adapter is not None else None
        where = self.adapter_config.adapter_method.where
        return where.call(adapter, self.adapter_layers, self.num_layers, mask, individual)
