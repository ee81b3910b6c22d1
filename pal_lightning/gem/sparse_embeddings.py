"""Embedding tables' memory gradients as sparse rows: only the rows the remembered examples used.

Why: the word-embedding table of a BERT encoder is half of its weights (30,522 x 384 of MiniLM's 22.7 M),
and a memory batch of 16 examples touches about a thousand of its rows. Its dense gradient is a fresh
table-sized tensor per task forward, summed, then read by the dot products and the write-back. With
``nn.Embedding.sparse`` set during the memory pass, autograd returns the used rows only (a sparse COO
tensor) and :mod:`pal_lightning.gem.gram` works on those rows: the same gradient, the same dot products
and write-back up to float summation order. A-GEM on MiniLM, one CPU thread: its memory gradient, dot
products and write-back took 4 % less, about 50 ms (paired, interleaved; ``benchmarks/RESULTS.md``).

A-GEM asks for it on a CPU only: on a GPU the dense table's gradient is cheap and the sparse rows' extra
operators (coalescing, indexing) are what a host-bound step pays for; dense rows also go flat there
(:mod:`pal_lightning.gem.flat_rows`).

When it is not used (:func:`sparse_embedding_gradients` leaves the model alone): under DDP (rows are
summed across ranks by a dense all-reduce), and when the module calls its encoder through
``torch.compile`` (a changed module attribute recompiles, and the compiled backward may not produce
sparse gradients).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from torch import nn

__all__ = ["sparse_embedding_gradients"]


def _compiling(module: nn.Module) -> bool:
    """Whether ``module`` (a :class:`~pal_lightning.MultiTaskModule`) calls its encoder through ``torch.compile``."""
    return bool(getattr(getattr(module, "_encoder_call", None), "compiling", False))


@contextlib.contextmanager
def sparse_embedding_gradients(module: nn.Module, params: Sequence[nn.Parameter]) -> Iterator[int]:
    """Within the block, the embedding tables of ``module`` among ``params`` give sparse gradients.

    Yields the number of tables switched (0 when ``module`` calls its encoder through ``torch.compile``);
    each is switched back on leaving the block, also after an error.
    """
    wanted = {id(p) for p in params}
    tables = (
        []
        if _compiling(module)
        else [
            m for m in module.modules() if type(m) is nn.Embedding and not m.sparse and id(m.weight) in wanted
        ]
    )
    for table in tables:
        table.sparse = True
    try:
        yield len(tables)
    finally:
        for table in tables:
            table.sparse = False
