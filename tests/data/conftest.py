"""Fixtures for the data tests: small CS224N-format files written into tmp_path, with bad rows."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
def serve_hub(monkeypatch: pytest.MonkeyPatch):
    """``serve_hub(local)`` makes ``datasets.load_dataset`` read a hub id from ``local(path, name)`` (the
    arguments of the real call, or ``None``: the id fails as offline); local files and folders as they are."""
    datasets = pytest.importorskip("datasets")
    from pal_lightning.data.sources import hf as hf_sources

    real = datasets.load_dataset

    def serve(local: Callable[[str, str | None], tuple[Any, ...] | None]) -> None:
        def load_dataset(path: str, name: str | None = None, **kwargs: Any) -> Any:
            if path in ("csv", "json", "parquet") or Path(path).is_dir():
                return real(path, name, **kwargs)
            found = local(path, name)
            if found is None:
                raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")
            return real(*found, **kwargs)

        monkeypatch.setattr(datasets, "load_dataset", load_dataset)
        hf_sources.clear_loaded()

    yield serve
    hf_sources.clear_loaded()
