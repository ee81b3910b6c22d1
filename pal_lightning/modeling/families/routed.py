"""The forwards of :class:`~pal_lightning.modeling.encoder.MultiTaskEncoder` (one task, or rows of several:
``tasks=``) and the calls its hooks read, as functions of the encoder."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families.prefix import distinct_rows, first_task_layer, run_once_below
from pal_lightning.modeling.families.routing import RowTasks, TaskRouting
from pal_lightning.modeling.families.wiring import Part, Segment, TaskCall, mixed_call, narrowed
from pal_lightning.modeling.methods.batched import RowWeights
from pal_lightning.modeling.methods.pals import additive_mask, scores_dtype

if TYPE_CHECKING:
    from pal_lightning.modeling.encoder import MultiTaskEncoder


def _rows(tensor: torch.Tensor | None, start: int, stop: int) -> torch.Tensor | None:
    return None if tensor is None else tensor[start:stop]


def forward_task(
    encoder: MultiTaskEncoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    task: str,
) -> torch.Tensor:
    """``encoder``'s last hidden state with ``task``'s modules active for every row. Raises ``PalUserError``
    for an unknown task."""
    encoder.check_task(task)
    return run_rows(
        encoder, encoder.task_call(task, attention_mask), input_ids, attention_mask, token_type_ids
    )


def run_rows(
    encoder: MultiTaskEncoder,
    call: TaskCall | None,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
) -> torch.Tensor:
    """``encoder._run(call, ...)``, the shared prefix once per distinct row inside
    :meth:`MultiTaskEncoder.shared_prefix`."""
    if encoder._prefix_once and not encoder.training and not torch.is_grad_enabled():
        first = first_task_layer(encoder)
        types = token_type_ids if encoder.takes_token_types else None  # the model ignores them otherwise
        rows = distinct_rows(input_ids, attention_mask, types) if first > 0 else None
        if rows is not None and (first < encoder.num_layers or call is None):
            return run_once_below(encoder, first, call, (input_ids, attention_mask, token_type_ids), rows)
    return encoder._run(call, input_ids, attention_mask, token_type_ids)


def forward_mixed(
    encoder: MultiTaskEncoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    tasks: TaskRouting | RowTasks | None,
    task: str | None = None,
) -> torch.Tensor:
    """``encoder``'s last hidden state with each row's own task's modules active (``tasks``: as
    :meth:`MultiTaskEncoder.forward` takes them), rows in the input order. Raises ``PalUserError`` for an
    unknown task, a routing of another number of rows, or not exactly one of ``task`` and ``tasks``."""
    if tasks is None or task is not None:
        raise PalUserError(
            "MultiTaskEncoder needs the rows' task: task='sst' for every row, or tasks=[...] with one per "
            "row (not both)."
        )
    routing = tasks if isinstance(tasks, TaskRouting) else encoder.route(tasks, input_ids.device)
    if routing.size != input_ids.shape[0]:
        raise PalUserError(
            f"tasks names {routing.size} rows but input_ids has {input_ids.shape[0]}: give one task per row."
        )
    if len(routing.tasks) == 1:  # one task: the single-task path, rows in place
        return forward_task(encoder, input_ids, attention_mask, token_type_ids, routing.tasks[0])
    mask = None if attention_mask is None else routing.sort(attention_mask)
    ids = routing.sort(input_ids)
    types = None if token_type_ids is None or not encoder.takes_token_types else routing.sort(token_type_ids)
    if encoder.mixed_by_task:  # one forward per task, on its slice of the sorted rows
        return routing.unsort(
            torch.cat(
                [
                    forward_task(
                        encoder, ids[start:stop], _rows(mask, start, stop), _rows(types, start, stop), task
                    )
                    for task, start, stop in routing.slices()
                ]
            )
        )
    call = encoder.mixed_task_call(routing, mask)
    if call is None:  # no task present has a module: the shared encoder, rows in place
        return run_rows(encoder, None, input_ids, attention_mask, token_type_ids)
    return routing.unsort(run_rows(encoder, call, ids, mask, types))


def routed_call(
    encoder: MultiTaskEncoder, routing: TaskRouting, attention_mask: torch.Tensor | None
) -> TaskCall | None:
    """The hooks' call for ``routing``'s rows sorted by task (``None``: nothing task-specific):
    :meth:`MultiTaskEncoder.mixed_task_call`."""
    bias = attention_bias(encoder, attention_mask)
    if encoder.mixed_rows != "loop":  # every task's module at once, where the method can
        batched = _batched_call(encoder, routing, bias)
        if batched is not None:
            return batched
    segments = [
        Segment(
            start,
            stop,
            call_with_mask(encoder, task, None if bias is None else bias[start:stop]),
        )
        for task, start, stop in routing.slices()
    ]
    if all(segment.call is None for segment in segments):
        return None
    call = mixed_call(segments, encoder.num_layers)
    parts = [
        Part(start, stop, cast(nn.ModuleDict, encoder.individual[group]), narrowed(call, start, stop))
        for group, start, stop in routing.groups
    ]
    return mixed_call(segments, encoder.num_layers, parts) if parts else call


def _batched_call(
    encoder: MultiTaskEncoder, routing: TaskRouting, attention_bias: torch.Tensor | None
) -> TaskCall | None:
    # routing's sorted rows with the method's one module for all of them (AdapterMethod.batch_rows,
    # docs/design.md §2); None where the hooks must loop: a method without batch_rows or outside the
    # layers (a block on top), groups of individual layers (their copies run per group), no present task
    # with a module, or mixed_rows "auto" on the CPU (where the step is arithmetic, the loop as fast)
    mode = encoder.mixed_rows
    method = encoder.adapter_config.adapter_method
    if not method.where.in_layers or routing.groups:
        return None
    modules = [encoder.adapters[task] if task in encoder.adapters else None for task in routing.tasks]
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
    return method.where.call(module, encoder.adapter_layers, encoder.num_layers, attention_bias, None)


def attention_bias(encoder: MultiTaskEncoder, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The additive mask the tasks' modules read (``None`` where no module reads one)."""
    if not len(encoder.adapters) or not encoder.adapter_config.adapter_method.where.reads_mask:
        return None
    weight = encoder.backbone.get_input_embeddings().weight
    assert isinstance(weight, torch.Tensor)
    return additive_mask(attention_mask, scores_dtype(weight.dtype, weight.device))


def call_with_mask(
    encoder: MultiTaskEncoder, task: str, attention_bias: torch.Tensor | None
) -> TaskCall | None:
    """The hooks' call for ``task``'s module and (group's) individual layers, its module reading
    ``attention_bias`` (``None``: nothing task-specific)."""
    adapter = encoder.adapters[task] if task in encoder.adapters else None
    individual = encoder._copies_of(task)
    if adapter is None and individual is None:
        return None
    mask = attention_bias if adapter is not None else None
    where = encoder.adapter_config.adapter_method.where
    return where.call(adapter, encoder.adapter_layers, encoder.num_layers, mask, individual)
