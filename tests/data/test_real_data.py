"""Integration: the real CS224N files load with the row counts of ../shared/data/README.md."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.sources.readers import read_split
from pal_lightning.tasks.specs import TaskSpec, get_task

pytestmark = pytest.mark.integration

DATA = os.environ.get("PAL_DATA_DIR")

# (task, split): (rows in the file, rows loaded); skipped = rows - loaded
EXPECTED = {
    ("sst", "train"): (8544, 8544),
    ("sst", "dev"): (801, 801),
    ("sst", "test"): (2210, 2210),
    ("qqp", "train"): (14139, 14137),
    ("qqp", "dev"): (15214, 15212),
    ("qqp", "test"): (998, 998),
    ("sts", "train"): (6040, 6040),
    ("sts", "dev"): (863, 863),
    ("sts", "test"): (1725, 1725),
}
TRAIN_CLASSES = {"sst": [1092, 2218, 1624, 2322, 1288], "qqp": [8838, 5299]}
BAD_IDS = {
    ("qqp", "train"): {"9c27e925b9422f792eb526433", "9f8c14e3dd710d4fecbe5468f"},
    ("qqp", "dev"): {"ad118c967d683c93883bf072d", "9054345d02cd6c5642a4904dc"},
}


@pytest.fixture(scope="module")
def real_dm(tmp_path_factory):
    if not DATA or not Path(DATA).is_dir():
        pytest.skip("PAL_DATA_DIR is not set")
    dm = MultiTaskDataModule(data_dir=DATA, cache_dir=tmp_path_factory.mktemp("cache"))
    dm.setup("fit")
    return dm


def test_row_counts_match_readme(real_dm):
    """Train and dev as the fit read them, test by ``read_split``: the documented bad Quora rows are the ones
    left out, no Quora text still carries the second quoting layer, and the train labels have the known
    class counts."""
    for (task, split), (rows, loaded) in EXPECTED.items():
        data = (
            read_split(get_task(task), split, Path(DATA))
            if split == "test"
            else real_dm.load_split(task, split)
        )
        assert (data.rows, len(data), data.skipped) == (rows, loaded, rows - loaded), (task, split)
        assert len(set(data.ids)) == loaded
        assert (data.labels is None) == (split == "test")
        assert not set(data.ids) & BAD_IDS.get((task, split), set())
        if (task, split) == ("sts", "train"):
            assert data.labels.min() >= 0 and data.labels.max() <= 5
        elif split == "train":
            assert np.bincount(data.labels).tolist() == TRAIN_CLASSES[task]
    for split in ("train", "dev", "test"):
        texts = read_split(get_task("qqp"), split, Path(DATA)).texts
        assert not any(t.startswith('"') and t.endswith('"') and '""' in t for col in texts for t in col)


def test_fit_setup_and_steps(real_dm):
    assert real_dm.train_sizes == {"sst": 8544, "qqp": 14137, "sts": 6040}
    # one pass: ceil(8544/32) + ceil(14137/32) + ceil(6040/32)
    assert real_dm.steps_per_epoch == 267 + 442 + 189
    batch = next(iter(real_dm.train_dataloader()))
    assert batch["input_ids"].shape[1] <= 128


def test_glue_mrpc_train_tsv_reads_as_an_own_task() -> None:
    """GLUE's own MRPC train.tsv holds ``"`` in its texts: read as a tab-separated file, without quoting."""
    path = Path(DATA or "").parent / "glue" / "MRPC" / "train.tsv"
    if not DATA or not path.is_file():
        pytest.skip("no GLUE MRPC files beside PAL_DATA_DIR")
    spec = TaskSpec(
        name="mrpc",
        kind="pair_classification",
        format="hf",
        files={"train": str(path)},
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        id_column=None,
    )
    raw = read_split(spec, "train", path.parent)
    assert (raw.rows, raw.skipped) == (3668, 0)  # ../shared/data/glue/SOURCES.md
    assert raw.texts[0][0].startswith('Amrozi accused his brother , whom he called " the witness "')
