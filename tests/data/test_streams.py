"""The seeded example streams (pal_lightning.data.sampling.streams): every pass a permutation, no repeat in
the global batch that straddles two passes, length grouping inside whole global batches, and the mixed
sampler's spaced passes and dealing (hypothesis and cases by hand; found by mutation testing)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.data.sampling import streams
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler
from pal_lightning.data.sampling.schedules import SamplingSchedule

FAST = settings(max_examples=40, deadline=None)


@FAST
@given(
    seed=st.integers(0, 2**31),
    global_batch=st.integers(2, 6),
    extra=st.integers(0, 13),
    cycle=st.integers(1, 4),
)
def test_cycles_are_permutations_and_the_straddling_batch_has_no_repeat(
    seed: int, global_batch: int, extra: int, cycle: int
) -> None:
    n = 2 * global_batch + extra  # at least two global batches: repeats are avoidable
    prev = streams.plain_cycle(seed, "t", cycle - 1, n, global_batch)
    cur = streams.plain_cycle(seed, "t", cycle, n, global_batch)
    assert sorted(cur.tolist()) == list(range(n)) and sorted(prev.tolist()) == list(range(n))
    head = (-cycle * n) % global_batch  # examples of this cycle in the batch that straddles the boundary
    if head:
        straddle = prev[n - (global_batch - head) :].tolist() + cur[:head].tolist()
        assert len(straddle) == global_batch and len(set(straddle)) == global_batch, straddle
    # the swaps never touch a cycle's tail: it is the raw permutation's
    tail = (n - head) % global_batch
    raw = streams.raw_cycle(seed, "t", cycle, n)
    assert cur[n - tail :].tolist() == raw[n - tail :].tolist()


def _stream(sampler: MultiTaskBatchSampler) -> list[tuple[int, ...]]:
    return [tuple(b.indices) for b in sampler.batches(0)]


def test_a_clash_at_a_cycle_boundary_is_swapped_out_by_hand() -> None:
    """One task of 7 examples, global batch 3 (seed 1): both cycle boundaries in 21 positions clash.

    Raw permutations (seeded): cycle 0 = 1 5 3 4 0 6 2, cycle 1 = 2 0 5 4 1 6 3, cycle 2 = 6 3 1 5 4 2 0.
    Batch 3 straddles cycles 0 and 1: the last example of cycle 0 (2) and the first two of cycle 1
    (2, 0): 2 twice. Cycle 1's clashing first example swaps with its first example from position 2 on
    that is not in cycle 0's tail: 5 -> cycle 1 = 5 0 2 4 1 6 3. Batch 5 straddles cycles 1 and 2: the
    tail 6 3 of cycle 1 (untouched by the swap) and the first example of cycle 2 (6): 6 twice. From
    position 1 on, 3 is in the tail, 1 is not -> cycle 2 = 1 3 6 5 4 2 0.
    """
    raw = [streams.raw_cycle(1, "a", c, 7).tolist() for c in range(3)]
    assert raw == [[1, 5, 3, 4, 0, 6, 2], [2, 0, 5, 4, 1, 6, 3], [6, 3, 1, 5, 4, 2, 0]]  # the premise
    sampler = MultiTaskBatchSampler(
        {"a": 7}, {"a": 3}, SamplingSchedule("uniform"), steps_per_epoch=7, seed=1
    )
    assert _stream(sampler) == [(1, 5, 3), (4, 0, 6), (2, 5, 0), (2, 4, 1), (6, 3, 1), (3, 6, 5), (4, 2, 0)]
    # the same global batches split over 3 ranks of batch 1: rank r keeps position r of each
    ranks = [
        MultiTaskBatchSampler(
            {"a": 7}, {"a": 1}, SamplingSchedule("uniform"), steps_per_epoch=7, num_replicas=3, rank=r, seed=1
        )
        for r in range(3)
    ]
    per_rank = [_stream(s) for s in ranks]
    assert [tuple(i for r in range(3) for i in per_rank[r][step]) for step in range(7)] == _stream(sampler)


def test_a_task_of_fewer_than_two_global_batches_keeps_its_raw_permutations() -> None:
    """5 examples, global batch 3 (seed 0): too few to swap a clash away, so every cycle stays raw.

    Raw permutations: cycle 0 = 2 4 0 1 3, cycle 1 = 2 1 4 0 3, cycle 2 = 3 0 1 2 4. Batch 4 straddles
    cycles 1 and 2: the last example of cycle 1 (3) and the first two of cycle 2 (3, 0): 3 twice, kept.
    """
    raw = [streams.raw_cycle(0, "a", c, 5).tolist() for c in range(3)]
    assert raw == [[2, 4, 0, 1, 3], [2, 1, 4, 0, 3], [3, 0, 1, 2, 4]]  # the example's premise
    sampler = MultiTaskBatchSampler(
        {"a": 5}, {"a": 3}, SamplingSchedule("uniform"), steps_per_epoch=5, seed=0
    )
    assert _stream(sampler) == [(2, 4, 0), (1, 3, 2), (1, 4, 0), (3, 3, 0), (1, 2, 4)]


@pytest.mark.parametrize("n", [10, 11, 23])
def test_grouped_cycles_sort_whole_global_batches_between_the_plain_head_and_tail(n: int) -> None:
    """Length grouping reorders only the global batches that lie wholly inside a cycle.

    The first ``head = (-c n) mod B`` examples of cycle ``c`` (the end of the batch that straddles the
    boundary) and its last ``(n - head) mod B`` are those of the plain cycle, so the no-repeat swap still
    holds; every global batch between them is a run of neighbours in the length order of its pool, and
    the same seed gives the same cycle (a resumed run replays it).
    """
    gb, pool_batches = 3, 2
    lengths = np.arange(n) * 7 % n  # distinct lengths, not in index order
    for seed in (0, 1, 2):
        for cycle in range(1, 5):
            grouped = streams.grouped_cycle(seed, "t", cycle, n, gb, pool_batches, lengths)
            plain = streams.plain_cycle(seed, "t", cycle, n, gb)
            head = (-cycle * n) % gb
            tail = (n - head) % gb
            assert grouped[:head].tolist() == plain[:head].tolist()
            assert grouped[n - tail :].tolist() == plain[n - tail :].tolist()
            assert sorted(grouped.tolist()) == list(range(n))
            body = grouped[head : n - tail]
            for start in range(0, len(body), pool_batches * gb):
                pool = body[start : start + pool_batches * gb]
                ranks = np.argsort(np.argsort(-lengths[pool]))  # each example's place in the pool's order
                for b in range(0, len(pool), gb):
                    batch = np.sort(ranks[b : b + gb])
                    assert batch[-1] - batch[0] == gb - 1 and batch[0] % gb == 0, (seed, cycle, pool)
            again = streams.grouped_cycle(seed, "t", cycle, n, gb, pool_batches, lengths)
            assert np.array_equal(grouped, again)


def test_a_grouped_cycle_by_hand() -> None:
    """The seeded stream pinned (a resumed run of another version must replay it): pools sorted longest
    first, ties in the plain cycle's order, whole global batches shuffled by the task's own stream."""
    lengths = np.array([5, 9, 5, 2, 9, 7, 1, 5, 3, 8, 6, 4, 5, 7])
    plain = streams.plain_cycle(3, "t", 1, 14, 3).tolist()
    assert plain == [13, 6, 10, 11, 2, 0, 7, 3, 4, 9, 12, 5, 8, 1]
    # head [13] (the straddling batch's end); pools [6 10 11 2 0 7] -> 10 | 2 0 7 (5, ties kept) | 11 | 6
    # and [3 4 9 12 5 8] -> 4 9 5 12 8 3, whose two batches the shuffle swaps; tail [1]
    expected = [13, 10, 2, 0, 7, 11, 6, 12, 8, 3, 4, 9, 5, 1]
    assert streams.grouped_cycle(3, "t", 1, 14, 3, 2, lengths).tolist() == expected
    assert streams.grouped_cycle(3, "u", 1, 14, 3, 2, lengths).tolist() != expected  # another task's stream
    # four pools of five batches: the shuffle's stream (seed, task, cycle) pinned where 5! orders are possible
    assert streams.grouped_cycle(7, "t", 2, 40, 2, 5, np.arange(40) % 7).tolist() == [
        8, 28, 22, 36, 9, 29, 6, 33, 19, 3, 17, 2, 11, 32, 12, 18, 21, 35, 34, 26,
        23, 37, 27, 20, 30, 16, 39, 24, 13, 25, 15, 14, 10, 1, 38, 31, 5, 4, 0, 7,
    ]  # fmt: skip


def test_pool_orders_and_probability_vectors_by_hand() -> None:
    # the pool's own stream, pinned: (seed, epoch, first step) each change it
    assert streams.pool_order(5, 1, 8, 6).tolist() == [2, 1, 3, 5, 0, 4]
    assert streams.pool_order(5, 2, 8, 6).tolist() == [4, 2, 5, 0, 1, 3]
    assert streams.pool_order(5, 1, 14, 6).tolist() == [0, 4, 3, 2, 1, 5]
    assert streams.pool_order(6, 1, 8, 6).tolist() == [0, 1, 3, 2, 4, 5]
    # a rule's weights in the tasks' order, normalised
    assert streams.probability_vector(["b", "a"], {"a": 2, "b": 6}, "rule") == (0.75, 0.25)


@pytest.mark.parametrize(
    ("examples", "ends", "expected"),
    [
        ([9, 7, 7, 5, 4, 3], [3, 6], [[9, 7, 5], [7, 4, 3]]),  # the nearest partner, in the next slice
        ([5, 7, 7], [1, 3], [[7], [7, 5]]),  # the only partner: position 0
        ([1, 2, 3, 3, 4, 5], [2, 4, 6], [[1, 2], [3, 4], [3, 5]]),  # nearest, after: its own slice skipped
        ([1, 2, 3, 1], [2, 4], [[1, 2], [3, 1]]),  # copies already apart: untouched
        (
            [1, 2, 3, 3, 1, 4, 5, 6],
            [2, 6, 8],
            [[1, 3], [3, 2, 1, 4], [5, 6]],
        ),  # a copy in another slice stays
        ([1, 2, 3, 4], [2, 4], [[1, 2], [3, 4]]),  # no copies: untouched
        ([1, 1], [2], [[1, 1]]),  # nowhere to go: kept
    ],
)
def test_deal_apart_moves_a_copy_to_the_nearest_slice_that_takes_it(
    examples: list[int], ends: list[int], expected: list[list[int]]
) -> None:
    slices = streams.deal_apart(np.array(examples), np.array(ends))
    assert [s.tolist() for s in slices] == expected
    assert sorted(np.concatenate(slices).tolist()) == sorted(examples)  # nothing lost or added


@pytest.mark.parametrize("seed", range(6))
def test_spaced_cycles_keep_a_pass_boundary_free_of_repeats(seed: int) -> None:
    """Each pass is a permutation whose first ``window`` positions avoid the previous pass's last
    ``window``; the swaps never touch a pass's tail, which stays its raw permutation's."""
    raw_cycle, spaced_cycle = streams.raw_cycle, streams.spaced_cycle
    n, window = 20, 6
    for cycle in range(1, 6):
        prev, now = spaced_cycle(seed, "t", cycle - 1, n, window), spaced_cycle(seed, "t", cycle, n, window)
        raw = raw_cycle(seed, "t", cycle, n)
        assert sorted(now.tolist()) == list(range(n))
        assert not set(now[:window].tolist()) & set(prev[n - window :].tolist()), (cycle, now, prev)
        assert now[n - window :].tolist() == raw[n - window :].tolist()
        assert (now != raw).sum() <= 2 * window  # only clashes moved
    assert spaced_cycle(seed, "t", 0, n, window).tolist() == raw_cycle(seed, "t", 0, n).tolist()
    short = spaced_cycle(seed, "t", 3, 2 * window - 1, window)  # too short to space: the raw pass
    assert short.tolist() == raw_cycle(seed, "t", 3, 2 * window - 1).tolist()


def test_short_passes_are_spaced_as_far_as_partners_allow() -> None:
    """Between 2 and 3 windows of examples, some clashes find a partner in the middle of the pass."""
    raw_cycle, spaced_cycle = streams.raw_cycle, streams.spaced_cycle
    n, window = 15, 6
    clashes = {"raw": 0, "spaced": 0}
    for seed in range(20):
        tail = set(raw_cycle(seed, "t", 0, n)[n - window :].tolist())
        spaced = spaced_cycle(seed, "t", 1, n, window)
        for name, head in (("raw", raw_cycle(seed, "t", 1, n)), ("spaced", spaced)):
            clashes[name] += len(set(head[:window].tolist()) & tail)
        # partners come from the middle only: the tail stays the raw pass's
        assert spaced[n - window :].tolist() == raw_cycle(seed, "t", 1, n)[n - window :].tolist()
        tiny = spaced_cycle(seed, "t", 2, window - 2, window)  # fewer examples than a window: as drawn
        assert tiny.tolist() == raw_cycle(seed, "t", 2, window - 2).tolist()
    assert clashes["spaced"] < clashes["raw"], clashes
