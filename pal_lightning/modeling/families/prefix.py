"""Several tasks asked of one input: the layers below every task's module (the *shared prefix*) run once per
distinct row, and the rows branch where the first module acts (docs/design.md §2, "Several tasks of one
input"). Used at inference only, inside :meth:`~pal_lightning.modeling.families.routed.RoutedForward.shared_prefix`.

Two passes of the family's own model, so that every family builds its masks and position tensors itself:

1. the distinct rows (same token ids, mask and token types) up to the entry of the first task layer ``k``,
   where a pre-hook stops the forward and keeps the hidden states;
2. all the rows, layers ``[0, k)`` replaced by pass-through stand-ins, the kept states (one copy per row)
   put in at layer ``k``'s entry, layers ``[k, L)`` routed as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pal_lightning.modeling.families.wiring import (
    TaskCall,
    copy_plain_attributes,
    hidden_argument,
    with_first,
    with_hidden_argument,
)
from pal_lightning.modeling.methods.where import Where

if TYPE_CHECKING:
    from pal_lightning.modeling.families.routed import RoutedForward

#: Runs the encoder's model on ``(call, input_ids, attention_mask, token_type_ids)``: its last hidden state.
ModelRun = Callable[[TaskCall | None, torch.Tensor, torch.Tensor | None, torch.Tensor | None], torch.Tensor]


def first_task_layer(encoder: RoutedForward) -> int:
    """The first layer whose output may depend on the task: the lowest layer a task's module acts in (a
    module on top: the last layer, whose arguments it reads) or an individual (I) layer; ``L`` when nothing in
    the encoder is task-specific (heads only). ``0`` (no shared prefix) for a placement this module does not
    know (a user's), for modules with no layers listed, and where a mixed batch runs one forward per task."""
    num_layers = encoder.num_layers
    first = min(encoder.individual_layers, default=num_layers)
    if not len(encoder.adapters):
        return first
    where = encoder.adapter_config.adapter_method.where
    if encoder.mixed_by_task:
        return 0
    if where is Where.TOP:
        return min(first, num_layers - 1)
    if (
        where is not Where.BESIDE and where is not Where.INSIDE
    ):  # NOWHERE with a module, or a user's placement
        return 0
    layers = set(encoder.adapter_layers)
    for module in encoder.adapters.values():  # each module's own list, should it differ from the config's
        layers |= set(getattr(module, "layers", ()))
    return min(first, min(layers)) if layers else 0


def distinct_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, token_type_ids: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first, inverse)``: ``first[u]`` the first row of the ``u``-th distinct input (token ids, mask and
    token types all equal), ``inverse[r]`` the distinct input of row ``r``; ``None`` when no row repeats."""
    columns = [input_ids] + [t for t in (attention_mask, token_type_ids) if t is not None]
    key = torch.cat([c.to(torch.long) for c in columns], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = key.shape[0]
    if unique.shape[0] == rows:
        return None
    position = torch.arange(rows, device=key.device)
    first = torch.full((unique.shape[0],), rows, dtype=torch.long, device=key.device)
    first = first.scatter_reduce(0, inverse, position, reduce="amin")
    return first, inverse


class _PrefixReached(Exception):
    """Raised on the first task layer's entry in pass 1: it carries the hidden states there."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__("the shared prefix is computed")
        self.hidden = hidden


class _Computed(nn.Module):
    """A layer of the shared prefix in pass 2: its hidden states pass through (the layer ran in pass 1), in
    the layer's own output shape (a tensor, or a tuple whose first item is one)."""

    def __init__(self, replaced: nn.Module, output: Any) -> None:
        super().__init__()
        copy_plain_attributes(self, replaced)  # ModernBERT's encoder reads a layer's attention_type
        self._output = [output]  # a list: not a submodule

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return with_first(self._output[0], hidden_argument(args, kwargs))


def _prefix(
    run: ModelRun, layers: nn.ModuleList, first: int, inputs: list[torch.Tensor | None]
) -> tuple[torch.Tensor, Any]:
    # pass 1: the hidden states on layer `first`'s entry, and the output of the layer below (its shape)
    outputs: list[Any] = []

    def stop(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise _PrefixReached(hidden_argument(args, kwargs))

    def keep(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        outputs.append(output)

    handles = [
        layers[first].register_forward_pre_hook(stop, with_kwargs=True, prepend=True),
        layers[first - 1].register_forward_hook(keep),
    ]
    try:
        run(None, *inputs)  # type: ignore[arg-type]  # input_ids is never None
    except _PrefixReached as reached:
        return reached.hidden, outputs[-1]
    finally:
        for handle in handles:
            handle.remove()
    raise RuntimeError(f"the encoder's forward did not reach layer {first}")


def run_once_below(
    run: ModelRun,
    layers: nn.ModuleList,
    first: int,
    call: TaskCall | None,
    inputs: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None],
    rows: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """``run(call, *inputs)``, its layers below ``first`` run once per distinct row (``rows``: from
    :func:`distinct_rows`); ``first == len(layers)``: the whole model once per distinct row (``call`` must
    then be ``None``)."""
    index, inverse = rows
    distinct = [None if t is None else t.index_select(0, index) for t in inputs]
    if first >= len(layers):
        assert call is None, "a task-specific call with no task layer"
        return run(None, *distinct).index_select(0, inverse)  # type: ignore[arg-type]
    hidden, output = _prefix(run, layers, first, distinct)
    branched = hidden.index_select(0, inverse)

    def put_in(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return with_hidden_argument(args, kwargs, branched)

    below = [layers[i] for i in range(first)]
    handle = layers[first].register_forward_pre_hook(put_in, with_kwargs=True, prepend=True)
    try:
        for i, layer in enumerate(below):
            layers[i] = _Computed(layer, output)
        return run(call, *inputs)
    finally:
        for i, layer in enumerate(below):
            layers[i] = layer
        handle.remove()
