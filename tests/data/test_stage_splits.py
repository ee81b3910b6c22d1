"""A validation split carved from train by a seeded fraction (``validation_fraction``): sizes, no overlap,
the same rows in every process and data module; fitting never reads the dev files, which ``test`` scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.split_cache import SplitCache
from pal_lightning.data.stage_splits import VALIDATION, carve, take_rows
from pal_lightning.testing import write_cs224n_data


@pytest.mark.parametrize(
    ("size", "fraction", "held"), [(100, 0.1, 10), (24, 0.25, 6), (7, 0.01, 1), (2, 0.9, 1)]
)
def test_carve_sizes_and_no_overlap(size: int, fraction: float, held: int) -> None:
    kept, out = carve(size, fraction, 3, "sst")
    assert (len(kept), len(out)) == (size - held, held)
    assert not set(kept.tolist()) & set(out.tolist())
    assert sorted([*kept.tolist(), *out.tolist()]) == list(range(size))
    assert kept.tolist() == sorted(kept.tolist()) and out.tolist() == sorted(out.tolist())  # file order


def test_carve_is_seeded_per_task_and_refuses_a_single_row() -> None:
    first = carve(1000, 0.1, 7, "sst")[1].tolist()
    assert carve(1000, 0.1, 7, "sst")[1].tolist() == first
    assert carve(1000, 0.1, 8, "sst")[1].tolist() != first
    assert carve(1000, 0.1, 7, "qqp")[1].tolist() != first
    with pytest.raises(PalUserError, match="too few to carve"):
        carve(1, 0.5, 0, "sst")


def test_carve_is_the_same_in_another_process_which_loads_no_lightning() -> None:
    """Another interpreter (its own hash seed) carves the same rows; the splits load without Lightning
    (``pal_lightning.data`` loads the DataModule on first use)."""
    code = (
        "import json, sys; from pal_lightning.data.stage_splits import carve; "
        "print(json.dumps([carve(500, 0.2, 11, 'sts')[1].tolist(), 'lightning' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    rows, lightning_loaded = json.loads(out)
    assert rows == carve(500, 0.2, 11, "sts")[1].tolist()
    assert not lightning_loaded


def test_take_rows_keeps_each_examples_tokens() -> None:
    from pal_lightning.data.tokenize import Encoded, TokenizedSplit

    enc = Encoded(np.arange(10, dtype=np.int32), np.zeros(10, dtype=np.int8), np.array([0, 2, 3, 7, 10]))
    data = TokenizedSplit("t", "train", np.array(["a", "b", "c", "d"]), np.array([0, 1, 0, 1]), {"": enc})
    part = take_rows(data, np.array([1, 3]), VALIDATION)
    assert (part.split, part.ids.tolist(), part.labels.tolist()) == (VALIDATION, ["b", "d"], [1, 1])  # type: ignore[union-attr]
    tokens = part.encodings[""]
    assert tokens.input_ids.tolist() == [2, 7, 8, 9] and tokens.offsets.tolist() == [0, 1, 4]


def test_fit_trains_on_the_rest_validates_on_the_carved_rows_and_never_reads_dev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_dm
) -> None:
    data_dir = write_cs224n_data(tmp_path / "data", n_train=24, n_dev=10)
    read: list[tuple[str, str]] = []
    real_load = SplitCache.load

    def load(self: SplitCache, task: str, split: str, report: bool = True):  # noqa: ANN202
        read.append((task, split))
        return real_load(self, task, split, report)

    monkeypatch.setattr(SplitCache, "load", load)
    dm = make_dm(data_dir, validation_fraction=0.25)
    dm.prepare_data()
    dm.setup("fit")
    assert dm.train_sizes == {"sst": 18, "qqp": 18, "sts": 18}
    train_ids = {t: set(dm.load_split(t, "train").ids.tolist()) for t in dm.task_names}
    for batch in dm.train_dataloader():
        assert batch["split"] == "train" and set(batch["ids"]) <= train_ids[batch["task"]]
    val_ids: dict[str, set[str]] = {}
    for batch in dm.val_dataloader():
        assert batch["split"] == VALIDATION
        val_ids.setdefault(batch["task"], set()).update(batch["ids"])
    assert ("sst", "train") in read and not [pair for pair in read if pair[1] == "dev"], read
    for task in ("sst", "qqp", "sts"):
        assert len(val_ids[task]) == 6 and not val_ids[task] & train_ids[task]
        assert val_ids[task] | train_ids[task] == set(dm.splits.load(task, "train").ids.tolist())
    dev_ids = {b["task"]: set(b["ids"]) for b in dm.test_dataloader()}  # test scores the dev files
    assert [b["split"] for b in dm.test_dataloader()] == ["dev"] * len(list(dm.test_dataloader()))
    assert dev_ids["sst"] <= set(dm.splits.load("sst", "dev").ids.tolist())
    assert sum(len(b["ids"]) for b in dm.test_dataloader()) == 30


def test_every_data_module_carves_the_same_rows_and_validation_seed_others(tmp_path: Path, make_dm) -> None:
    data_dir = write_cs224n_data(tmp_path / "data", n_train=40)
    one, two = (
        make_dm(data_dir, validation_fraction=0.25),
        make_dm(data_dir, validation_fraction=0.25),
    )  # two ranks, or a resumed run
    other = make_dm(data_dir, validation_fraction=0.25, validation_seed=5)
    held = one.load_split("qqp", VALIDATION).ids.tolist()
    assert held == two.load_split("qqp", VALIDATION).ids.tolist() and len(held) == 10
    assert other.load_split("qqp", VALIDATION).ids.tolist() != held
    by_seed = make_dm(data_dir, validation_fraction=0.25, seed=5).load_split("qqp", VALIDATION).ids.tolist()
    assert by_seed == other.load_split("qqp", VALIDATION).ids.tolist()  # validation_seed defaults to seed


def test_without_a_fraction_validation_is_dev_and_a_bad_fraction_is_one_line(tmp_path: Path, make_dm) -> None:
    data_dir = write_cs224n_data(tmp_path / "data")
    dm = make_dm(data_dir, validation_fraction=None)
    assert {b["split"] for b in dm.val_dataloader()} == {"dev"}
    for bad in (0, 1, 1.5):
        with pytest.raises(PalUserError, match="validation_fraction is the share"):
            make_dm(data_dir, validation_fraction=bad)
