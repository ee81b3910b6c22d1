"""How a task's modules enter an encoder's layers: hooks placed once read the active :class:`TaskCall`
(docs/design.md §2; a mixed call holds one :class:`Segment` per task present)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from pal_lightning.modeling.families.base import EncoderFamily

#: Runs a layer on new hidden states with the last layer's other arguments.
LayerRunner = Callable[[nn.Module, torch.Tensor], torch.Tensor]


class Segment(NamedTuple):
    """One task's rows ``[start, stop)`` of a mixed call's sorted batch, and its call (``None``: none)."""

    start: int
    stop: int
    call: TaskCall | None


class Part(NamedTuple):
    """One group's rows ``[start, stop)`` of a mixed call, its copies of the I layers and their call."""

    start: int
    stop: int
    copies: nn.ModuleDict
    call: TaskCall


@dataclass
class TaskCall:
    """What the hooks need during one forward of one task (or, with :attr:`segments`, of several)."""

    beside: nn.Module | None = None
    """The task's module beside the layers (``forward(layer, hidden, mask)``)."""
    inside: nn.Module | None = None
    """The task's module on the layers' sites (``delta(layer, site, x, y)``)."""
    top: nn.Module | None = None
    """The task's block after the last layer."""
    layers: frozenset[int] = frozenset()
    """The layers ``beside`` or ``inside`` acts in."""
    mask: torch.Tensor | None = None
    """The additive padding mask ``[B, 1, 1, T]`` of the PAL attention."""
    last: int = -1
    """The index of the last layer."""
    individual: nn.ModuleDict | None = None
    """The task's copies of the individual layers, keyed by layer index."""
    terms: dict[int, torch.Tensor] = field(default_factory=dict)
    """The BESIDE terms, computed on each layer's entry."""
    last_arguments: tuple[tuple[Any, ...], dict[str, Any]] = ((), {})
    """The last layer's arguments after the hidden states, for a block on top."""
    segments: tuple[Segment, ...] = ()
    """A mixed call's tasks and their rows (empty: a call of one task)."""
    parts: tuple[Part, ...] = ()
    """A mixed call's groups of rows for the individual layers."""


def mixed_call(segments: Iterable[Segment], num_layers: int, parts: Iterable[Part] = ()) -> TaskCall:
    """The call of a batch whose rows, sorted by task, are ``segments``."""
    return TaskCall(last=num_layers - 1, segments=tuple(segments), parts=tuple(parts))


def narrowed(call: TaskCall, start: int, stop: int) -> TaskCall:
    """``call`` cut to its rows ``[start, stop)``, renumbered from 0 (one task's own call if only it remains)."""
    inside = [s for s in call.segments if start <= s.start and s.stop <= stop]
    if len(inside) == 1 and inside[0].call is not None:
        return inside[0].call
    shifted = [Segment(s.start - start, s.stop - start, s.call) for s in inside]
    return mixed_call(shifted, call.last + 1)


class Wiring:
    """The active call of one encoder, read by its hooks."""

    def __init__(self, family_pre_norm: bool = False) -> None:
        self.call: TaskCall | None = None
        self.family_pre_norm = family_pre_norm
        """Whether the layers are pre-LN (a BESIDE term joins the layer's output)."""

    @contextmanager
    def active(self, call: TaskCall | None) -> Iterator[None]:
        """Make ``call`` the active call inside the block."""
        previous, self.call = self.call, call
        try:
            yield
        finally:
            self.call = previous

    def checkpoint_contexts(self) -> tuple[Any, Any]:
        """Checkpointing's ``context_fn``: the recomputation runs under the call active in the forward."""
        return nullcontext(), self.active(self.call)


def first_of(output: Any) -> torch.Tensor:
    """A layer's hidden states in its ``output`` (a tensor, or a tuple whose first item is one)."""
    return output if isinstance(output, torch.Tensor) else output[0]


def with_first(output: Any, hidden: torch.Tensor) -> Any:
    """A layer's ``output`` (a tensor, or a tuple whose first item is one) with ``hidden`` first."""
    return hidden if isinstance(output, torch.Tensor) else (hidden, *output[1:])


