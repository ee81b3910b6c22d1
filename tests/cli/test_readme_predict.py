"""The README's predict example runs as written against a saved (tiny) model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pal_lightning import MultiTaskModule
from pal_lightning.testing import TINY_BERT

from .test_readme_example import _block_after


def test_predict_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = _block_after("<!-- readme-example: predict -->")
    MultiTaskModule(bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, pair_encoding="siamese").save_pretrained(
        tmp_path / "runs" / "demo" / "version_0" / "model"
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    out = namespace["out"]
    assert len(out.labels) == 2 and set(out.labels) <= set(out.label_names)
    assert out.probabilities.shape == (2, 5)
    np.testing.assert_allclose(out.probabilities.sum(1), 1.0, atol=1e-6)
