"""PredictionWriter: CS224N-format files, file order, no overwrite (checked before predicting)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from pal_lightning.callbacks import PredictionWriter
from pal_lightning.callbacks.prediction_writer import format_value
from pal_lightning.core.errors import PalUserError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning.data import MultiTaskDataModule  # noqa: E402
from pal_lightning.testing import quiet_trainer, write_cs224n_quirks  # noqa: E402


class FakePredictor(pl.LightningModule):
    """Predicts the first token id modulo the classes (or /1000 for STS); counts predict calls."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.zeros(1))
        self.calls = 0

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self.calls += 1
        key = "input_ids" if "input_ids" in batch else "input_ids_a"
        first = batch[key][:, 1]
        preds = (first / 1000.0).tolist() if batch["task"] == "sts" else (first % 2).tolist()
        return {"task": batch["task"], "split": batch["split"], "ids": batch["ids"], "predictions": preds}


def run_predict(
    tmp_path: Path, writer: PredictionWriter, model: FakePredictor | None = None
) -> FakePredictor:
    data = write_cs224n_quirks(tmp_path / "data")
    dm = MultiTaskDataModule(data_dir=str(data), cache_dir=tmp_path / "cache", eval_batch_size=4)
    model = model or FakePredictor()
    trainer = quiet_trainer(callbacks=[writer])
    trainer.predict(model, datamodule=dm, return_predictions=False)
    return model


def test_writes_starter_format_in_file_order(tmp_path):
    out = tmp_path / "preds"
    run_predict(tmp_path, PredictionWriter(output_dir=out))
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test"))
    sst = (out / "sst-test-output.csv").read_text().splitlines()
    assert sst[0] == "id \t Predicted_Sentiment "
    assert [line.split(" , ")[0] for line in sst[1:]] == [f"ssttest{i:03d}" for i in range(9)]  # file order
    assert all(line.split(" , ")[1].strip() in {"0", "1"} for line in sst[1:])
    assert (out / "para-dev-output.csv").read_text().startswith("id \t Predicted_Is_Paraphrase \n")
    sts = (out / "sts-dev-output.csv").read_text().splitlines()
    assert sts[0] == "id \t Predicted_Similiary "  # the starter's spelling
    assert len(sts) == 1 + 10 and float(sts[1].split(" , ")[1]) > 0


def test_refuses_to_overwrite_before_predicting(tmp_path):
    out = tmp_path / "preds"
    run_predict(tmp_path, PredictionWriter(output_dir=out))
    before = {p.name: p.read_text() for p in out.iterdir()}
    (out / "sst-dev-output.csv").write_text("mine\n")
    refused = FakePredictor()
    with pytest.raises(PalUserError, match="already exist") as err:
        run_predict(tmp_path, PredictionWriter(output_dir=out), refused)
    assert refused.calls == 0  # refused before any batch
    assert "sst-dev-output.csv" in str(err.value) and "overwrite" in str(err.value)
    assert (out / "sst-dev-output.csv").read_text() == "mine\n"  # nothing written
    model = run_predict(tmp_path, PredictionWriter(output_dir=out, overwrite=True))
    assert model.calls > 0
    assert (out / "sst-dev-output.csv").read_text() == before["sst-dev-output.csv"]


def test_default_dir_and_value_format(tmp_path):
    trainer = quiet_trainer(default_root_dir=tmp_path)
    assert PredictionWriter().resolve_output_dir(trainer) == tmp_path / "predictions"
    assert format_value(3) == "3" and format_value(True) == "1" and format_value(0.25) == "0.25"
    assert format_value(3.123456789) == "3.123457"  # six decimals, as predict --predict.input writes
    assert format_value(2.0) == "2" and format_value(-1e-9) == "0" and format_value(4) == "4"


def test_duplicates_dropped_and_rows_sorted_without_datamodule(tmp_path):
    writer = PredictionWriter(output_dir=tmp_path)
    trainer = quiet_trainer(default_root_dir=tmp_path)
    rows = {("mytask", "test"): [("b", 1), ("a", 0), ("b", 1)]}
    assert writer._write_all(trainer, rows) == [tmp_path / "mytask-test-output.csv"]
    assert (tmp_path / "mytask-test-output.csv").read_text() == "id \t Predicted_Label \na , 0 \nb , 1 \n"


def test_class_names_are_the_modules_where_it_has_them() -> None:
    """A model's head predicts class i of its own names (given, or saved with it): another order read from
    the predict data must not relabel it; the data's names fill the tasks the module has none for, views
    take their task's, the starter's tasks none."""
    module = SimpleNamespace(label_names={"mine": ["no", "yes"], "sst": ["negative", "positive"]})
    data = {"mine": ["yes", "no"], "other": ["a", "b", "c"], "qqp": ["x", "y"]}
    views = {"mine_hard": SimpleNamespace(parent="mine"), "orphan": SimpleNamespace(parent="absent")}
    dm = SimpleNamespace(label_names=lambda: data, eval_views=views)
    trainer = SimpleNamespace(lightning_module=module, datamodule=dm)
    assert PredictionWriter().class_names(trainer) == {  # type: ignore[arg-type]
        "mine": ["no", "yes"],
        "other": ["a", "b", "c"],
        "mine_hard": ["no", "yes"],
    }
