"""The seeded draws behind the batch samplers: pure functions of ``(seed, epoch, ...)``, alike on every rank
(``docs/design.md`` §3)."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from pal_lightning.data.sampling.schedules import task_values

_SCHEDULE_STREAM = 1
_EXAMPLE_STREAM = 2
_ROW_STREAM = 3
_POOL_STREAM = 4

#: The task probabilities of one epoch in the tasks' order, normalised (hashable: the draws are cached by it).
Probabilities = tuple[float, ...]


def probability_vector(tasks: Sequence[str], probs: Mapping[str, float], source: str) -> Probabilities:
    """``probs`` (from ``source``, named in messages) as :data:`Probabilities` over ``tasks``; a PalUserError
    when they miss or add a task, or are negative, not finite or all zero."""
    p = np.asarray(task_values(source, "probability", tasks, probs), dtype=np.float64)
    return tuple(float(v) for v in p / p.sum())


def generator(seed: int, *words: int) -> np.random.Generator:
    """A generator seeded by ``seed`` and the stream's ``words``."""
    # SeedSequence wants non-negative integers; keep negative seeds distinct from positive ones.
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([seed % (1 << 63), int(seed < 0), *words]))
    )


@functools.lru_cache(maxsize=64)
def task_sequence(seed: int, epoch: int, steps: int, probs: Probabilities) -> np.ndarray:
    """The task index of every step of ``epoch``, drawn with the probabilities ``probs``."""
    seq = generator(seed, _SCHEDULE_STREAM, epoch).choice(len(probs), size=steps, p=np.asarray(probs))
    seq.setflags(write=False)
    return seq


def cycle_sequence(epoch: int, steps: int, num_tasks: int) -> np.ndarray:
    """Round-robin's task index of every step of ``epoch``: step ``s`` is global step ``epoch * steps + s``."""
    return (epoch * steps + np.arange(steps)) % num_tasks


@functools.lru_cache(maxsize=16)
def row_draws(seed: int, epoch: int, steps: int, global_batch: int, probs: Probabilities) -> np.ndarray:
    """``[steps, global_batch]``: the task index of every row of ``epoch``, drawn i.i.d. with ``probs``."""
    draws = (
        generator(seed, _ROW_STREAM, epoch)
        .choice(len(probs), size=(steps, global_batch), p=np.asarray(probs))
        .astype(np.int32)
    )
    draws.setflags(write=False)
    return draws


@functools.lru_cache(maxsize=64)
def phase_sequence(epoch: int, steps: int, task_ids: tuple[int, ...], ends: tuple[int, ...]) -> np.ndarray:
    """The task index of every step of ``epoch`` under phases ending at ``ends`` (the curriculum repeats)."""
    g = (epoch * steps + np.arange(steps)) % ends[-1]  # phase i holds ends[i-1] <= g mod P < ends[i]
    seq = np.asarray(task_ids)[np.searchsorted(np.asarray(ends), g, side="right")]
    seq.setflags(write=False)
    return seq


def pool_order(seed: int, epoch: int, first_step: int, steps: int) -> np.ndarray:
    """The order in which a pool of mixed ``steps`` from ``first_step`` is dealt examples."""
    return generator(seed, _POOL_STREAM, epoch, first_step).permutation(np.arange(steps))


def raw_cycle(seed: int, task: str, cycle: int, n: int) -> np.ndarray:
    """A random permutation of ``n`` examples, seeded by ``(seed, task, cycle)``."""
    return generator(seed, _EXAMPLE_STREAM, zlib.crc32(task.encode()), cycle).permutation(n)


def _swap_out(perm: np.ndarray, head: int, stop: int, avoid: set[int]) -> np.ndarray:
    # Each of perm[:head] found in `avoid` swaps with the next of perm[head:stop] that is not.
    clashes = [i for i in range(head) if int(perm[i]) in avoid]
    free = (j for j in range(head, stop) if int(perm[j]) not in avoid)
    for i, j in zip(clashes, free, strict=False):
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def plain_cycle(seed: int, task: str, cycle: int, n: int, global_batch: int) -> np.ndarray:
    """Pass ``cycle`` of the example stream, no example twice in the global batch straddling the previous pass
    (clashes swap with the middle of the pass; under two global batches of examples: the raw permutation)."""
    perm = raw_cycle(seed, task, cycle, n)
    head = (-cycle * n) % global_batch
    if cycle == 0 or head == 0 or n < 2 * global_batch:
        return perm
    prev_tail = set(raw_cycle(seed, task, cycle - 1, n)[n - (global_batch - head) :].tolist())
    return _swap_out(perm, head, n - (n - head) % global_batch, prev_tail)


def grouped_cycle(
    seed: int, task: str, cycle: int, n: int, global_batch: int, pool_batches: int, lengths: np.ndarray
) -> np.ndarray:
    """:func:`plain_cycle` with each pool of ``pool_batches`` global batches sorted longest first and its
    global batches shuffled (partial batches at either end stay)."""
    perm = plain_cycle(seed, task, cycle, n, global_batch)
    rng = generator(seed, _EXAMPLE_STREAM, zlib.crc32(task.encode()), cycle, 1)
    # Global batches start at multiples of global_batch; this pass starts at position cycle * n.
    head = min((-cycle * n) % global_batch, n)
    parts, body = [perm[:head]], perm[head:]
    full = (len(body) // global_batch) * global_batch
    pool = pool_batches * global_batch
    for start in range(0, full, pool):
        chunk = body[start : min(start + pool, full)]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        order = rng.permutation(len(chunk) // global_batch)
        parts.extend(chunk[i * global_batch : (i + 1) * global_batch] for i in order)
    parts.append(body[full:])
    return np.concatenate(parts)


def spaced_cycle(seed: int, task: str, cycle: int, n: int, window: int) -> np.ndarray:
    """Pass ``cycle`` with its first ``window`` positions disjoint from the previous pass's last ``window``
    (a mixed global batch holds up to ``window`` consecutive positions; ``n < 2 * window``: raw)."""
    perm = raw_cycle(seed, task, cycle, n)
    if cycle == 0 or n < 2 * window:
        return perm
    prev_tail = set(raw_cycle(seed, task, cycle - 1, n)[n - window :].tolist())
    return _swap_out(perm, window, n - window, prev_tail)


def deal_apart(examples: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """``examples`` cut at ``ends``, each repeat within a slice swapped with the nearest position of another
    slice whose example is new to it and which lacks the repeat (the multiset is unchanged)."""
    out = examples.copy()
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    slice_of = np.repeat(np.arange(len(ends)), ends - starts)

    def members(k: int) -> np.ndarray:
        return out[starts[k] : ends[k]]

    for k in range(len(ends)):
        if len(np.unique(members(k))) == ends[k] - starts[k]:
            continue
        seen: set[int] = set()
        for i in range(int(starts[k]), int(ends[k])):
            if int(out[i]) not in seen:
                seen.add(int(out[i]))
                continue
            here = set(members(k).tolist())
            for distance in range(1, len(out)):
                j = next(
                    (
                        j
                        for j in (i - distance, i + distance)
                        if 0 <= j < len(out)
                        and slice_of[j] != k
                        and int(out[j]) not in here
                        and int(out[i]) not in members(int(slice_of[j])).tolist()
                    ),
                    None,
                )
                if j is not None:
                    out[i], out[j] = out[j], out[i]
                    break
    return [out[starts[k] : ends[k]] for k in range(len(ends))]
