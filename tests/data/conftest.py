"""Fixtures for the data tests: small CS224N-format files written into tmp_path, with bad rows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pal_lightning.testing import write_cs224n_quirks

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A CS224N-format data folder with every kind of bad row in the train files."""
    return write_cs224n_quirks(tmp_path / "data")


@pytest.fixture(scope="session")
def tokenizer():
    """The real (fast) tokenizer of the default encoder, from the offline package."""
    from transformers import AutoTokenizer

    from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder

    try:
        path = resolve_encoder(DEFAULT_ENCODER)
    except Exception as err:  # noqa: BLE001
        pytest.skip(f"offline encoder package missing: {err}")
    return AutoTokenizer.from_pretrained(path)


@pytest.fixture
def topics():
    """``topics(**fields)``: a user's task of local ``format: hf`` files: 4 classes in the ``text`` and ``label``
    columns of train.csv and dev.csv, no id column; ``fields`` change any of it."""
    from pal_lightning.tasks.specs import TaskSpec

    files = {"train": "train.csv", "dev": "dev.csv"}
    base = dict(name="topics", num_labels=4, format="hf", files=files, text_columns=("text",))
    return lambda **fields: TaskSpec(**{**base, "label_column": "label", "id_column": None, **fields})


@pytest.fixture
def make_dm(tmp_path: Path):
    """Builds a MultiTaskDataModule over a data folder: batch size 4, eval batch size 5, a cache in tmp_path."""
    from pal_lightning.data import MultiTaskDataModule

    def make(data_dir: Path, **kw):  # noqa: ANN202
        kw = {"cache_dir": tmp_path / "cache", "batch_size": 4, "eval_batch_size": 5, **kw}
        return MultiTaskDataModule(data_dir=str(data_dir), **kw)

    return make


@pytest.fixture
def serve_hub(monkeypatch: pytest.MonkeyPatch):
    """``serve_hub(local)``: ``datasets.load_dataset`` reads a hub id as ``local(path, name)`` says (the real
    call's arguments; ``None``: offline), local files and folders as they are."""
    datasets = pytest.importorskip("datasets")
    from pal_lightning.data.sources.hf import clear_loaded

    real = datasets.load_dataset

    def serve(local):
        def load_dataset(path, name=None, **kwargs):
            files = path in ("csv", "json", "parquet") or Path(path).is_dir()
            found = (path, name) if files else local(path, name)
            if found is None:
                raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")
            return real(*found, **kwargs)

        monkeypatch.setattr(datasets, "load_dataset", load_dataset)
        clear_loaded()

    yield serve
    clear_loaded()
