"""The per-task batch sampler (pal_lightning.data.sampling.per_task), its sequential phases, and the
evaluation batches."""

from __future__ import annotations

import itertools
import logging
from collections import Counter

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sampling.per_task import EpochHandle, MultiTaskBatchSampler, eval_batches
from pal_lightning.data.sampling.phase_plan import Phase, make_phases
from pal_lightning.data.sampling.schedules import SamplingSchedule

SIZES = {"a": 100, "b": 37, "c": 250}
BATCH = {"a": 4, "b": 3, "c": 8}


def make(world=1, rank=0, schedule="annealed", steps=None, seed=7, lengths=None, **kw):
    kw.update(steps_per_epoch=steps, num_replicas=world, rank=rank, seed=seed, lengths=lengths)
    return MultiTaskBatchSampler(SIZES, BATCH, SamplingSchedule(schedule, num_epochs=3), **kw)


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def small(**kw) -> MultiTaskBatchSampler:
    return MultiTaskBatchSampler({"a": 20, "b": 9}, {"a": 2, "b": 3}, SamplingSchedule("uniform"), **kw)


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
    drawn = MultiTaskBatchSampler(sizes, batch, plan, steps_per_epoch=4000, seed=5).task_sequence(0)
    assert abs(np.mean(drawn == 1) - 0.75) < 0.03  # 4000 draws: the standard error is 0.007
    # a multiplier of 0 never draws the task
    assert not MultiTaskBatchSampler(sizes, batch, off, steps_per_epoch=200, seed=5).task_sequence(0).any()


def test_seed_and_epoch_change_the_order_deterministically():
    a0 = [tuple(b) for b in epoch_batches(make(), 0)]
    assert a0 == [tuple(b) for b in epoch_batches(make(), 0)]
    assert a0 != [tuple(b) for b in epoch_batches(make(), 1)]
    assert a0 != [tuple(b) for b in epoch_batches(make(seed=8), 0)]


@pytest.mark.parametrize("pair", [(-1, 2**63 - 1), (0, -(2**63)), (5, 5 - 2**63)])
def test_negative_seeds_are_streams_of_their_own(pair: tuple[int, int]) -> None:
    """Seeds are taken modulo 2^63 with the sign as a second word: a seed and its wrap-around differ."""
    a, b = (
        MultiTaskBatchSampler({"a": 40}, {"a": 4}, SamplingSchedule("uniform"), seed=s).batches(0)
        for s in pair
    )
    assert [tuple(x.indices) for x in a] != [tuple(x.indices) for x in b]


def test_epochs_continue_the_stream_without_replacement_and_can_be_reached_directly() -> None:
    sizes, batch = {"a": 10, "b": 7}, {"a": 3, "b": 2}

    def fresh() -> MultiTaskBatchSampler:
        return MultiTaskBatchSampler(sizes, batch, SamplingSchedule("uniform"), steps_per_epoch=5, seed=3)

    walked = fresh()
    epochs = [[(b.task, tuple(b.indices)) for b in epoch_batches(walked, e)] for e in range(5)]
    # a fresh sampler sent straight to epoch 4 (as a resumed run is) draws the same batches
    assert [(b.task, tuple(b.indices)) for b in epoch_batches(fresh(), 4)] == epochs[4]
    direct = fresh()
    epoch_batches(direct, 3)
    back = [(b.task, tuple(b.indices)) for b in epoch_batches(direct, 1)]
    assert back == epochs[1]  # and back: the cached offsets of later epochs do not leak
    # per task, the concatenated stream is a sequence of whole passes over the examples, reshuffled
    for task, n in sizes.items():
        stream = [i for ep in epochs for t, idx in ep if t == task for i in idx]
        assert len(stream) >= 2 * n
        for start in range(0, len(stream) - n + 1, n):
            assert sorted(stream[start : start + n]) == list(range(n)), (task, start)
        assert stream[:n] != stream[n : 2 * n]


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


# ------------------------------------------------------------------ state and resume


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


def test_lightning_hooks_keep_the_position():
    """set_epoch of the restored epoch does not rewind; a state saved at an epoch's end resumes at the next
    epoch; position_fn (the batches the consumer used) wins over the sampler's prefetching count; Lightning's
    set_epoch on ``batch_sampler.sampler`` reaches the sampler."""
    s = make()
    s.load_state_dict({**make().state_dict(), "epoch": 2, "position": 3})
    s.set_epoch(2)  # Lightning calls this after restoring: it must not rewind
    assert len(list(s)) == s.steps_per_epoch - 3
    s = make()
    epoch_batches(s, 0)
    state = s.state_dict()
    assert state["position"] == s.steps_per_epoch
    r = make()
    r.load_state_dict(state)
    assert r.epoch == 1 and list(r) == epoch_batches(make(), 1)
    s = make()
    it = iter(s)
    for _ in range(3):
        next(it)
    s.position_fn = lambda: 2  # the consumer really used only 2 (one is prefetched)
    assert s.state_dict()["position"] == 2
    assert isinstance(s.sampler, EpochHandle)
    s.sampler.set_epoch(4)
    assert s.epoch == 4


