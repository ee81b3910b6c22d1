"""MultiTaskDataModule: batches, cache, errors, the sequential schedule's options, and a real Trainer
(epochs, resume mid-epoch and mid-phase)."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

import pal_lightning.data.split_cache as split_cache_mod
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.sampling.phase_plan import Phase
from pal_lightning.testing import quiet_trainer


def test_train_batches_follow_the_contract(data_dir, tokenizer, make_dm):
    dm = make_dm(data_dir, batch_size={"sst": 4, "qqp": 6, "sts": 3}, sampling="round_robin")
    dm.setup("fit")
    assert dm.train_sizes == {"sst": 40, "qqp": 61, "sts": 30}
    assert dm.steps_per_epoch == 10 + 11 + 10
    batches = list(dm.train_dataloader())
    assert len(batches) == dm.steps_per_epoch
    assert [b["task"] for b in batches[:3]] == ["sst", "qqp", "sts"]
    for b in batches[:3]:
        assert b["split"] == "train" and len(b["ids"]) == {"sst": 4, "qqp": 6, "sts": 3}[b["task"]]
        assert b["input_ids"].dtype == torch.long and b["input_ids"].shape == b["attention_mask"].shape
        # padding per batch: the longest example fills the width, padding is masked
        assert b["attention_mask"].sum(1).max() == b["input_ids"].shape[1]
        assert (b["input_ids"][b["attention_mask"] == 0] == tokenizer.pad_token_id).all()
    sts = batches[2]
    assert sts["labels"].dtype == torch.float32 and sts["labels"].max() <= 5
    qqp = batches[1]
    assert qqp["labels"].dtype == torch.long
    assert (qqp["token_type_ids"] == 1).any()  # cross pairs carry segment ids
    # texts really come from the files (PTB tokens were undone in SST)
    sst = batches[0]
    text = tokenizer.decode(sst["input_ids"][0][sst["attention_mask"][0] == 1], skip_special_tokens=True)
    assert "lrb" not in text and "( x )" in text


def test_siamese_pairs_and_limit_examples(data_dir, make_dm):
    dm = make_dm(data_dir, pair_encoding={"sts": "siamese"}, limit_examples=10, sampling="uniform")
    dm.setup("fit")
    assert dm.train_sizes == {"sst": 10, "qqp": 10, "sts": 10}
    seen = set()
    for b in dm.train_dataloader():
        seen.add(b["task"])
        if b["task"] == "sts":
            assert {"input_ids_a", "attention_mask_a", "token_type_ids_b"} <= set(b) and "input_ids" not in b
            assert (b["token_type_ids_a"] == 0).all()
        else:
            assert "input_ids" in b
    assert seen == {"sst", "qqp", "sts"}


def test_group_by_length_reduces_padding(data_dir, make_dm):
    def padding(dm):
        dm.setup("fit")
        return sum((1 - b["attention_mask"]).sum().item() for b in dm.train_dataloader())

    plain = padding(make_dm(data_dir, sampling="round_robin"))
    grouped_dm = make_dm(data_dir, sampling="round_robin", group_by_length=True)
    assert padding(grouped_dm) < 0.6 * plain
    assert grouped_dm.train_batch_sampler.lengths is not None


def test_cache_hit_skips_reading_and_tokenising(data_dir, tmp_path, monkeypatch, make_dm):
    first = make_dm(data_dir)
    first.setup("fit")
    files = sorted((tmp_path / "cache" / "tokenized").glob("*.npz"))
    assert len(files) == 6  # train + dev of three tasks

    def boom(*a, **k):
        raise AssertionError("cache miss: the file was read/tokenised again")

    monkeypatch.setattr(split_cache_mod, "read_split", boom)
    monkeypatch.setattr(split_cache_mod, "encode_split", boom)
    second = make_dm(data_dir)
    second.setup("fit")
    for t in ("sst", "qqp", "sts"):
        a, b = first.load_split(t, "train"), second.load_split(t, "train")
        assert (a.ids == b.ids).all() and (a.encodings[""].input_ids == b.encodings[""].input_ids).all()
    assert second.load_split("qqp", "train").skipped == 2  # counts survive the cache
    # a changed setting or file is a different key: the reader runs again
    with pytest.raises(AssertionError, match="cache miss"):
        make_dm(data_dir, max_length=16).setup("fit")
    (data_dir / "sts-dev.csv").write_text((data_dir / "sts-dev.csv").read_text() + "99\tnew\ta b\tc d\t1.0\n")
    with pytest.raises(AssertionError, match="cache miss"):
        make_dm(data_dir).setup("validate")


def test_missing_files_single_error(tmp_path, monkeypatch):
    monkeypatch.delenv("PAL_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()  # an empty ./data is a folder given (without one, the hub is tried)
    dm = MultiTaskDataModule(cache_dir=False)
    with pytest.raises(PalUserError) as err:
        dm.setup("fit")
    msg = str(err.value)
    for name in ("ids-sst-train.csv", "quora-dev.csv", "sts-train.csv"):
        assert name in msg
    assert str((tmp_path / "data").resolve()) in msg and "PAL_DATA_DIR" in msg
    assert "github.com/gpoesia/minbert-default-final-project" in msg  # where the CS224N files come from


def test_data_dir_from_env(data_dir, monkeypatch):
    monkeypatch.setenv("PAL_DATA_DIR", str(data_dir))
    dm = MultiTaskDataModule(cache_dir=False, tasks=["sst"])
    assert dm.data_dir == data_dir
    dm.setup("validate")
    assert len(dm.val_dataloader()) > 0


def test_on_bad_row_error_stops_setup(data_dir, make_dm):
    with pytest.raises(PalUserError, match="line"):
        make_dm(data_dir, on_bad_row="error").setup("fit")


def test_eval_and_predict_loaders(data_dir, make_dm):
    dm = make_dm(data_dir)
    dm.setup("validate")
    val = list(dm.val_dataloader())
    assert sorted(i for b in val if b["task"] == "sst" for i in b["ids"]) == [
        f"sstdev{i:03d}" for i in range(12)
    ]
    assert all("labels" in b and b["split"] == "dev" for b in val)
    dm.setup("predict")
    pred = list(dm.predict_dataloader())
    counts = {}
    for b in pred:
        counts[(b["task"], b["split"])] = counts.get((b["task"], b["split"]), 0) + len(b["ids"])
    assert counts == {
        ("sst", "dev"): 12,
        ("sst", "test"): 9,
        ("qqp", "dev"): 14,
        ("qqp", "test"): 7,
        ("sts", "dev"): 10,
        ("sts", "test"): 8,
    }
    assert all("labels" not in b for b in pred if b["split"] == "test")
    with pytest.raises(PalUserError, match="labelled test"):
        dm.test_dataloader()


def test_task_probabilities_for_epoch_and_anneal_horizon(data_dir, make_dm):
    dm = make_dm(data_dir, anneal_epochs=3)
    dm.setup("fit")
    p0, p2 = dm.task_probabilities_for_epoch(0), dm.task_probabilities_for_epoch(2)
    assert p0["qqp"] == pytest.approx(61 / 131)
    total = sum(n**0.2 for n in (40, 61, 30))
    assert p2["sts"] == pytest.approx(30**0.2 / total)


# --------------------------------------------------------------------------- with a real Trainer


class Recorder(pl.LightningModule):
    """Records (epoch, task, ids) of every training batch; a one-parameter-per-token model."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(30522, 1)
        self.seen: list[tuple[int, str, tuple[str, ...]]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append((self.current_epoch, batch["task"], tuple(batch["ids"])))
        return self.emb(batch["input_ids"]).mean() ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(dm, tmp_path, ckpt_path=None, callbacks=(), max_epochs=2, **trainer_kw):
    model = Recorder()
    trainer = quiet_trainer(
        **trainer_kw,
        max_epochs=max_epochs,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        callbacks=list(callbacks),
        enable_checkpointing=bool(callbacks),
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model, trainer


def test_trainer_epochs_reach_sampler_and_resume_mid_epoch(data_dir, tmp_path, make_dm):
    # group_by_length (on in most shipped configs) orders examples by length within pools: a resumed run
    # must still see exactly the batches the uninterrupted run saw from that step on
    kw = dict(limit_examples=12, sampling="annealed", group_by_length=True)
    full, trainer = fit(make_dm(data_dir, **kw), tmp_path / "a")
    assert trainer.datamodule.train_batch_sampler.lengths is not None
    steps = len(full.seen) // 2
    assert steps == 9  # 3 tasks x ceil(12 / 4)
    # the epoch reached the sampler: epoch 1 is a different order; and the Trainer was fixed up
    assert [s[1:] for s in full.seen[:steps]] != [s[1:] for s in full.seen[steps:]]
    assert trainer._accelerator_connector.use_distributed_sampler is False
    assert trainer.datamodule.sampling_schedule.num_epochs == 2  # anneal_epochs=None -> trainer.max_epochs
    # rebuilding the loader every epoch gives the same sequence
    reloaded, _ = fit(make_dm(data_dir, **kw), tmp_path / "r", reload_dataloaders_every_n_epochs=1)
    assert reloaded.seen == full.seen

    ckpt = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ck", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    fit(make_dm(data_dir, **kw), tmp_path / "b", callbacks=[ckpt])
    for k in (4, steps, steps + 3):  # mid epoch 0, end of epoch 0, mid epoch 1
        resumed, _ = fit(
            make_dm(data_dir, **kw), tmp_path / "c", ckpt_path=tmp_path / "ck" / f"step={k}.ckpt"
        )
        assert resumed.seen == full.seen[k:], f"resume from step {k}"


class PositionSpy(pl.Callback):
    def __init__(self) -> None:
        self.checks: list[tuple[int, int, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        sampler = trainer.datamodule.train_batch_sampler
        saved = trainer.fit_loop._combined_loader._state_dicts()[0]["position"]
        self.checks.append((batch_idx + 1, saved, sampler._position))


def test_saved_position_counts_consumed_batches_not_worker_prefetch(data_dir, make_dm):
    # A worker process pulls batches ahead of the training step; the saved position must not.
    spy = PositionSpy()
    dm = make_dm(data_dir, limit_examples=12, num_workers=1)
    model = Recorder()
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0, callbacks=[spy])
    trainer.fit(model, datamodule=dm)
    assert [c[0] for c in spy.checks] == [c[1] for c in spy.checks]
    assert any(c[2] > c[0] for c in spy.checks)  # the sampler itself did run ahead


@pytest.mark.parametrize("value", [False, "False", "false", "off"])
def test_cache_off_spellings_never_create_a_folder(value, data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dm = MultiTaskDataModule(data_dir=str(data_dir), cache_dir=value, tasks=["sts"])
    assert dm.cache_dir is None
    dm.setup("validate")
    assert not (tmp_path / str(value)).exists()


def test_cache_dir_default_from_env(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PAL_CACHE_DIR", str(tmp_path / "envcache"))
    assert MultiTaskDataModule(data_dir=str(data_dir), cache_dir=None).cache_dir == tmp_path / "envcache"
    assert MultiTaskDataModule(data_dir=str(data_dir), cache_dir="null").cache_dir == tmp_path / "envcache"


def test_annealing_horizon_from_max_steps_reaches_the_sampler(tmp_path, make_dm):
    """Training sized by ``max_steps`` anneals over ``ceil(max_steps / steps_per_epoch)`` epochs.

    Very unequal tasks (qqp 401 examples, sst and sts 8) make alpha visible in the draws: the share
    of qqp falls from 401 / 417 at alpha 1 to about a half at alpha 0.2. Expected values from the
    formulas alpha_e = 1 - 0.8 (e - 1) / (E - 1) and p = N^alpha / sum N^alpha, written out here.
    """
    from pal_lightning.testing import write_cs224n_quirks

    data = write_cs224n_quirks(tmp_path / "data", n_sst=8, n_qqp=400, n_sts=8, bad_rows=False)
    dm = make_dm(data, sampling="annealed", steps_per_epoch=50, cache_dir=False)
    model, trainer = fit(dm, tmp_path / "run", max_epochs=None, max_steps=200)
    assert trainer.global_step == 200 and trainer.current_epoch == 4
    # ceil(200 / 50), not 1 (which would be proportional sampling)
    assert dm.sampling_schedule.num_epochs == 4
    sizes = {"sst": 8, "qqp": 401, "sts": 8}  # the fixture adds one quoted qqp row
    assert dm.train_sizes == sizes
    for epoch in range(4):
        alpha = 1 - 0.8 * epoch / 3
        total = sum(n**alpha for n in sizes.values())
        expected = {t: n**alpha / total for t, n in sizes.items()}
        assert dm.task_probabilities_for_epoch(epoch) == pytest.approx(expected, rel=1e-12)
        # the real sampler's draws in this epoch follow them (within 4 standard deviations)
        drawn = [task for e, task, _ in model.seen if e == epoch]
        assert len(drawn) == 50
        p = expected["qqp"]
        drawn_qqp = drawn.count("qqp")
        assert abs(drawn_qqp - 50 * p) <= 4 * (50 * p * (1 - p)) ** 0.5 + 1, (epoch, drawn_qqp)
    per_epoch = [sum(task == "qqp" for e, task, _ in model.seen if e == epoch) for epoch in range(4)]
    assert per_epoch[0] >= 44 and per_epoch[3] <= 36  # alpha 1 -> 48 expected, alpha 0.2 -> 26
    # over the four epochs (expected 48.1 + 44.9 + 37.8 + 26.0, sd 5.3): a sampler one epoch ahead
    # (expected 134.7) or not annealing (192.3) is far outside
    alphas = (1, 1 - 0.8 / 3, 1 - 1.6 / 3, 0.2)
    shares = [sizes["qqp"] ** a / sum(n**a for n in sizes.values()) for a in alphas]
    mean, sd = sum(50 * p for p in shares), sum(50 * p * (1 - p) for p in shares) ** 0.5
    assert abs(sum(per_epoch) - mean) <= 3 * sd, (per_epoch, mean, sd)


def test_bad_row_warning_is_the_same_from_the_file_and_from_the_cache(data_dir, caplog, make_dm):
    # the fixture's sst train file: 42 data rows, line 42 has label 7 (classes 0..4), line 43 no text
    expected = (
        "ids-sst-train.csv: skipped 2 bad row(s) of 42 (task sst, train); lines 42 (label '7' outside the "
        "range [0, 4]), 43 (empty text in 'sentence'). Pass --data.on_bad_row error (on_bad_row='error' in "
        "Python) to stop instead."
    )

    def sst_warnings() -> list[str]:
        found = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ids-sst-train.csv")]
        caplog.clear()
        return found

    with caplog.at_level("WARNING"):
        read = make_dm(data_dir)
        read.setup("fit")  # reads the file
        assert sst_warnings() == [expected]
        read.load_split("sst", "train")
        assert sst_warnings() == []  # once per split
        cached = make_dm(data_dir)
        cached.prepare_data()  # from the cache, quietly: the command has not used the split yet
        assert sst_warnings() == []
        cached.setup("fit")  # first use by this command: the same words as when read
        assert sst_warnings() == [expected]


# --------------------------------------------------------------------------- the sequential schedule


def test_datamodule_options_phases_and_errors(data_dir, make_dm):
    """The sequential schedule's phases, and options the data module refuses (DataConfig alone: test_options.py)."""
    dm = make_dm(
        data_dir,
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
    dm = make_dm(data_dir, schedule="sequential", epochs_per_task=1.5)
    dm.setup("fit")
    sizes = {"sst": 40, "qqp": 61, "sts": 30}
    lengths = [math.ceil(1.5 * math.ceil(sizes[t] / 4)) for t in ("sst", "qqp", "sts")]
    assert [p.end - p.start for p in dm.phases] == lengths == [15, 24, 12]
    assert [p.task for p in dm.phases] == ["sst", "qqp", "sts"]
    assert make_dm(data_dir).phases == []  # interleaved has no phases
    bad = [
        (dict(schedule="sequential", task_order=["sst", "sst"]), "each at most once"),
        (dict(schedule="sequential", task_order=["mnli"]), "unknown \\['mnli'\\]"),
        (dict(schedule="sequential", steps_per_task=2, epochs_per_task=1), "not both"),
        (dict(schedule="sequential", epochs_per_task=0), "epochs_per_task must be > 0"),
        (dict(schedule="sequential", steps_per_task={"sst": 2}), "missing \\['qqp', 'sts'\\]"),
        (dict(batch_size={"sst": 4}), "batch_size .* missing \\['qqp', 'sts'\\]"),
        (
            dict(sampling="weights", task_weights={"sst": 1}),
            "task_weights must name exactly the training tasks",
        ),
    ]
    for kw, match in bad:
        with pytest.raises(PalUserError, match=match):
            make_dm(data_dir, **kw)


def test_trainer_runs_phases_in_order_and_resumes_mid_phase(data_dir, tmp_path, make_dm):
    import lightning.pytorch as pl

    kw = dict(limit_examples=12, schedule="sequential", task_order=["sts", "sst", "qqp"], steps_per_task=3)
    full, _ = fit(make_dm(data_dir, **kw), tmp_path / "a", max_epochs=1)
    assert [s[1] for s in full.seen] == ["sts"] * 3 + ["sst"] * 3 + ["qqp"] * 3
    ckpt = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ck", every_n_train_steps=1, save_top_k=-1, filename="{step}"
    )
    fit(make_dm(data_dir, **kw), tmp_path / "b", callbacks=[ckpt], max_epochs=1)
    resumed, _ = fit(
        make_dm(data_dir, **kw),
        tmp_path / "c",
        ckpt_path=tmp_path / "ck" / "step=4.ckpt",
        max_epochs=1,
    )
    assert resumed.seen == full.seen[4:]
