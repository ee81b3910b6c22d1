"""Several tasks asked of one input: the layers below every task's module (the *shared prefix*) run once per
distinct row, and the rows branch where the first module acts (docs/design.md §2, "Several tasks of one
input"). Used at inference only, inside
:meth:`~pal_lightning.modeling.encoder.MultiTaskEncoder.shared_prefix`.

Two passes of the family's own model, so that every family builds its masks and position tensors itself:

1. the distinct rows (same token ids, mask and token types) up to the entry of the first task layer ``k``,
   where a pre-hook stops the forward and keeps the hidden states (PALs beside a post-LN layer: through
   layer ``k`` but for its join norm, whose input is kept too, as the attention and FFN see one input);
2. all the rows, layers ``[0, k)`` replaced by pass-through stand-ins, the kept states (one copy per row)
   put in at layer ``k``'s entry (or its join norm's), layers ``[k, L)`` routed as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pal_lightning.modeling.families.wiring import (
    IndividualLayerSlot,
    LayerPreHook,
    TaskCall,
    copy_plain_attributes,
    first_of,
    hidden_argument,
    with_first,
    with_hidden_argument,
)
from pal_lightning.modeling.methods.where import Where

if TYPE_CHECKING:
    from pal_lightning.modeling.encoder import MultiTaskEncoder

#: Runs the encoder's model on ``(call, input_ids, attention_mask, token_type_ids)``: its last hidden state.
ModelRun = Callable[[TaskCall | None, torch.Tensor, torch.Tensor | None, torch.Tensor | None], torch.Tensor]


def first_task_layer(encoder: MultiTaskEncoder) -> int:
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
    # NOWHERE with a module, or a user's placement: when in doubt, no shared prefix
    if where is not Where.BESIDE and where is not Where.INSIDE:
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
    """Raised in pass 1 where the shared prefix ends: the rest of the forward is not run."""


class _Computed(nn.Module):
    """A layer of the shared prefix in pass 2: its hidden states pass through (the layer ran in pass 1), in
    the layer's own output shape (a tensor, or a tuple whose first item is one)."""

    def __init__(self, replaced: nn.Module, output: Any) -> None:
        super().__init__()
        copy_plain_attributes(self, replaced)  # ModernBERT's encoder reads a layer's attention_type
        self._output = [output]  # a list: not a submodule

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return with_first(self._output[0], hidden_argument(args, kwargs))


class _Joined(nn.Module):
    """Layer ``first`` in pass 2 when the rows branch at its join norm (PALs beside a post-LN layer): its
    attention and FFN ran once per distinct row in pass 1; each row's task term is computed here on the
    branched entry states and joins the branched residual sum through the join norm, whose hook adds it."""

    def __init__(
        self,
        replaced: nn.Module,
        output: Any,
        join: nn.Module,
        terms: LayerPreHook,
        states: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        super().__init__()
        copy_plain_attributes(self, replaced)
        self._parts = [output, join, terms, *states]  # a list: not submodules

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output, join, terms, entry, residual = self._parts
        args, kwargs = with_hidden_argument(args, kwargs, entry)
        terms(self, args, kwargs)  # what the layer's own entry hook does: each row's task term
        return with_first(output, join(residual))


@dataclass
class _Prefix:
    """What pass 1 keeps of the distinct rows: the hidden states on layer ``first``'s ``entry``, layer
    ``first - 1``'s output (``below``, in its shape) and, when layer ``first``'s output is its join norm's,
    that norm's input (``residual``) and the layer's ``output``."""

    entry: torch.Tensor
    below: Any
    residual: torch.Tensor | None = None
    output: Any = None


def join_norm(encoder: MultiTaskEncoder, first: int) -> nn.Module | None:
    """Layer ``first``'s join norm when the rows may branch there rather than on the layer's entry: the
    tasks' modules are beside the layers (PALs) of a post-LN family, so that the layer's attention and FFN
    see one input for every task and only the join differs; ``None`` otherwise (an I layer's slot, too)."""
    family = encoder.family
    if encoder.adapter_config.adapter_method.where is not Where.BESIDE or family.join_norm is None:
        return None
    layer = family.layer_list(encoder.backbone)[first]
    return None if isinstance(layer, IndividualLayerSlot) else layer.get_submodule(family.join_norm)


def _prefix(
    run: ModelRun,
    layers: nn.ModuleList,
    first: int,
    inputs: list[torch.Tensor | None],
    join: nn.Module | None,
) -> _Prefix:
    # pass 1 on the distinct rows: up to layer `first`'s entry, or through it when the rows may branch at its
    # join norm (kept only where the layer's output is the norm's own: checked, not assumed)
    found: dict[str, Any] = {}

    def entry(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        found["entry"] = hidden_argument(args, kwargs)
        if join is None:
            raise _PrefixReached()

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any = None) -> None:
            found[name] = args[0] if output is None else output

        return hook

    def done(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        found["output"] = output
        raise _PrefixReached()

    handles = [
        layers[first].register_forward_pre_hook(entry, with_kwargs=True, prepend=True),
        layers[first - 1].register_forward_hook(keep("below")),
    ]
    if join is not None:
        handles += [
            join.register_forward_pre_hook(keep("residual"), prepend=True),
            join.register_forward_hook(keep("normed"), prepend=True),
            layers[first].register_forward_hook(done),
        ]
    try:
        run(None, *inputs)  # type: ignore[arg-type]  # input_ids is never None
    except _PrefixReached:
        pass
    else:
        raise RuntimeError(f"the encoder's forward did not reach layer {first}")
    finally:
        for handle in handles:
            handle.remove()
    prefix = _Prefix(found["entry"], found["below"])
    if "output" in found and first_of(found["output"]) is found.get("normed"):
        prefix.residual, prefix.output = found["residual"], found["output"]
    return prefix


def run_once_below(
    encoder: MultiTaskEncoder,
    first: int,
    call: TaskCall | None,
    inputs: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None],
    rows: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """``encoder._run(call, *inputs)``, its layers below ``first`` (and layer ``first`` but for its join,
    where :func:`join_norm` allows) run once per distinct row (``rows``: from :func:`distinct_rows`);
    ``first == L``: the whole model once per distinct row (``call`` must then be ``None``)."""
    run: ModelRun = encoder._run
    layers = encoder.family.layer_list(encoder.backbone)
    index, inverse = rows
    distinct = [None if t is None else t.index_select(0, index) for t in inputs]
    if first >= len(layers):
        assert call is None, "a task-specific call with no task layer"
        return run(None, *distinct).index_select(0, inverse)  # type: ignore[arg-type]
    join = join_norm(encoder, first)
    prefix = _prefix(run, layers, first, distinct, join)
    entry = prefix.entry.index_select(0, inverse)
    replaced: dict[int, nn.Module] = {i: _Computed(layers[i], prefix.below) for i in range(first)}
    handle = None
    if prefix.residual is not None:
        assert join is not None
        states = (entry, prefix.residual.index_select(0, inverse))
        terms = LayerPreHook(encoder.wiring, first)
        replaced[first] = _Joined(layers[first], prefix.output, join, terms, states)
    else:

        def put_in(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return with_hidden_argument(args, kwargs, entry)

        handle = layers[first].register_forward_pre_hook(put_in, with_kwargs=True, prepend=True)
    originals = {i: layers[i] for i in replaced}
    try:
        for i, stand_in in replaced.items():
            layers[i] = stand_in
        return run(call, *inputs)
    finally:
        for i, layer in originals.items():
            layers[i] = layer
        if handle is not None:
            handle.remove()
