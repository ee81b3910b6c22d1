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

from pal_lightning.data import samplers
from pal_lightning.data.samplers import MultiTaskBatchSampler
from pal_lightning.data.sampling import SamplingSchedule

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
