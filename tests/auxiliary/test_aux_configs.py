"""The auxiliary-task overlays: SNLI through ``datasets`` (offline, a local copy in the hub's layout)
and CFIMDB + GLUE SST-2 on the real data files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from pal_lightning.data.sources.readers import read_split
from pal_lightning.tasks.specs import TaskSpec, resolve_tasks

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def overlay_tasks(name: str) -> list[TaskSpec]:
    config = yaml.safe_load((CONFIGS / name).read_text())
    return resolve_tasks(config["model"]["init_args"]["tasks"])


def write_snli_copy(root: Path) -> dict[str, list[dict]]:
    """A few SNLI rows as parquet files where the hub keeps them (``plain_text/<split>-00000-of-00001``),
    with the hub's columns and a -1 (no gold label) row in train."""
    import datasets

    rows = {
        "train": [
            {"premise": "A man plays a guitar.", "hypothesis": "A man makes music.", "label": 0},
            {"premise": "A man plays a guitar.", "hypothesis": "A man is asleep.", "label": 2},
            {"premise": "Two dogs run.", "hypothesis": "Animals are outside.", "label": 1},
            {"premise": "Two dogs run.", "hypothesis": "Dogs move.", "label": -1},
        ],
        "validation": [
            {"premise": "A child reads.", "hypothesis": "A kid looks at a book.", "label": 0},
            {"premise": "A child reads.", "hypothesis": "Nobody reads.", "label": 2},
        ],
        "test": [{"premise": "A cat sleeps.", "hypothesis": "A cat rests.", "label": 0}],
    }
    folder = root / "plain_text"
    folder.mkdir(parents=True)
    for split, items in rows.items():
        ds = datasets.Dataset.from_list(
            items,
            features=datasets.Features(
                premise=datasets.Value("string"),
                hypothesis=datasets.Value("string"),
                label=datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
            ),
        )
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
    model = MultiTaskModule(tasks=tasks, bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, auxiliary=["snli"])
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
