"""The task batch sampler: same task on every rank, disjoint shares, equal lengths, exact resume."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.batch_samplers import EpochHandle, MultiTaskBatchSampler, eval_batches
from pal_lightning.data.schedules import SamplingSchedule

SIZES = {"a": 100, "b": 37, "c": 250}
BATCH = {"a": 4, "b": 3, "c": 8}


def make(world=1, rank=0, schedule="annealed", steps=None, seed=7, lengths=None, **kw):
    return MultiTaskBatchSampler(
        SIZES,
        BATCH,
        SamplingSchedule(schedule, num_epochs=3),
        steps_per_epoch=steps,
        num_replicas=world,
        rank=rank,
        seed=seed,
        lengths=lengths,
        **kw,
    )


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_agree_on_tasks_disjoint_examples_equal_lengths(world):
    for epoch in (0, 1):
        per_rank = [epoch_batches(make(world, r), epoch) for r in range(world)]
        lengths = {len(b) for b in per_rank}
        assert len(lengths) == 1 and lengths.pop() == make(world).steps_per_epoch
        for step in zip(*per_rank, strict=True):
            assert len({b.task for b in step}) == 1  # same task on every rank
            ids = [i for b in step for i in b.indices]
            assert len(ids) == len(set(ids))  # disjoint shares within a step
            assert all(len(b.indices) == BATCH[b.task] for b in step)


def test_one_pass_epoch_with_round_robin_visits_examples_at_most_once_across_ranks():
    world = 2
    sizes = {"a": 40, "b": 24}
    batch = {"a": 4, "b": 3}
    samplers = [
        MultiTaskBatchSampler(sizes, batch, SamplingSchedule("round_robin"), num_replicas=world, rank=r)
        for r in range(world)
    ]
    # default steps = ceil(40/8) + ceil(24/6) = 5 + 4 = 9
    assert samplers[0].steps_per_epoch == 9
    seen = Counter((b.task, i) for s in samplers for b in s for i in b.indices)
    assert max(seen.values()) == 1


def test_default_steps_per_epoch_is_one_pass():
    assert make().steps_per_epoch == 25 + 13 + 32
    assert make(world=4).steps_per_epoch == 7 + 4 + 8
    assert make(steps=11).steps_per_epoch == 11 and len(make(steps=11)) == 11


def test_round_robin_order_continues_across_epochs():
    s = make(schedule="round_robin", steps=4)
    tasks = [b.task for e in range(3) for b in epoch_batches(s, e)]
    assert tasks == list(itertools.islice(itertools.cycle(["a", "b", "c"]), 12))


def test_task_frequencies_follow_probabilities():
    s = make(schedule="proportional", steps=6000)
    counts = Counter(b.task for b in epoch_batches(s, 0))
    total = sum(SIZES.values())
    for t, n in SIZES.items():
        assert counts[t] / 6000 == pytest.approx(n / total, abs=0.02)


def test_seed_and_epoch_change_the_order_deterministically():
    a0 = [tuple(b) for b in epoch_batches(make(), 0)]
    assert a0 == [tuple(b) for b in epoch_batches(make(), 0)]
    assert a0 != [tuple(b) for b in epoch_batches(make(), 1)]
    assert a0 != [tuple(b) for b in epoch_batches(make(seed=8), 0)]


def test_examples_cycle_without_replacement():
    # Task b (37 examples, batch 3) drawn many times: every window of 37 stream positions is a permutation.
    s = make(schedule="uniform", steps=300)
    stream = [i for b in epoch_batches(s, 0) if b.task == "b" for i in b.indices]
    assert len(stream) > 3 * 37
    for c in range(3):
        assert sorted(stream[c * 37 : (c + 1) * 37]) == list(range(37))
    # and the order is reshuffled between cycles
    assert stream[:37] != stream[37:74]


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("k", [0, 5, 24])
def test_resume_equivalence(world, k):
    for rank in range(world):
        full = [epoch_batches(make(world, rank), e) for e in range(3)]
        # interrupted run: epoch 0 complete, then k batches of epoch 1
        first = make(world, rank)
        epoch_batches(first, 0)
        first.set_epoch(1)
        it = iter(first)
        consumed = [next(it) for _ in range(k)]
        state = first.state_dict()
        assert state["epoch"] == 1 and state["position"] == k
        resumed = make(world, rank, seed=999)  # the saved seed wins
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert consumed + rest == full[1]
        resumed.set_epoch(2)
        assert list(resumed) == full[2]


def test_set_epoch_same_epoch_keeps_resume_position():
    s = make()
    s.load_state_dict({**make().state_dict(), "epoch": 2, "position": 3})
    s.set_epoch(2)  # Lightning calls this after restoring: it must not rewind
    assert len(list(s)) == s.steps_per_epoch - 3


def test_state_at_end_of_epoch_resumes_at_next_epoch():
    s = make()
    epoch_batches(s, 0)
    state = s.state_dict()
    assert state["position"] == s.steps_per_epoch
    r = make()
    r.load_state_dict(state)
    assert r.epoch == 1 and list(r) == epoch_batches(make(), 1)


def test_position_fn_overrides_prefetch_count():
    s = make()
    it = iter(s)
    for _ in range(3):
        next(it)
    s.position_fn = lambda: 2  # the consumer really used only 2 (one is prefetched)
    assert s.state_dict()["position"] == 2


def test_resume_refuses_changed_data():
    state = make().state_dict()
    other = MultiTaskBatchSampler({**SIZES, "a": 99}, BATCH, SamplingSchedule("annealed"))
    with pytest.raises(PalUserError, match="changed"):
        other.load_state_dict(state)


def test_epoch_handle_is_what_lightning_finds():
    s = make()
    assert isinstance(s.sampler, EpochHandle)
    s.sampler.set_epoch(4)
    assert s.epoch == 4


def test_length_grouping_reduces_padding_and_keeps_properties():
    rng = np.random.default_rng(0)
    lengths = {t: rng.integers(5, 120, size=n) for t, n in SIZES.items()}
    plain = make(world=2, rank=0, steps=60)
    grouped = [make(world=2, rank=r, steps=60, lengths=lengths, pool_batches=10) for r in range(2)]

    def padding(batches):
        return sum(
            len(b.indices) * lengths[b.task][list(b.indices)].max() - lengths[b.task][list(b.indices)].sum()
            for b in batches
        )

    g0, g1 = list(grouped[0]), list(grouped[1])
    assert padding(g0) < 0.5 * padding(list(plain))
    for x, y in zip(g0, g1, strict=True):
        assert x.task == y.task and not set(x.indices) & set(y.indices)
    # grouped streams are still permutations per cycle
    stream = [
        i
        for b in list(make(steps=400, schedule="uniform", lengths=lengths))
        if b.task == "b"
        for i in b.indices
    ]
    assert sorted(stream[37:74]) == list(range(37))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_eval_batches_cover_each_example_once_with_equal_counts(world):
    splits = {("a", "dev"): 101, ("b", "dev"): 9, ("c", "test"): 64}
    lengths = {k: np.arange(n)[::-1] % 17 for k, n in splits.items()}
    per_rank = [eval_batches(splits, {"a": 10, "b": 4, "c": 16}, world, r, lengths) for r in range(world)]
    assert len({len(p) for p in per_rank}) == 1
    for step in zip(*per_rank, strict=True):
        assert len({(b.task, b.split) for b in step}) == 1
    for key, n in splits.items():
        got = sorted(i for p in per_rank for b in p if (b.task, b.split) == key for i in b.indices)
        assert got == list(range(n))
    assert all(len(b.indices) <= {"a": 10, "b": 4, "c": 16}[b.task] for p in per_rank for b in p)


def test_eval_batches_interleave_tasks():
    batches = eval_batches({("a", "dev"): 30, ("b", "dev"): 30, ("c", "dev"): 5}, {"a": 10, "b": 10, "c": 10})
    assert [b.task for b in batches] == ["a", "b", "c", "a", "b", "a", "b"]