#: The keywords a family's encoder may pass a layer's hidden states under (DistilBERT's: ``x``).
HIDDEN_KEYWORDS = ("hidden_states", "hidden_state", "x")


def _hidden_keyword(kwargs: dict[str, Any]) -> str:
    name = next((n for n in HIDDEN_KEYWORDS if n in kwargs), None)
    if name is None:
        raise RuntimeError("an encoder layer was called without hidden states")
    return name


def hidden_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """The hidden states among a layer's arguments: the first positional one, else a keyword's."""
    return args[0] if args else kwargs[_hidden_keyword(kwargs)]


def with_hidden_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], hidden: torch.Tensor
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A layer's arguments with ``hidden`` in place of the hidden states (:func:`hidden_argument`'s)."""
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, _hidden_keyword(kwargs): hidden}


def rows_of(value: Any, start: int, stop: int, batch: int, length: int) -> Any:
    """A layer argument cut to rows ``[start, stop)``: tensors shaped ``[batch, ..., length]`` (masks,
    position bias) are sliced, also inside tuples and lists; anything else is shared by the rows."""
    if isinstance(value, torch.Tensor):
        if value.dim() >= 2 and value.shape[0] == batch and value.shape[-1] == length:
            return value[start:stop]
        return value
    if isinstance(value, tuple | list):
        return type(value)(rows_of(v, start, stop, batch, length) for v in value)
    return value


def _arguments_of(
    args: tuple[Any, ...], kwargs: dict[str, Any], start: int, stop: int, batch: int, length: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (
        tuple(rows_of(a, start, stop, batch, length) for a in args),
        {k: rows_of(v, start, stop, batch, length) for k, v in kwargs.items()},
    )


def check_rows(rows: torch.Tensor, size: int, where: str) -> None:
    """Raise ``RuntimeError`` when ``rows`` is not rows first (``size`` of them): they cannot be routed."""
    if rows.dim() < 2 or rows.shape[0] != size:
        raise RuntimeError(
            f"a mixed-task forward reached {where} with {rows.shape[0]} rows for a batch of "
            f"{size}: this family does not keep rows first there, so rows cannot be routed"
        )


def _check_rows(call: TaskCall, rows: torch.Tensor, where: str) -> None:
    check_rows(rows, call.segments[-1].stop, where)


class _Hook:
    """A hook of layer ``index``; an object, not a closure, so that ``deepcopy`` rebinds its wiring."""

    def __init__(self, wiring: Wiring, index: int) -> None:
        self.wiring = wiring
        self.index = index


class LayerPreHook(_Hook):
    """On a layer's entry: the BESIDE term; the last layer's arguments for a block on top."""

    def __call__(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        call = self.wiring.call
        if call is None:
            return
        if call.segments:
            self.mixed(call, args, kwargs)
            return
        if call.beside is not None and self.index in call.layers:
            call.terms[self.index] = call.beside(self.index, hidden_argument(args, kwargs), call.mask)
        if call.top is not None and self.index == call.last:
            call.last_arguments = (args[1:], dict(kwargs))

    def mixed(self, call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Each task's term on its rows (zero for tasks without)."""
        hidden = hidden_argument(args, kwargs)
        _check_rows(call, hidden, f"layer {self.index}")
        pieces: list[torch.Tensor] = []
        acting = tops = False
        for start, stop, sub in call.segments:
            rows = hidden[start:stop]
            if sub is not None and sub.beside is not None and self.index in sub.layers:
                pieces.append(sub.beside(self.index, rows, sub.mask))
                acting = True
            else:
                pieces.append(torch.zeros_like(rows))
            tops = tops or (sub is not None and sub.top is not None)
        if acting:
            call.terms[self.index] = torch.cat(pieces)
        if tops and self.index == call.last:
            call.last_arguments = (args[1:], dict(kwargs))


