"""The sampler's example streams across cycles and epochs (hypothesis; found by mutation testing).

Per task the examples form a stream of cycles, each a permutation of the task's examples; a global batch
that straddles two cycles never holds an example twice; an epoch continues the stream where the previous
one stopped, also when it is reached directly (a resumed run) instead of epoch by epoch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.data import batch_samplers as samplers
from pal_lightning.data.batch_samplers import MultiTaskBatchSampler
from pal_lightning.data.schedules import SamplingSchedule

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
    prev = samplers._plain_cycle(seed, "t", cycle - 1, n, global_batch)
    cur = samplers._plain_cycle(seed, "t", cycle, n, global_batch)
    assert sorted(cur.tolist()) == list(range(n)) and sorted(prev.tolist()) == list(range(n))
    head = (-cycle * n) % global_batch  # examples of this cycle in the batch that straddles the boundary
    if head:
        straddle = prev[n - (global_batch - head) :].tolist() + cur[:head].tolist()
        assert len(straddle) == global_batch and len(set(straddle)) == global_batch, straddle
    # the swaps never touch a cycle's tail: it is the raw permutation's
    tail = (n - head) % global_batch
    raw = samplers._raw_cycle(seed, "t", cycle, n)
    assert cur[n - tail :].tolist() == raw[n - tail :].tolist()


def _epoch(sampler: MultiTaskBatchSampler, epoch: int) -> list[tuple[str, tuple[int, ...]]]:
    sampler.set_epoch(epoch)
    return [(b.task, tuple(b.indices)) for b in sampler]


def test_epochs_continue_the_stream_and_can_be_reached_directly() -> None:
    sizes, batch = {"a": 10, "b": 7}, {"a": 3, "b": 2}

    def make() -> MultiTaskBatchSampler:
        return MultiTaskBatchSampler(sizes, batch, SamplingSchedule("uniform"), steps_per_epoch=5, seed=3)

    walked = make()
    epochs = [_epoch(walked, e) for e in range(5)]
    # a fresh sampler sent straight to epoch 4 (as a resumed run is) draws the same batches
    assert _epoch(make(), 4) == epochs[4]
    direct = make()
    _epoch(direct, 3)
    assert _epoch(direct, 1) == epochs[1]  # and back: the cached offsets of later epochs do not leak
    # per task, the concatenated stream is a sequence of whole passes over the examples
    for task, n in sizes.items():
        stream = [i for ep in epochs for t, idx in ep if t == task for i in idx]
        assert len(stream) >= 2 * n
        for start in range(0, len(stream) - n + 1, n):
            assert sorted(stream[start : start + n]) == list(range(n)), (task, start)


@pytest.mark.parametrize("pair", [(-1, 2**63 - 1), (0, -(2**63)), (5, 5 - 2**63)])
def test_negative_seeds_are_streams_of_their_own(pair: tuple[int, int]) -> None:
    """Seeds are taken modulo 2^63 with the sign as a second word: a seed and its wrap-around differ."""
    a, b = (
        MultiTaskBatchSampler({"a": 40}, {"a": 4}, SamplingSchedule("uniform"), seed=s).batches(0)
        for s in pair
    )
    assert [tuple(x.indices) for x in a] != [tuple(x.indices) for x in b]


def test_state_names_the_schedule() -> None:
    uniform = MultiTaskBatchSampler({"a": 4, "b": 4}, {"a": 1, "b": 1}, SamplingSchedule("uniform"))
    assert uniform.state_dict()["schedule"] == "uniform"
    phased = MultiTaskBatchSampler(
        {"a": 4, "b": 4}, {"a": 1, "b": 1}, SamplingSchedule("uniform"), phases=[("a", 1), ("b", 1)]
    )  # phases of a single batch are valid
    state = phased.state_dict()
    assert state["schedule"] == "sequential" and state["phases"] == [["a", 0, 1], ["b", 1, 2]]
    assert np.array_equal(phased.task_sequence(0), [0, 1])


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
    raw = [samplers._raw_cycle(1, "a", c, 7).tolist() for c in range(3)]
    assert raw == [
        [1, 5, 3, 4, 0, 6, 2],
        [2, 0, 5, 4, 1, 6, 3],
        [6, 3, 1, 5, 4, 2, 0],
    ]  # the example's premise
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
    raw = [samplers._raw_cycle(0, "a", c, 5).tolist() for c in range(3)]
    assert raw == [[2, 4, 0, 1, 3], [2, 1, 4, 0, 3], [3, 0, 1, 2, 4]]  # the example's premise
    sampler = MultiTaskBatchSampler(
        {"a": 5}, {"a": 3}, SamplingSchedule("uniform"), steps_per_epoch=5, seed=0
    )
    assert _stream(sampler) == [(2, 4, 0), (1, 3, 2), (1, 4, 0), (3, 3, 0), (1, 2, 4)]


@pytest.mark.parametrize("schedule", ["weights", "proportional"])
def test_weights_and_multipliers_reach_the_drawn_tasks(schedule: str) -> None:
    """``weights`` and ``task_multipliers`` decide the task of each step (p = 1/4, 3/4 by hand)."""
    sizes, batch = {"a": 30, "b": 10}, {"a": 2, "b": 2}
    if schedule == "weights":
        plan = SamplingSchedule("weights", weights={"a": 1.0, "b": 3.0})
        off = SamplingSchedule("weights", weights={"a": 1.0, "b": 1.0}, multipliers={"b": 0.0})
    else:
        # proportional 3/4, 1/4; multiplier 9 on b: 3/4 : 9/4 -> 1/4, 3/4
        plan = SamplingSchedule("proportional", multipliers={"b": 9.0})
        off = SamplingSchedule("proportional", multipliers={"b": 0.0})
    steps = 4000
    drawn = MultiTaskBatchSampler(sizes, batch, plan, steps_per_epoch=steps, seed=5).task_sequence(0)
    assert abs(np.mean(drawn == 1) - 0.75) < 0.03  # 4000 draws: the standard error is 0.007
    # a multiplier of 0 never draws the task
    assert not MultiTaskBatchSampler(sizes, batch, off, steps_per_epoch=200, seed=5).task_sequence(0).any()


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
            grouped = samplers._grouped_cycle(seed, "t", cycle, n, gb, pool_batches, lengths)
            plain = samplers._plain_cycle(seed, "t", cycle, n, gb)
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
            again = samplers._grouped_cycle(seed, "t", cycle, n, gb, pool_batches, lengths)
            assert np.array_equal(grouped, again)
