"""Auxiliary tasks: trained and scored, but left out of ``val/overall``; their sampling multipliers; and the
overlays (SNLI through ``datasets`` offline, CFIMDB + GLUE SST-2 on the real data files)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler
from pal_lightning.data.sampling.schedules import SamplingSchedule, apply_multipliers
from pal_lightning.data.sources.readers import read_split
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def write_cfimdb(root: Path, n_train: int = 12, n_dev: int = 9) -> None:
    """CFIMDB files in the CS224N layout (single sentences, labels 0/1)."""
    header = "\tid\tsentence\tsentiment"
    words = "a fine film with a dull plot and great music".split()
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = [
            f"{i}\tc{split[0]}{i}\t{' '.join(words[i % 4 : i % 4 + 3 + i % 5])}\t{i % 2}" for i in range(n)
        ]
        (root / f"ids-cfimdb-{split}.csv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


def tiny(tasks: list[str], **kw: object) -> MultiTaskModule:
    return MultiTaskModule(
        tasks=tasks,
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2},
        dropout=0.0,
        pair_encoding="siamese",
        **kw,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = write_cs224n_data(tmp_path / "data", n_dev=11)
    write_cfimdb(root)
    return root


def test_auxiliary_task_left_out_of_overall(data_dir: Path) -> None:
    """val/overall = the mean over the main tasks (SST accuracy and (STS r + 1) / 2), computed here by hand
    from the model's own outputs; the auxiliary task's accuracy is logged but does not enter it."""
    tasks = ["sst", "sts", "cfimdb"]
    torch.manual_seed(0)
    model = tiny(tasks, auxiliary=["cfimdb"])
    dm = MultiTaskDataModule(
        tasks=tasks, data_dir=data_dir, pair_encoding="siamese", eval_batch_size=4, cache_dir=False
    )
    trainer = quiet_trainer()
    metrics = trainer.validate(model, datamodule=dm, verbose=False)[0]

    model.eval()
    outputs: dict[str, list[torch.Tensor]] = {t: [] for t in tasks}
    labels: dict[str, list[torch.Tensor]] = {t: [] for t in tasks}
    with torch.no_grad():
        for batch in dm.val_dataloader():
            outputs[batch["task"]].append(model(batch))
            labels[batch["task"]].append(batch["labels"])
    acc = {
        t: float((torch.cat(outputs[t]).argmax(-1) == torch.cat(labels[t])).double().mean())
        for t in ("sst", "cfimdb")
    }
    # the STS head scores a cosine in [-1, 1] mapped to 0..5; Pearson is invariant to that affine map
    r = float(np.corrcoef(torch.cat(outputs["sts"]).numpy(), torch.cat(labels["sts"]).numpy())[0, 1])
    expected = (acc["sst"] + (r + 1) / 2) / 2
    assert metrics["val/overall"] == pytest.approx(expected, abs=1e-6)
    assert metrics["val/cfimdb/accuracy"] == pytest.approx(acc["cfimdb"], abs=1e-6)
    with_cfimdb = (acc["sst"] + (r + 1) / 2 + acc["cfimdb"]) / 3
    assert not math.isclose(with_cfimdb, expected, abs_tol=1e-6)  # the flag made a difference


def test_auxiliary_keeps_the_overall_of_the_main_tasks(data_dir: Path) -> None:
    """Adding an auxiliary task does not change val/overall: equal to a model without it, same weights."""
    torch.manual_seed(1)
    with_aux = tiny(["sst", "qqp", "cfimdb"], auxiliary=["cfimdb"])
    without = tiny(["sst", "qqp"])
    shared = {k: v for k, v in with_aux.state_dict().items() if k in without.state_dict()}
    # the model without cfimdb lacks only its adapter and head
    assert set(without.state_dict()) == set(shared)
    without.load_state_dict(shared)
    scores = []
    for model, tasks in ((with_aux, ["sst", "qqp", "cfimdb"]), (without, ["sst", "qqp"])):
        dm = MultiTaskDataModule(tasks=tasks, data_dir=data_dir, pair_encoding="siamese", cache_dir=False)
        trainer = quiet_trainer()
        scores.append(trainer.validate(model, datamodule=dm, verbose=False)[0])
    assert scores[0]["val/overall"] == pytest.approx(scores[1]["val/overall"], abs=1e-7)
    assert "val/cfimdb/accuracy" in scores[0]
    expected = (scores[1]["val/sst/accuracy"] + scores[1]["val/qqp/accuracy"]) / 2
    assert scores[0]["val/overall"] == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize(
    ("auxiliary", "fragment"),
    [
        (["snli"], "auxiliary names ['snli'], which are not among the tasks"),
        (["sst", "sst"], "more than once"),
        (["sst", "qqp"], "Every task"),
    ],
)
def test_bad_auxiliary_is_one_line(auxiliary: list[str], fragment: str) -> None:
    with pytest.raises(PalUserError) as err:
        tiny(["sst", "qqp"], auxiliary=auxiliary)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ sampling multipliers


def test_apply_multipliers_by_hand() -> None:
    probs = {"a": 0.5, "b": 0.3, "c": 0.2}
    out = apply_multipliers(probs, {"a": 0.2})
    # by hand: weights 0.1, 0.3, 0.2 -> / 0.6
    assert out == pytest.approx({"a": 0.1 / 0.6, "b": 0.5, "c": 0.2 / 0.6})
    assert apply_multipliers(probs, None) == probs
    with pytest.raises(PalUserError, match="unknown tasks \\['d'\\]"):
        apply_multipliers(probs, {"d": 1.0})
    with pytest.raises(PalUserError, match="finite and >= 0"):
        apply_multipliers(probs, {"a": -1.0})
    with pytest.raises(PalUserError, match="no task"):
        apply_multipliers(probs, {"a": 0.0, "b": 0.0, "c": 0.0})


def test_schedule_multiplies_every_random_schedule() -> None:
    sizes = {"a": 100, "b": 400}
    # annealed at epoch 0 is proportional (alpha 1): 0.2, 0.8; multiplier 0.25 on b: 0.2, 0.2 -> 0.5 each
    annealed = SamplingSchedule("annealed", num_epochs=3, multipliers={"b": 0.25})
    assert annealed.probabilities(sizes, 0) == pytest.approx({"a": 0.5, "b": 0.5})
    # last epoch alpha 0.2: 100^0.2 = 2.512, 400^0.2 = 3.314; b scaled by 0.25
    wa, wb = 100**0.2, 0.25 * 400**0.2
    assert annealed.probabilities(sizes, 2) == pytest.approx({"a": wa / (wa + wb), "b": wb / (wa + wb)})
    weights = SamplingSchedule("weights", weights={"a": 1.0, "b": 1.0}, multipliers={"a": 3.0})
    assert weights.probabilities(sizes, 0) == pytest.approx({"a": 0.75, "b": 0.25})
    with pytest.raises(PalUserError, match="round_robin"):
        SamplingSchedule("round_robin", multipliers={"a": 2.0})


def test_sampler_draws_tasks_at_the_multiplied_rates_same_on_every_rank() -> None:
    sizes = {"sst": 1000, "qqp": 1000, "sst2": 8000}
    schedule = SamplingSchedule("proportional", multipliers={"sst2": 0.125})  # 1000 : 1000 : 1000
    samplers = [
        MultiTaskBatchSampler(
            sizes, dict.fromkeys(sizes, 2), schedule, steps_per_epoch=6000, num_replicas=2, rank=r, seed=3
        )
        for r in (0, 1)
    ]
    seq0, seq1 = (s.task_sequence(0) for s in samplers)
    np.testing.assert_array_equal(seq0, seq1)  # DDP: the same task at every step on both ranks
    freq = np.bincount(seq0, minlength=3) / len(seq0)
    # binomial standard deviation sqrt(p(1-p)/n) = 0.0061 at n = 6000; allow 4 sigma
    np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.025)
    plain = MultiTaskBatchSampler(
        sizes, dict.fromkeys(sizes, 2), SamplingSchedule("proportional"), 6000, seed=3
    )
    assert np.mean(plain.task_sequence(0) == 2) > 0.75  # without the multiplier sst2 takes 80 %


def test_datamodule_takes_multipliers(data_dir: Path) -> None:
    dm = MultiTaskDataModule(
        tasks=["sst", "cfimdb"],
        data_dir=data_dir,
        sampling="proportional",
        task_multipliers={"cfimdb": 0.5},
        cache_dir=False,
    )
    dm.setup("fit")
    n_sst, n_cf = dm.train_sizes["sst"], dm.train_sizes["cfimdb"]
    expected_cf = 0.5 * n_cf / (n_sst + 0.5 * n_cf)
    assert dm.task_probabilities_for_epoch(0)["cfimdb"] == pytest.approx(expected_cf)
    assert dm.hparams["task_multipliers"] == {"cfimdb": 0.5}
    with pytest.raises(PalUserError, match="unknown tasks \\['snli'\\]"):
        MultiTaskDataModule(tasks=["sst"], data_dir=data_dir, task_multipliers={"snli": 0.5})
    with pytest.raises(PalUserError, match="sequential schedule"):
        MultiTaskDataModule(
            tasks=["sst"], data_dir=data_dir, schedule="sequential", task_multipliers={"sst": 2}
        )


def test_score_table_marks_auxiliary_tasks() -> None:
    from pal_lightning.callbacks.score_report import format_scores

    scores = {"val/sst/accuracy": 0.5, "val/cfimdb/accuracy": 0.9, "val/overall": 0.5}
    table = format_scores(scores, auxiliary=["cfimdb"])
    lines = table.splitlines()
    assert any(line.split()[:2] == ["cfimdb*", "accuracy"] for line in lines)
    assert any(line.split()[:2] == ["sst", "accuracy"] for line in lines)
    assert lines[-1] == "  * auxiliary (trained, not in the overall): cfimdb"
    assert "auxiliary" not in format_scores(scores)


# ---------------------------------------------------------------- the overlays (SNLI, CFIMDB, GLUE SST-2)


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def overlay_tasks(name: str) -> list[TaskSpec]:
    config = yaml.safe_load((CONFIGS / name).read_text())
    return resolve_tasks(config["model"]["init_args"]["tasks"])


def write_snli_copy(root: Path) -> dict[str, list[dict]]:
    """A few SNLI rows as parquet files where the hub keeps them (``plain_text/<split>-00000-of-00001``),
    with the hub's columns and a -1 (no gold label) row in train."""
    import datasets

    triples = {
        "train": [
            ("A man plays a guitar.", "A man makes music.", 0),
            ("A man plays a guitar.", "A man is asleep.", 2),
            ("Two dogs run.", "Animals are outside.", 1),
            ("Two dogs run.", "Dogs move.", -1),
        ],
        "validation": [
            ("A child reads.", "A kid looks at a book.", 0),
            ("A child reads.", "Nobody reads.", 2),
        ],
        "test": [("A cat sleeps.", "A cat rests.", 0)],
    }
    keys = ("premise", "hypothesis", "label")
    rows = {split: [dict(zip(keys, t, strict=True)) for t in ts] for split, ts in triples.items()}
    folder = root / "plain_text"
    folder.mkdir(parents=True)
    text = datasets.Value("string")
    label = datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])
    features = datasets.Features(premise=text, hypothesis=text, label=label)
    for split, items in rows.items():
        ds = datasets.Dataset.from_list(items, features=features)
        ds.to_parquet(str(folder / f"{split}-00000-of-00001.parquet"))
    return rows


