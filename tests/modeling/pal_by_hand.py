"""What the PAL tests compare with: attention written head by head, and the operators a block dispatches."""

from __future__ import annotations

import collections
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def attention_by_hand(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    heads: int,
    keep: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """concat_i softmax(Q_i K_i^T / sqrt(d_h) + ``mask``) V_i, head by head, keys outside ``keep`` excluded."""
    hd = q.shape[-1] // heads
    out = []
    for i in range(heads):
        sl = slice(i * hd, (i + 1) * hd)
        scores = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(hd)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None, :], float("-inf"))
        if mask is not None:
            scores = scores + mask[:, 0]
        out.append(scores.softmax(-1) @ v[..., sl])
    return torch.cat(out, dim=-1)


class Dispatched(TorchDispatchMode):
    """The aten operators that run (what a device would launch, views included), counted, and the shapes
    of the tensors cast to another dtype."""

    VIEWS = ("view", "t.default", "transpose", "permute", "unbind", "expand", "unsqueeze", "slice", "alias")

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.cast_shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[str(func)] += 1
        if func is torch.ops.aten._to_copy.default:
            self.cast_shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> collections.Counter[str]:
        """The counts by short name (``addmm``, ``view``, ...)."""
        short: collections.Counter[str] = collections.Counter()
        for op, n in self.ops.items():
            short[op.removeprefix("aten.").split(".")[0]] += n
        return short

    def computing(self) -> list[str]:
        """The operators that compute (not views), one entry per call."""
        return sorted(
            op for op, n in self.ops.items() for _ in range(n) if not any(v in op for v in self.VIEWS)
        )
