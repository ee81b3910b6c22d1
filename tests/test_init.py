"""The public API: every re-exported name is the object its module defines, of the kind documented,
with the documented call signature (that importing it imports no torch: tests/inference/test_pipeline.py)."""

from __future__ import annotations

import enum
import importlib
import inspect
from collections.abc import Mapping

import pytest

import pal_lightning

#: The kind of each public name: a base class it subclasses, or the parameters of a function.
BASES = {
    "MultiTaskModule": "lightning.pytorch.LightningModule",
    "MultiTaskDataModule": "lightning.pytorch.LightningDataModule",
    "GEMCallback": "lightning.pytorch.Callback",
    "ContinualEvaluation": "lightning.pytorch.Callback",
    "RNGStateCallback": "lightning.pytorch.Callback",
    "PredictionWriter": "lightning.pytorch.Callback",
    "AtomicCheckpointIO": "lightning.pytorch.plugins.io.CheckpointIO",
    "MultiTaskEncoder": "torch.nn.Module",
    "PalUserError": "builtins.Exception",
    "TaskKind": "enum.Enum",
}
SIGNATURES = {
    "task_probabilities": ["sizes", "alpha"],
    "annealed_alpha": ["epoch", "num_epochs"],
    "project_gradient": ["g", "G", "margin", "eps"],
    "agem_project": ["g", "g_ref"],
    "cs224n_overall": ["sst_acc", "qqp_acc", "sts_pearson"],
    "overall_score": ["scores_by_task", "specs"],
    "get_task": ["name"],
}


def _resolve(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_all_and_exports_agree() -> None:
    exported = set(pal_lightning._EXPORTS)
    assert set(pal_lightning.__all__) == exported | {"__version__"}
    assert len(pal_lightning.__all__) == len(set(pal_lightning.__all__))  # no duplicates
    assert set(dir(pal_lightning)) == set(pal_lightning.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pal_lightning.nope  # noqa: B018


@pytest.mark.parametrize("name", sorted(pal_lightning._EXPORTS))
def test_public_name_is_the_object_of_its_module(name: str) -> None:
    module = importlib.import_module(pal_lightning._EXPORTS[name])
    value = getattr(pal_lightning, name)
    assert value is getattr(module, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("pal_lightning."), value.__module__  # defined here, not borrowed
    if name in BASES:
        assert inspect.isclass(value) and issubclass(value, _resolve(BASES[name])), name
    if name in SIGNATURES:
        assert list(inspect.signature(value).parameters)[: len(SIGNATURES[name])] == SIGNATURES[name]


def test_public_values() -> None:
    assert isinstance(pal_lightning.__version__, str) and pal_lightning.__version__.count(".") >= 1
    assert isinstance(pal_lightning.DEFAULT_ENCODER, str) and pal_lightning.DEFAULT_ENCODER
    tasks = pal_lightning.BUILTIN_TASKS
    assert isinstance(tasks, Mapping) and {"sst", "qqp", "sts"} <= set(tasks)
    assert all(isinstance(spec, pal_lightning.TaskSpec) and spec.name == key for key, spec in tasks.items())
    assert pal_lightning.get_task("sts") is tasks["sts"] or pal_lightning.get_task("sts") == tasks["sts"]
    assert issubclass(pal_lightning.TaskKind, enum.Enum)
    # the re-exported functions compute what their names say (hand values)
    assert pal_lightning.task_probabilities([1, 3], 1.0) == [0.25, 0.75]
    assert pal_lightning.annealed_alpha(3, 3) == pytest.approx(0.2)
    assert pal_lightning.cs224n_overall(1.0, 0.5, 0.0) == pytest.approx(2.0 / 3.0)