def test_snli_overlay_reads_a_local_copy_in_the_hub_layout(tmp_path: Path) -> None:
    (snli,) = [t for t in overlay_tasks("aux_snli.yaml") if t.name == "snli"]
    assert snli.hf_path == "stanfordnlp/snli" and snli.format == "hf"
    rows = write_snli_copy(tmp_path / "snli")
    local = snli.replace(hf_path=str(tmp_path / "snli"))  # what a user without the hub points at
    train = read_split(local, "train", tmp_path)
    # the -1 row (no gold label) is skipped, the others keep text and label
    assert len(train) == 3 and train.skipped == 1
    assert train.texts[0] == [r["premise"] for r in rows["train"][:3]]
    assert train.texts[1] == [r["hypothesis"] for r in rows["train"][:3]]
    assert train.labels.tolist() == [0, 2, 1]
    dev = read_split(local, "dev", tmp_path)  # our "dev" is the hub's "validation" split
    assert dev.labels.tolist() == [0, 2] and dev.ids == ["0", "1"]


def test_snli_overlay_trains_as_an_auxiliary_task(tmp_path: Path) -> None:
    """The overlay's SNLI task (local copy) through the data module and a tiny model: one short fit,
    val/overall over SST alone, SNLI accuracy logged."""

    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

    data = write_cs224n_data(tmp_path / "data")
    write_snli_copy(tmp_path / "snli")
    (snli,) = [t for t in overlay_tasks("aux_snli.yaml") if t.name == "snli"]
    tasks = ["sst", snli.replace(hf_path=str(tmp_path / "snli"))]
    model = MultiTaskModule(
        tasks=tasks, encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, auxiliary=["snli"]
    )
    dm = MultiTaskDataModule(tasks=tasks, data_dir=data, batch_size=2, steps_per_epoch=3, cache_dir=False)
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(model, datamodule=dm)
    scores = model.last_scores["val"]
    assert scores["val/overall"] == pytest.approx(scores["val/sst/accuracy"])
    assert "val/snli/accuracy" in scores


@pytest.mark.integration
def test_cfimdb_sst2_overlay_finds_the_shared_files() -> None:
    data = os.environ.get("PAL_DATA_DIR")
    if not data or not (Path(data) / "ids-cfimdb-dev.csv").is_file():
        pytest.skip("PAL_DATA_DIR (the shared cs224n-minbert folder) is not set")
    tasks = {t.name: t for t in overlay_tasks("aux_cfimdb_sst2.yaml")}
    assert list(tasks) == ["sst", "qqp", "sts", "cfimdb", "sst2"]
    # row counts of the shared data README: SST-2 dev 872, CFIMDB dev 245; labels 0/1 in both
    for name, rows in (("sst2", 872), ("cfimdb", 245)):
        dev = read_split(tasks[name], "dev", Path(data))
        assert len(dev) == rows and dev.skipped == 0
        assert set(dev.labels.tolist()) == {0, 1}
    config = yaml.safe_load((CONFIGS / "aux_cfimdb_sst2.yaml").read_text())
    assert config["model"]["init_args"]["auxiliary"] == ["cfimdb", "sst2"]
