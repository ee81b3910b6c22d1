"""Mixed-task batches (pal_lightning.data.sampling.mixed): the sampler, its refusals, and the module's step
on a real mixed batch (the row mean loss; a tiny fit; GEM refused)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.options import DataConfig
from pal_lightning.data.sampling.mixed import MixedBatch, MixedTaskBatchSampler
from pal_lightning.data.sampling.per_task import PER_TASK, MultiTaskBatchSampler
from pal_lightning.data.sampling.schedules import SamplingSchedule

SIZES = {"a": 23, "b": 37, "c": 13}


def make(
    world: int = 1, rank: int = 0, seed: int = 5, steps: int | None = None, **kw
) -> MixedTaskBatchSampler:
    schedule = kw.pop("schedule", SamplingSchedule("annealed", num_epochs=3))
    sizes, batch = kw.pop("sizes", SIZES), kw.pop("batch_size", 2)
    kw.update(steps_per_epoch=steps, num_replicas=world, rank=rank, seed=seed)
    return MixedTaskBatchSampler(sizes, dict.fromkeys(sizes, batch), schedule, **kw)


def widths(sizes: dict[str, int] = SIZES, seed: int = 0) -> dict[str, np.ndarray]:
    """Random padded widths per example, a different range per task (as SST's sentences outgrow Quora's)."""
    rng = np.random.default_rng(seed)
    return {t: rng.integers(4 + 6 * i, 30 + 10 * i, size=n) for i, (t, n) in enumerate(sizes.items())}


GROUPED = {"lengths": widths(), "pool_batches": 7}


def epoch(sampler: MixedTaskBatchSampler, e: int) -> list[MixedBatch]:
    sampler.set_epoch(e)
    return list(sampler)


def test_rows_draw_tasks_by_each_epochs_annealed_probabilities() -> None:
    sizes = {"a": 800, "b": 200, "c": 50}
    s = make(sizes=sizes, steps=400)
    freqs = []
    for e in range(3):
        p = s.schedule.probabilities(sizes, e)
        counts = Counter(part.task for b in epoch(s, e) for part in b.parts for _ in part.indices)
        total = sum(counts.values())
        assert total == 400 * 2  # every batch has B rows
        freqs.append([counts[t] / total for t in sizes])
        assert np.allclose(freqs[-1], [p[t] for t in sizes], atol=0.05), (e, freqs[-1], p)
    assert freqs[0][0] > freqs[2][0] + 0.2  # annealing: proportional, then close to uniform
    # one pass by default, as many steps as the per-task sampler
    assert (
        make().steps_per_epoch
        == MultiTaskBatchSampler(SIZES, dict.fromkeys(SIZES, 2), SamplingSchedule()).steps_per_epoch
    )


@pytest.mark.parametrize("grouping", [{}, GROUPED], ids=["plain", "grouped"])
def test_ddp_shares_disjoint_and_each_task_stream_without_replacement(grouping: dict) -> None:
    ranks = [make(world=2, rank=r, steps=30, **grouping) for r in range(2)]
    streams: dict[str, list[int]] = {t: [] for t in SIZES}
    for e in range(3):
        per_rank = [epoch(s, e) for s in ranks]
        assert len(per_rank[0]) == len(per_rank[1]) == 30
        for b0, b1 in zip(*per_rank, strict=True):
            assert sum(len(p.indices) for p in b0.parts) == sum(len(p.indices) for p in b1.parts) == 2
            for t in SIZES:  # the global batch: rank 0's rows of t, then rank 1's, in stream order
                rows = [i for b in (b0, b1) for p in b.parts if p.task == t for i in p.indices]
                assert len(rows) == len(set(rows)), (e, t, rows)  # no repeat inside a global batch
                streams[t] += rows
    for t, n in SIZES.items():
        stream = streams[t]
        if grouping:  # examples move between the steps of a pool, never out of it
            continue
        passes = [stream[k : k + n] for k in range(0, len(stream) - n + 1, n)]
        assert passes and all(sorted(p) == list(range(n)) for p in passes), t  # each pass a permutation
        assert passes[0] != passes[1]  # reshuffled


def global_batches(sampler_kw: dict, world: int = 2, e: int = 0) -> list[list[tuple[str, int]]]:
    ranks = [make(world=world, rank=r, **sampler_kw) for r in range(world)]
    batches = zip(*(epoch(s, e) for s in ranks), strict=True)
    return [[(p.task, i) for b in step for p in b.parts for i in p.indices] for step in batches]


def test_grouping_keeps_every_rows_task_and_cuts_the_padding() -> None:
    sizes = {"a": 400, "b": 300, "c": 200}
    lengths = widths(sizes, seed=1)
    kw = {"sizes": sizes, "steps": 60, "batch_size": 4}
    plain = global_batches(kw)
    grouped = global_batches({**kw, "lengths": lengths, "pool_batches": 20})
    for e in range(2):  # per rank, per step: the same drawn task counts
        for r in range(2):
            a, b = (epoch(make(world=2, rank=r, **kw, **extra), e) for extra in ({}, {"lengths": lengths}))
            assert [[(p.task, len(p.indices)) for p in x.parts] for x in a] == [
                [(p.task, len(p.indices)) for p in x.parts] for x in b
            ]
    for p0 in range(0, 60, 20):  # each pool uses the same examples, dealt differently
        pool = slice(p0, p0 + 20)
        assert Counter(x for s in plain[pool] for x in s) == Counter(x for s in grouped[pool] for x in s)
    assert plain != grouped
    small = {"steps": 30, **GROUPED}  # pools of 7, the last one of 2; epochs 1 and 2 continue the streams
    for e in range(3):
        a, b = global_batches({"steps": 30}, e=e), global_batches(small, e=e)
        for p0 in range(0, 30, 7):
            assert Counter(x for s in a[p0 : p0 + 7] for x in s) == Counter(
                x for s in b[p0 : p0 + 7] for x in s
            )

    def mean_width(batches: list[list[tuple[str, int]]]) -> float:
        return float(np.mean([max(lengths[t][i] for t, i in step) for step in batches]))

    assert mean_width(grouped) < 0.9 * mean_width(plain), (mean_width(grouped), mean_width(plain))
    for step in grouped:  # every task's rows of a step longest first (rank 0's rows, then rank 1's)
        for t in sizes:
            w = [lengths[t][i] for task, i in step if task == t]
            assert w == sorted(w, reverse=True), (t, w)
    # long steps are spread over the epoch, not first in every pool
    firsts = [max(lengths[t][i] for t, i in grouped[p0]) for p0 in range(0, 60, 20)]
    assert len(set(firsts)) > 1 or firsts[0] < max(max(lengths[t][i] for t, i in s) for s in grouped)


def test_grouping_keeps_repeats_out_of_a_global_batch() -> None:
    """Small tasks cross a pass boundary inside most pools; sorted, the two copies of an example would sit
    side by side in one step."""
    sizes = {"a": 30, "b": 24, "c": 50}
    lengths = {t: np.arange(n) % 5 + 3 for t, n in sizes.items()}  # many equal widths: copies collide
    kw = {"sizes": sizes, "steps": 40, "batch_size": 3, "lengths": lengths, "pool_batches": 20}
    for e in range(3):
        for step in global_batches(kw, e=e):
            assert len(step) == len(set(step)) == 6, step


def test_report_sequence_split_and_pool_size() -> None:
    s = make(steps=12, **GROUPED)
    draws = s.row_tasks(0)
    majority = [np.bincount(row, minlength=3).argmax() for row in draws]
    assert s.task_sequence(0).tolist() == majority  # the task of most rows (first on ties)
    assert {p.split for b in epoch(s, 0) for p in b.parts} == {"train"}
    assert {p.split for b in epoch(make(split="dev"), 0) for p in b.parts} == {"dev"}
    assert list(make(steps=12, **GROUPED).batches(0)) == epoch(make(steps=12, **GROUPED), 0)
    one = make(steps=5, lengths=widths(), pool_batches=1)  # a pool of one step: its own order
    assert sum(len(p.indices) for b in epoch(one, 0) for p in b.parts) == 10
    # the seed reaches the streams
    assert epoch(make(seed=1, **GROUPED), 0) != epoch(make(seed=2, **GROUPED), 0)
    default = MixedTaskBatchSampler(SIZES, dict.fromkeys(SIZES, 2), SamplingSchedule())
    assert (default.num_replicas, default.rank, default.seed, default.pool_batches) == (1, 0, 42, 50)
    assert (default.split, default.lengths) == ("train", None)


@pytest.mark.parametrize("at", [4, 9], ids=["first_pool", "second_pool"])  # grouped: pools of 7 steps
@pytest.mark.parametrize("grouping", [{}, GROUPED], ids=["plain", "grouped"])
@pytest.mark.parametrize("world", [1, 2])
def test_resume_gives_the_same_batches(world: int, grouping: dict, at: int) -> None:
    for rank in range(world):
        full = [epoch(make(world, rank, **grouping), e) for e in range(3)]
        first = make(world, rank, **grouping)
        epoch(first, 0)
        first.set_epoch(1)
        it = iter(first)
        consumed = [next(it) for _ in range(at)]
        state = first.state_dict()
        assert state["batch_mixing"] == "mixed" and state["position"] == at
        resumed = make(world, rank, seed=999, **grouping)  # the saved seed wins
        resumed.load_state_dict(state)
        assert consumed + list(resumed) == full[1]
        resumed.set_epoch(2)
        assert list(resumed) == full[2]


def test_refusals_each_name_the_fix() -> None:
    per_task = MultiTaskBatchSampler(SIZES, dict.fromkeys(SIZES, 2), SamplingSchedule())
    for sampler, state, saved, now in (
        (make(), per_task.state_dict(), "per_task", "mixed"),
        (per_task, make().state_dict(), "mixed", "per_task"),
    ):
        with pytest.raises(PalUserError) as err:
            sampler.load_state_dict(state)
        assert str(err.value) == (
            f"Cannot resume the task sampler: the checkpoint trained with batch_mixing {saved!r}, this run asks "
            f"for {now!r}. Resume with --data.batch_mixing {saved}, or start a new fit without --ckpt_path."
        )
    with pytest.raises(PalUserError, match="--data.sampling uniform"):
        make(schedule=SamplingSchedule("round_robin"))
    with pytest.raises(
        TypeError
    ) as type_err:  # a programming error: the data module never passes phases here
        make(phases=[("a", 2)])
    assert (
        str(type_err.value)
        == "MixedTaskBatchSampler takes no phases: a sequential schedule trains one task at a time."
    )
    with pytest.raises(PalUserError, match="one --data.batch_size"):
        MixedTaskBatchSampler(SIZES, {"a": 2, "b": 2, "c": 4}, SamplingSchedule())
    for sampler in (MixedTaskBatchSampler, MultiTaskBatchSampler):  # the shared constructor checks it
        with pytest.raises(PalUserError, match="pool_batches must be >= 1"):
            sampler(SIZES, dict.fromkeys(SIZES, 2), SamplingSchedule(), lengths=widths(), pool_batches=0)
    DataConfig(batch_mixing="mixed", group_by_length=True)  # grouping has a mixed form
    for options, message in (
        (
            {"schedule": "sequential"},
            "batch_mixing 'mixed' draws every row's task from the interleaved sampling schedule; the sequential "
            "schedule trains one task after another. Use --data.batch_mixing per_task, or --data.schedule "
            "interleaved.",
        ),
        (
            {"sampling": "round_robin"},
            "sampling 'round_robin' cycles through whole batches, one task each; with batch_mixing 'mixed' every "
            "row draws its task. Use --data.sampling uniform (the same frequencies), or --data.batch_mixing "
            "per_task.",
        ),
    ):
        with pytest.raises(PalUserError) as err:
            DataConfig(batch_mixing="mixed", **options)
        assert str(err.value) == message  # word for word: each names the fix
    with pytest.raises(PalUserError, match="choose one of per_task, mixed"):
        DataConfig(batch_mixing="rows")


# ------------------------------------------------------------------ through the data module and the module

PAIRS = {"qqp": "siamese", "sts": "siamese", "default": "cross"}  # the quickstart's layout (sst single)


@pytest.fixture(scope="module")
def mixed_data(tmp_path_factory: pytest.TempPathFactory):
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.testing import write_cs224n_data

    folder = write_cs224n_data(tmp_path_factory.mktemp("mixed") / "data")
    options = {"batch_size": 6, "max_length": 32, "steps_per_epoch": 2, "cache_dir": False}
    options["pair_encoding"] = PAIRS
    return folder, options, MultiTaskDataModule(data_dir=str(folder), batch_mixing="mixed", **options)


def tiny_module(**kw):
    from pal_lightning import MultiTaskModule
    from pal_lightning.testing import TINY_BERT, without_dropout

    torch.manual_seed(0)
    kw.update(adapter={"num_heads": 2, "size": 8}, pair_encoding=PAIRS, dropout=0.0)
    return MultiTaskModule(encoder_config=without_dropout(TINY_BERT), **kw)


def test_the_data_module_groups_mixed_batches_by_each_examples_longer_side(mixed_data) -> None:
    from pal_lightning.data import MultiTaskDataModule

    folder, options, plain = mixed_data
    plain.setup("fit")
    assert plain.train_dataloader().batch_sampler.lengths is None  # the fixture's group_by_length: off
    dm = MultiTaskDataModule(data_dir=str(folder), batch_mixing="mixed", group_by_length=True, **options)
    dm.setup("fit")
    sampler = dm.train_dataloader().batch_sampler
    assert isinstance(sampler, MixedTaskBatchSampler)
    for task in ("sst", "qqp", "sts"):
        split = dm.load_split(task, "train")
        sides = [enc.lengths for enc in split.encodings.values()]
        assert len(sides) == (2 if task != "sst" else 1)  # qqp and sts siamese
        np.testing.assert_array_equal(sampler.lengths[task], np.maximum.reduce(sides))


def test_mixed_step_loss_is_the_row_mean_of_the_one_task_losses(mixed_data) -> None:
    _, _, dm = mixed_data
    dm.setup("fit")
    batch = next(b for b in dm.train_dataloader() if len(set(b["tasks"])) > 1)
    assert "input_ids_b" in batch and len(batch["tasks"]) == len(batch["ids"]) == 6
    model = tiny_module()
    out = model._mixed_training_step(batch)
    expected = 0.0
    for task, n in Counter(batch["tasks"]).items():
        rows = [i for i, t in enumerate(batch["tasks"]) if t == task]
        one_task = dm.train_batch(task, [batch["indices"][i] for i in rows])  # the same rows, one-task layout
        loss = model.batch_loss(one_task)
        assert torch.allclose(out["task_losses"][task], loss.detach(), atol=1e-5), task
        expected += n / 6 * loss.item()
    assert float(out["loss"]) == pytest.approx(expected, abs=1e-5)


def test_tiny_fit_logs_present_tasks_and_refuses_gem(mixed_data, tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    from pal_lightning.callbacks.training_log import TrainingLog
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.gem import GEMCallback
    from pal_lightning.testing import quiet_trainer

    folder, options, _ = mixed_data
    dm = MultiTaskDataModule(data_dir=str(folder), batch_mixing="mixed", **options)
    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(
        max_steps=2, limit_val_batches=0, logger=logger, callbacks=[TrainingLog()], log_every_n_steps=1
    )
    trainer.fit(tiny_module(), datamodule=dm)
    header = (Path(logger.log_dir) / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "train/steps/sst", "train/examples_per_s"} <= set(header)
    assert sum(f"train/{t}/loss" in header for t in ("sst", "qqp", "sts")) >= 2
    gem = MultiTaskDataModule(data_dir=str(folder), batch_mixing="mixed", **options)
    with pytest.raises(PalUserError, match="--data.batch_mixing per_task"):
        quiet_trainer(max_steps=1, callbacks=[GEMCallback(memory_size=4, memory_batch_size=2)]).fit(
            tiny_module(), datamodule=gem
        )


@pytest.mark.ddp
def test_the_default_batch_mixing_is_per_task() -> None:
    """options.py writes the default out: it must stay PER_TASK."""
    assert DataConfig.__dataclass_fields__["batch_mixing"].default == PER_TASK
