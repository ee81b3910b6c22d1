"""Every registered method on every encoder family (:func:`~pal_lightning.testing.conformance.check_method`),
and each method through the whole module, saved, loaded and exported to ONNX, on a family of its own
(the families in turn, so each meets a method). Registering a method tests it here; mixed-task batches:
``test_mixed_routing.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.methods import METHODS, AdapterMethod, register_method, unregister_method
from pal_lightning.testing import FAMILY_TYPES, TINY_BERT
from pal_lightning.testing.conformance import check_method, check_method_in_module


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("method", list(METHODS))
def test_the_method_on_the_family(method: str, model_type: str, tmp_path: Path) -> None:
    check_method(method, model_type, tmp_path)


@pytest.mark.parametrize(
    ("method", "model_type"), [(name, FAMILY_TYPES[i % len(FAMILY_TYPES)]) for i, name in enumerate(METHODS)]
)
def test_save_load_predict_and_onnx(method: str, model_type: str, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    check_method_in_module(method, model_type, tmp_path)


def test_a_module_that_does_not_follow_its_placements_protocol_is_refused() -> None:
    class Bare(AdapterMethod):
        name = "bare"
        size_at_768 = 8

        def build(self, config: Any, encoder_config: Any, size: int, layers: tuple[int, ...]) -> nn.Module:
            return nn.Linear(2, 2)  # no ``layers``: not a BesideModule

    register_method(Bare())
    try:
        with pytest.raises(PalUserError, match=r"'bare' built a Linear, which is not a BesideModule"):
            MultiTaskEncoder.from_config(TINY_BERT, ["a"], adapter="bare")
    finally:
        unregister_method("bare")
