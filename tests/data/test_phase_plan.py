"""The sequential (continual) task schedule (pal_lightning.data.sampling.phase_plan and the sampler's phases):
phases, task order, resume and ranks."""

from __future__ import annotations

import math

import pytest
from test_datamodule import fit, make_dm

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


def test_datamodule_options_phases_and_errors(data_dir, tmp_path):
    dm = make_dm(
        data_dir,
        tmp_path,
        schedule="sequential",
        task_order=["qqp", "sst"],
        steps_per_task={"qqp": 3, "sst": 2},
    )
    dm.setup("fit")
    assert dm.phases == [Phase("qqp", 0, 3), Phase("sst", 3, 5)]
    assert dm.steps_per_epoch == 5
    assert [b["task"] for b in dm.train_dataloader()] == ["qqp"] * 3 + ["sst"] * 2
    assert dm.hparams["schedule"] == "sequential" and dm.hparams["task_order"] == ["qqp", "sst"]
    assert dm.hparams["steps_per_task"] == {"qqp": 3, "sst": 2}
    # epochs_per_task (default 1): one pass = ceil(N_t / B_t) batches per task, in the task list order
    dm = make_dm(data_dir, tmp_path, schedule="sequential", epochs_per_task=1.5)
    dm.setup("fit")
    sizes = {"sst": 40, "qqp": 61, "sts": 30}
    lengths = [math.ceil(1.5 * math.ceil(sizes[t] / 4)) for t in ("sst", "qqp", "sts")]
    assert [p.end - p.start for p in dm.phases] == lengths == [15, 24, 12]
    assert [p.task for p in dm.phases] == ["sst", "qqp", "sts"]
    assert make_dm(data_dir, tmp_path).phases == []  # interleaved has no phases
    bad = [
        (dict(schedule="curriculum"), "Unknown schedule"),
        (dict(task_order=["sst"]), "only apply to schedule='sequential'"),
        (dict(schedule="sequential", task_order=["sst", "sst"]), "each at most once"),
        (dict(schedule="sequential", task_order=["mnli"]), "unknown \\['mnli'\\]"),
        (dict(schedule="sequential", steps_per_task=2, epochs_per_task=1), "not both"),
        (dict(schedule="sequential", epochs_per_task=0), "epochs_per_task must be > 0"),
        (dict(schedule="sequential", steps_per_task={"sst": 2}), "missing \\['qqp', 'sts'\\]"),
    ]
    for kw, match in bad:
        with pytest.raises(PalUserError, match=match):
            make_dm(data_dir, tmp_path, **kw)


def test_trainer_runs_phases_in_order_and_resumes_mid_phase(data_dir, tmp_path):
    import lightning.pytorch as pl

    kw = dict(limit_examples=12, schedule="sequential", task_order=["sts", "sst", "qqp"], steps_per_task=3)
    full, _ = fit(make_dm(data_dir, tmp_path, **kw), tmp_path / "a", max_epochs=1)
    assert [s[1] for s in full.seen] == ["sts"] * 3 + ["sst"] * 3 + ["qqp"] * 3
    ckpt = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ck", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    fit(make_dm(data_dir, tmp_path, **kw), tmp_path / "b", callbacks=[ckpt], max_epochs=1)
    resumed, _ = fit(
        make_dm(data_dir, tmp_path, **kw),
        tmp_path / "c",
        ckpt_path=tmp_path / "ck" / "step=4.ckpt",
        max_epochs=1,
    )
    assert resumed.seen == full.seen[4:]
