"""The sequential (continual) task schedule (pal_lightning.data.sampling.phase_plan and the sampler's phases):
phases, task order, resume and ranks."""

from __future__ import annotations

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler
from pal_lightning.data.sampling.phase_plan import Phase, make_phases
from pal_lightning.data.sampling.schedules import SamplingSchedule

SIZES = {"a": 100, "b": 37, "c": 250}
BATCH = {"a": 4, "b": 3, "c": 8}
PLAN = [("c", 5), ("a", 3), ("b", 4)]


def make(world=1, rank=0, steps=None, plan=PLAN, seed=7):
    return MultiTaskBatchSampler(
        SIZES,
        BATCH,
        SamplingSchedule("annealed"),
        steps_per_epoch=steps,
        num_replicas=world,
        rank=rank,
        seed=seed,
        phases=plan,
    )


def test_phase_boundaries_and_task_order():
    s = make()
    assert s.phases == [Phase("c", 0, 5), Phase("a", 5, 8), Phase("b", 8, 12)]
    assert s.steps_per_epoch == 12  # the whole continual run is one epoch
    assert [b.task for b in s] == ["c"] * 5 + ["a"] * 3 + ["b"] * 4
    # a shorter epoch spreads the phases over epochs; past the end the curriculum starts again
    short = make(steps=5)
    tasks = [b.task for e in range(3) for b in short.batches(e)]
    assert tasks == ["c"] * 5 + ["a"] * 3 + ["b"] * 4 + ["c"] * 3
    # each phase walks through its task's examples without replacement
    stream = [i for b in s if b.task == "c" for i in b.indices]
    assert len(set(stream)) == len(stream) == 40
    with pytest.raises(PalUserError, match=">= 1 training batch"):
        make_phases([("a", 2), ("b", 0)])
    with pytest.raises(PalUserError, match="unknown tasks"):
        make(plan=[("z", 2)])


def test_same_task_on_every_rank_with_disjoint_shares():
    ranks = [list(make(world=2, rank=r)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 12
    for x, y in zip(*ranks, strict=True):
        assert x.task == y.task
        assert not set(x.indices) & set(y.indices)
    assert [b.task for b in ranks[0]] == ["c"] * 5 + ["a"] * 3 + ["b"] * 4


@pytest.mark.parametrize("k", [3, 5, 9])
def test_exact_mid_epoch_resume_through_state_dict(k):
    full = list(make())
    first = make()
    it = iter(first)
    consumed = [next(it) for _ in range(k)]
    state = first.state_dict()
    assert state["phases"] == [["c", 0, 5], ["a", 5, 8], ["b", 8, 12]] and state["position"] == k
    resumed = make(seed=123)  # the saved seed wins
    resumed.load_state_dict(state)
    assert consumed + list(resumed) == full
    # a changed schedule is refused rather than silently continued
    with pytest.raises(PalUserError, match="continual schedule changed"):
        make(plan=[("c", 5), ("a", 4), ("b", 4)]).load_state_dict(state)