class JoinNormHook(_Hook):
    """Before a post-LN layer's join LayerNorm: the term joins the FFN's residual sum."""

    def __call__(self, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        call = self.wiring.call
        if call is None or self.index not in call.terms:
            return None
        # the term stays in the call: checkpointing recomputes the layer's forward, not its pre-hook
        return (args[0] + call.terms[self.index], *args[1:])


class LayerHook(_Hook):
    """After a layer: a pre-LN family's term joins the output; the block on top runs."""

    def __call__(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        call = self.wiring.call
        if call is None:
            return None
        hidden = first_of(output)
        if self.index in call.terms and self.wiring.family_pre_norm:
            hidden = hidden + call.terms[self.index]
        if call.top is not None and self.index == call.last:
            hidden = _run_top(call.top, hidden, call.last_arguments, call.mask)
        elif call.segments and self.index == call.last:
            hidden = self.mixed_top(call, hidden)
        return with_first(output, hidden)

    def mixed_top(self, call: TaskCall, hidden: torch.Tensor) -> torch.Tensor:
        """Each task's block on top on its rows."""
        if not any(sub is not None and sub.top is not None for _, _, sub in call.segments):
            return hidden
        _check_rows(call, hidden, "the block on top")
        batch, length = hidden.shape[0], hidden.shape[1]
        rest, keywords = call.last_arguments
        pieces: list[torch.Tensor] = []
        for start, stop, sub in call.segments:
            rows = hidden[start:stop]
            if sub is not None and sub.top is not None:
                arguments = _arguments_of(rest, keywords, start, stop, batch, length)
                rows = _run_top(sub.top, rows, arguments, sub.mask)
            pieces.append(rows)
        return torch.cat(pieces)


def _run_top(
    top: nn.Module,
    hidden: torch.Tensor,
    arguments: tuple[tuple[Any, ...], dict[str, Any]],
    mask: torch.Tensor | None,
) -> torch.Tensor:
    rest, keywords = arguments

    def run(layer: nn.Module, states: torch.Tensor) -> torch.Tensor:
        return first_of(layer(states, *rest, **keywords))

    return top(hidden, run, mask)


class SiteHook(_Hook):
    """After a site's Linear: ``y + delta(l, site, x, y)`` for each site (slice) it holds."""

    def __init__(self, wiring: Wiring, index: int, sites: list[tuple[str, tuple[int, int] | None]]) -> None:
        super().__init__(wiring, index)
        self.sites = sites

    def __call__(self, module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
        call = self.wiring.call
        if call is None:
            return None
        if call.segments:
            return self.mixed(call, args[0], output)
        if call.inside is None or self.index not in call.layers:
            return None
        return self.apply(call.inside, args[0], output)

    def mixed(self, call: TaskCall, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor | None:
        """Each task's deltas on its rows."""
        pieces: list[torch.Tensor] = []
        acting = False
        for start, stop, sub in call.segments:
            rows = output[start:stop]
            if sub is not None and sub.inside is not None and self.index in sub.layers:
                if not acting:
                    _check_rows(call, output, f"a site Linear of layer {self.index}")
                rows = self.apply(sub.inside, x[start:stop], rows)
                acting = True
            pieces.append(rows)
        return torch.cat(pieces) if acting else None

    def apply(self, adapter: nn.Module, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """``output`` plus ``adapter``'s delta on each site this Linear holds."""
        sites: tuple[str, ...] = adapter.sites  # type: ignore[assignment]  # an INSIDE module's attribute
        delta: Callable[..., torch.Tensor] = adapter.delta  # type: ignore[assignment]
        for site, chunk in self.sites:
            if site not in sites:
                continue
            if chunk is None:
                output = output + delta(self.index, site, x, output)
                continue
            start, stop = chunk_bounds(output.shape[-1], chunk)
            part = output[..., start:stop]
            output = torch.cat(
                [output[..., :start], part + delta(self.index, site, x, part), output[..., stop:]], -1
            )
        return output


def chunk_bounds(width: int, chunk: tuple[int, int]) -> tuple[int, int]:
    """``[start, stop)`` of chunk ``chunk[0]`` of ``chunk[1]`` equal chunks of ``width`` (a fused Linear's site)."""
    size = width // chunk[1]
    return chunk[0] * size, (chunk[0] + 1) * size


def copy_plain_attributes(target: nn.Module, source: nn.Module | None) -> None:
    """Give ``target``, which takes ``source``'s place in a layer list, ``source``'s plain public attributes
    (strings, numbers, flags): ModernBERT's encoder reads a layer's ``attention_type``."""
    for key, value in vars(source or nn.Module()).items():
        if not key.startswith("_") and key != "training" and isinstance(value, str | int | float | bool):
            setattr(target, key, value)


class IndividualLayerSlot(nn.Module):
    """An individual (I) layer's place in the layer list: it runs the active task's copy of the layer."""

    def __init__(self, layer_index: int, wiring: Wiring, replaced: nn.Module | None = None) -> None:
        super().__init__()
        self.layer_index = layer_index
        self._wiring = [wiring]  # a list: not a submodule, not a parameter
        copy_plain_attributes(self, replaced)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The active task's copy of layer ``layer_index`` on the encoder's arguments."""
        wiring = self._wiring[0]
        call = wiring.call
        if call is not None and call.parts:
            return self.mixed(wiring, call, args, kwargs)
        if call is None or call.individual is None:
            raise RuntimeError(f"layer {self.layer_index} is individual: call MultiTaskEncoder with task=...")
        return call.individual[str(self.layer_index)](*args, **kwargs)

    def mixed(self, wiring: Wiring, call: TaskCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Each group's copy on its rows; the hidden states joined, other outputs the first group's."""
        hidden = hidden_argument(args, kwargs)
        _check_rows(call, hidden, f"individual layer {self.layer_index}")
        batch, length = hidden.shape[0], hidden.shape[1]
        outputs = []
        for start, stop, copies, sub in call.parts:
            rest, keywords = _arguments_of(args, kwargs, start, stop, batch, length)
            # the hidden states: [B, T, d], which the rule of rows_of does not recognise
            rest, keywords = with_hidden_argument(rest, keywords, hidden[start:stop])
            with wiring.active(sub):
                outputs.append(copies[str(self.layer_index)](*rest, **keywords))
        if len(outputs) == 1:
            return outputs[0]
        return with_first(outputs[0], torch.cat([first_of(o) for o in outputs]))


def enable_checkpointing(model: nn.Module, individual: nn.Module, wiring: Wiring) -> None:
    """Non-reentrant checkpointing of ``model``'s layers and the ``individual`` copies, under ``wiring``'s call."""
    options = {"use_reentrant": False, "context_fn": wiring.checkpoint_contexts}
    enable = getattr(model, "activation_checkpointing_enable", None)  # the name since transformers 5.23
    if enable is None:  # transformers 5.0-5.22 (pyproject's floor is 5.0)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)  # type: ignore[operator]
    else:
        enable(activation_checkpointing_kwargs=options)
    # transformers sets the checkpointing function on the layers it finds; the copies are not among them
    functions = [
        m.__dict__["_gradient_checkpointing_func"]
        for m in model.modules()
        if "_gradient_checkpointing_func" in m.__dict__
    ]
    for layer in individual.modules():
        if functions and hasattr(layer, "gradient_checkpointing"):
            setattr(layer, "gradient_checkpointing", True)  # noqa: B010  (a layer's plain flag)
            setattr(layer, "_gradient_checkpointing_func", functions[0])  # noqa: B010


@torch.no_grad()
def fold_deltas(layers: Mapping[int, nn.Module], family: EncoderFamily, adapter: nn.Module) -> None:
    """Add an INSIDE ``adapter``'s ``weight_delta`` into the site Linears of ``layers`` (slots skipped).
    Raises ``ValueError`` when the adapter's delta is not linear in the site's input (no ``weight_delta``)."""
    weight_delta = getattr(adapter, "weight_delta", None)
    if weight_delta is None:
        raise ValueError(f"{type(adapter).__name__} has no weight_delta: its deltas cannot be merged")
    for index in adapter.layers:  # type: ignore[union-attr]
        layer = layers.get(index)
        if layer is None or isinstance(layer, IndividualLayerSlot):
            continue
        for site in adapter.sites:  # type: ignore[union-attr]
            linear, chunk = family.site_linear(layer, site)
            delta = weight_delta(index, site).to(linear.weight.dtype)
            start, stop = (
                (0, linear.out_features) if chunk is None else chunk_bounds(linear.out_features, chunk)
            )
            linear.weight[start:stop] += delta