def test_state_names_the_schedule() -> None:
    uniform = MultiTaskBatchSampler({"a": 4, "b": 4}, {"a": 1, "b": 1}, SamplingSchedule("uniform"))
    assert uniform.state_dict()["schedule"] == "uniform"
    phased = MultiTaskBatchSampler(
        {"a": 4, "b": 4}, {"a": 1, "b": 1}, SamplingSchedule("uniform"), phases=[("a", 1), ("b", 1)]
    )  # phases of a single batch are valid
    state = phased.state_dict()
    assert state["schedule"] == "sequential" and state["phases"] == [["a", 0, 1], ["b", 1, 2]]
    assert np.array_equal(phased.task_sequence(0), [0, 1])


@pytest.mark.parametrize(("world", "steps"), [(2, None), (1, 5)])
def test_resume_with_another_world_size_or_steps_per_epoch_warns_and_continues(
    world: int, steps: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    saved = small(steps_per_epoch=4)
    it = iter(saved)
    next(it), next(it)
    state = saved.state_dict()
    assert (state["position"], state["num_replicas"], state["steps_per_epoch"]) == (2, 1, 4)
    resumed = small(num_replicas=world, rank=0, steps_per_epoch=steps)
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    now = f"{world}/{resumed.steps_per_epoch}"
    assert f"Resuming with a different world size or steps_per_epoch (saved 1/4, now {now})" in caplog.text
    assert "the task order is kept" in caplog.text
    assert resumed.epoch == 0 and resumed.state_dict()["position"] == 2  # continues at the saved step
    same = small(steps_per_epoch=4)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        same.load_state_dict(state)
    assert caplog.text == ""  # the same world size and epoch length: nothing to warn about


def test_training_batches_say_their_split() -> None:
    assert {b.split for b in small()} == {"train"}


def test_resume_refusals_name_what_changed() -> None:
    state = small().state_dict()
    other = MultiTaskBatchSampler({"a": 21, "b": 9}, {"a": 2, "b": 3}, SamplingSchedule("uniform"))
    phased = small(phases=[("a", 2), ("b", 2)])
    why = "Cannot resume the task sampler:"
    for sampler, saved, message in (
        (
            other,
            state,
            f"{why} the training data or batch sizes changed since the checkpoint (saved sizes "
            f"{state['sizes']}, batch sizes {state['batch_sizes']}; now {other.sizes}, {other.batch_sizes}). "
            "Resume with the same tasks, files, limit_examples and batch_size.",
        ),
        (
            phased,
            state,
            f"{why} the continual schedule changed since the checkpoint (saved phases [], now "
            "[['a', 0, 2], ['b', 2, 4]]). Resume with the same schedule, task_order, steps_per_task/epochs_per_task, "
            "batch_size and number of devices.",
        ),
        (
            small(),
            {k: v for k, v in small(phases=[("a", 2), ("b", 2)]).state_dict().items() if k != "batch_mixing"},
            f"{why} the continual schedule changed since the checkpoint (saved phases [['a', 0, 2], ['b', 2, 4]], "
            "now []). Resume with the same schedule, task_order, steps_per_task/epochs_per_task, "
            "batch_size and number of devices.",
        ),  # a state of before batch_mixing was saved: per_task, so the mixing check lets it through
    ):
        with pytest.raises(PalUserError) as err:
            sampler.load_state_dict(saved)
        assert str(err.value) == message


# ------------------------------------------------------------------ arguments


def test_defaults_are_one_rank_seed_42_and_pools_of_50() -> None:
    explicit = small(num_replicas=1, rank=0, seed=42, pool_batches=50)
    default = small()
    assert (default.num_replicas, default.rank, default.seed, default.pool_batches) == (1, 0, 42, 50)
    assert default.state_dict()["position"] == 0 and default.state_dict()["epoch"] == 0  # nothing drawn yet
    assert [tuple(b) for b in default] == [tuple(b) for b in explicit]


def test_argument_boundaries() -> None:
    small(num_replicas=2, rank=1)  # the last rank is valid
    small(steps_per_epoch=1)
    MultiTaskBatchSampler({"a": 1, "b": 1}, {"a": 1, "b": 1}, SamplingSchedule("uniform"))  # sizes/batches 1
    with pytest.raises(ValueError, match=r"Need 0 <= rank < num_replicas, got rank=2, num_replicas=2\."):
        small(num_replicas=2, rank=2)
    with pytest.raises(ValueError, match=r"got rank=0, num_replicas=0"):
        small(num_replicas=0, rank=0)
    with pytest.raises(PalUserError, match=r"No training examples in any task \(sizes \{'a': 0\}\)"):
        MultiTaskBatchSampler({"a": 0}, {"a": 1}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"No training examples in any task \(sizes \{\}\)"):
        MultiTaskBatchSampler({}, {}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"Batch sizes must be >= 1, got \{'a': 2, 'b': 0\}"):
        MultiTaskBatchSampler({"a": 20, "b": 9}, {"a": 2, "b": 0}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"steps_per_epoch must be >= 1, got 0"):
        small(steps_per_epoch=0)


# ------------------------------------------------------------------ evaluation batches


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


def test_eval_batches_by_hand() -> None:
    """Longest first when lengths are given, splits interleaved, empty splits skipped, rank blocks."""
    lengths = {("a", "dev"): np.array([3, 9, 1, 9, 5]), ("b", "dev"): np.array([2, 2])}
    splits = {("a", "dev"): 5, ("e", "dev"): 0, ("b", "dev"): 2}
    got = eval_batches(splits, {"a": 2, "b": 2, "e": 1}, lengths=lengths)
    # a sorted by length, longest first, ties in index order: 1, 3 (9), 4 (5), 0 (3), 2 (1)
    assert [(b.task, b.indices) for b in got] == [("a", (1, 3)), ("b", (0, 1)), ("a", (4, 0)), ("a", (2,))]
    # rank 1 of 2 takes the second block of each split: a -> [2, 5), b -> [1, 2)
    ranked = eval_batches(splits, {"a": 2, "b": 2, "e": 1}, num_replicas=2, rank=1)
    assert [(b.task, b.indices) for b in ranked] == [("a", (2, 3)), ("b", (1,)), ("a", (4,))]
    assert eval_batches(splits, {"a": 2, "b": 2, "e": 1}) == eval_batches(
        splits, {"a": 2, "b": 2, "e": 1}, num_replicas=1, rank=0
    )  # one rank by default
    three = eval_batches({("a", "dev"): 30, ("b", "dev"): 30, ("c", "dev"): 5}, {"a": 10, "b": 10, "c": 10})
    assert [b.task for b in three] == ["a", "b", "c", "a", "b", "a", "b"]  # interleaved past the shortest


def test_eval_batches_keep_index_order_among_equal_lengths() -> None:
    """A stable sort: with many ties (numpy's default sort is not stable beyond small arrays)."""
    lengths = {("a", "dev"): np.tile([1, 2], 50)}
    (batch,) = eval_batches({("a", "dev"): 100}, {"a": 100}, lengths=lengths)
    assert batch.indices == tuple(range(1, 100, 2)) + tuple(range(0, 100, 2))


PLAN = [("c", 5), ("a", 3), ("b", 4)]


def phased(**kw) -> MultiTaskBatchSampler:
    """A sampler of the sequential (continual) schedule's phases ``PLAN``."""
    return make(**{"phases": PLAN, **kw})


def test_phase_boundaries_and_task_order():
    s = phased()
    assert s.phases == [Phase("c", 0, 5), Phase("a", 5, 8), Phase("b", 8, 12)]
    assert s.steps_per_epoch == 12  # the whole continual run is one epoch
    assert [b.task for b in s] == ["c"] * 5 + ["a"] * 3 + ["b"] * 4
    # a shorter epoch spreads the phases over epochs; past the end the curriculum starts again
    short = phased(steps=5)
    tasks = [b.task for e in range(3) for b in short.batches(e)]
    assert tasks == ["c"] * 5 + ["a"] * 3 + ["b"] * 4 + ["c"] * 3
    # each phase walks through its task's examples without replacement
    stream = [i for b in s if b.task == "c" for i in b.indices]
    assert len(set(stream)) == len(stream) == 40
    with pytest.raises(PalUserError, match=">= 1 training batch"):
        make_phases([("a", 2), ("b", 0)])
    with pytest.raises(PalUserError, match="unknown tasks"):
        phased(phases=[("z", 2)])


def test_same_task_on_every_rank_with_disjoint_shares():
    ranks = [list(phased(world=2, rank=r)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 12
    for x, y in zip(*ranks, strict=True):
        assert x.task == y.task
        assert not set(x.indices) & set(y.indices)
    assert [b.task for b in ranks[0]] == ["c"] * 5 + ["a"] * 3 + ["b"] * 4


@pytest.mark.parametrize("k", [3, 5, 9])
def test_exact_mid_epoch_resume_through_state_dict(k):
    full = list(phased())
    first = phased()
    it = iter(first)
    consumed = [next(it) for _ in range(k)]
    state = first.state_dict()
    assert state["phases"] == [["c", 0, 5], ["a", 5, 8], ["b", 8, 12]] and state["position"] == k
    resumed = phased(seed=123)  # the saved seed wins
    resumed.load_state_dict(state)
    assert consumed + list(resumed) == full
    # a changed schedule is refused rather than silently continued
    with pytest.raises(PalUserError, match="continual schedule changed"):
        phased(phases=[("c", 5), ("a", 4), ("b", 4)]).load_state_dict(state)
