"""GEM's flat rows through a kept buffer (:class:`~pal_lightning.gem.flat_rows.FlatLayout`, issue 32): the same
numbers as without it, in a few operators whatever the number of parameter tensors."""

from __future__ import annotations

import torch
from torch import nn

from pal_lightning.core.private_api import TorchDispatchMode
from pal_lightning.gem.flat_rows import FlatLayout, add_flat_rows, flatten, flatten_rows
from pal_lightning.gem.step_projector import StepProjector


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


def _params(n: int, seed: int = 0) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (11,)]
    params = [nn.Parameter(torch.randn(shapes[i % 4], generator=gen)) for i in range(n)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


def _rows(params: list[nn.Parameter], t: int) -> list[list[torch.Tensor | None]]:
    gen = torch.Generator().manual_seed(1)
    return [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(t)]


def test_the_layout_gives_the_same_bits_as_the_plain_flat_path() -> None:
    params, twins = _params(40), _params(40)
    rows = _rows(params, t=3)
    layout = FlatLayout(params)
    assert torch.equal(flatten_rows(rows, params, layout), flatten_rows(rows, params))
    grads = [p.grad for p in params]
    assert torch.equal(flatten(grads, params, layout), flatten(grads, params))
    F = flatten_rows(rows, params)
    add_flat_rows(params, F, [0.5, 0.0, -0.25], layout)
    add_flat_rows(twins, F, [0.5, 0.0, -0.25])
    for p, q in zip(params, twins, strict=True):
        assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]


def test_the_layout_dispatches_a_few_operators_whatever_the_number_of_tensors() -> None:
    counts = []
    for n in (20, 200):
        params = _params(n)
        rows = _rows(params, t=2)
        layout = FlatLayout(params)  # built once, kept across steps: not counted
        with _Count() as counter:
            F = flatten_rows(rows, params, layout)
            flatten([p.grad for p in params], params, layout)
            add_flat_rows(params, F, [0.1, 0.2], layout)
        counts.append(counter.count)
    # without the layout: a view per tensor and row for each flattening and for the write-back
    assert counts[0] == counts[1] <= 20, counts


def test_the_projector_keeps_its_layout_while_the_parameters_stay() -> None:
    projector = StepProjector()
    params = _params(8)
    layout = projector.layout(params)
    assert layout is not None and projector.layout(params) is layout
    other = _params(8, seed=1)  # other tensors: another buffer
    assert projector.layout(other) is not layout
    assert projector.layout([*params[:2], nn.Parameter(torch.zeros(3, dtype=torch.float64))]) is None
