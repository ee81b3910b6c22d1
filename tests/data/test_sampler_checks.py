"""MultiTaskBatchSampler's argument checks at their boundaries, its defaults, and resuming with another
world size or steps_per_epoch (found by mutation testing: tools/mutation/run.sh samplers)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.batch_samplers import MultiTaskBatchSampler
from pal_lightning.data.schedules import SamplingSchedule

SIZES = {"a": 20, "b": 9}
BATCH = {"a": 2, "b": 3}


def _sampler(**kw) -> MultiTaskBatchSampler:
    return MultiTaskBatchSampler(SIZES, BATCH, SamplingSchedule("uniform"), **kw)


def _batches(sampler: MultiTaskBatchSampler) -> list[tuple[str, tuple[int, ...]]]:
    return [(b.task, tuple(b.indices)) for b in sampler]


def test_defaults_are_one_rank_seed_42_and_pools_of_50() -> None:
    explicit = _sampler(num_replicas=1, rank=0, seed=42, pool_batches=50)
    default = _sampler()
    assert (default.num_replicas, default.rank, default.seed, default.pool_batches) == (1, 0, 42, 50)
    assert default.state_dict()["position"] == 0 and default.state_dict()["epoch"] == 0  # nothing drawn yet
    assert _batches(default) == _batches(explicit)


def test_argument_boundaries() -> None:
    _sampler(num_replicas=2, rank=1)  # the last rank is valid
    _sampler(steps_per_epoch=1)
    MultiTaskBatchSampler({"a": 1, "b": 1}, {"a": 1, "b": 1}, SamplingSchedule("uniform"))  # sizes/batches 1
    with pytest.raises(ValueError, match=r"Need 0 <= rank < num_replicas, got rank=2, num_replicas=2\."):
        _sampler(num_replicas=2, rank=2)
    with pytest.raises(ValueError, match=r"got rank=0, num_replicas=0"):
        _sampler(num_replicas=0, rank=0)
    with pytest.raises(PalUserError, match=r"No training examples in any task \(sizes \{'a': 0\}\)"):
        MultiTaskBatchSampler({"a": 0}, {"a": 1}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"No training examples in any task \(sizes \{\}\)"):
        MultiTaskBatchSampler({}, {}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"Batch sizes must be >= 1, got \{'a': 2, 'b': 0\}"):
        MultiTaskBatchSampler(SIZES, {"a": 2, "b": 0}, SamplingSchedule("uniform"))
    with pytest.raises(PalUserError, match=r"steps_per_epoch must be >= 1, got 0"):
        _sampler(steps_per_epoch=0)


@pytest.mark.parametrize(("world", "steps"), [(2, None), (1, 5)])
def test_resume_with_another_world_size_or_steps_per_epoch_warns_and_continues(
    world: int, steps: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    saved = _sampler(steps_per_epoch=4)
    it = iter(saved)
    next(it), next(it)
    state = saved.state_dict()
    assert (state["position"], state["num_replicas"], state["steps_per_epoch"]) == (2, 1, 4)
    resumed = _sampler(num_replicas=world, rank=0, steps_per_epoch=steps)
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict(state)
    now = f"{world}/{resumed.steps_per_epoch}"
    assert f"Resuming with a different world size or steps_per_epoch (saved 1/4, now {now})" in caplog.text
    assert "the task order is kept" in caplog.text
    assert resumed.epoch == 0 and resumed.state_dict()["position"] == 2  # continues at the saved step
    same = _sampler(steps_per_epoch=4)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        same.load_state_dict(state)
    assert caplog.text == ""  # the same world size and epoch length: nothing to warn about


def test_resume_refusals_name_what_changed() -> None:
    state = _sampler().state_dict()
    with pytest.raises(
        PalUserError, match=r"^Cannot resume the task sampler: the training data or batch sizes"
    ):
        MultiTaskBatchSampler({"a": 21, "b": 9}, BATCH, SamplingSchedule("uniform")).load_state_dict(state)
    phased = MultiTaskBatchSampler(SIZES, BATCH, SamplingSchedule("uniform"), phases=[("a", 2), ("b", 2)])
    with pytest.raises(
        PalUserError,
        match=r"^Cannot resume the task sampler: the continual schedule changed.*Resume with the same schedule, task_order",
    ):
        phased.load_state_dict(state)


def test_eval_batches_by_hand() -> None:
    """Longest first when lengths are given, splits interleaved, empty splits skipped, rank blocks."""
    from pal_lightning.data.batch_samplers import eval_batches

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


def test_eval_batches_keep_index_order_among_equal_lengths() -> None:
    """A stable sort: with many ties (numpy's default sort is not stable beyond small arrays)."""
    from pal_lightning.data.batch_samplers import eval_batches

    lengths = {("a", "dev"): np.tile([1, 2], 50)}
    (batch,) = eval_batches({("a", "dev"): 100}, {"a": 100}, lengths=lengths)
    assert batch.indices == tuple(range(1, 100, 2)) + tuple(range(0, 100, 2))
