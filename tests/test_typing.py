"""The package type-checks, and the built-in classes meet the callbacks' contracts (``pal_lightning.core.contracts``).

``python -m mypy`` from the repository root reads ``[tool.mypy]`` in pyproject.toml: it checks the
package and this file, whose ``_*_contracts`` functions are never called but make mypy prove that
``MultiTaskModule`` and ``MultiTaskDataModule`` satisfy every protocol the callbacks
rely on. A cold run (no ``.mypy_cache/``) takes about 20 s of CPU, transformers and peft not followed
(pyproject.toml says why; 40 s when they were); with the cache, a few seconds.
"""

from __future__ import annotations

import pytest

from pal_lightning.core.contracts import (
    BatchLossModel,
    EpochSteps,
    EpochTaskProbabilities,
    ExampleOrder,
    LastScores,
    MaxLength,
    ParameterReporter,
    PhasedData,
    PredictionLayout,
    PretrainedSaver,
    ScoredTasks,
    TaskPredictor,
    TrainBatchSource,
    missing_members,
    require,
    satisfies,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.datamodule import MultiTaskDataModule
from pal_lightning.modeling.methods import AdapterConfig
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, write_cs224n_data

MODULE_CONTRACTS = (
    BatchLossModel,
    TaskPredictor,
    LastScores,
    ScoredTasks,
    ParameterReporter,
    PretrainedSaver,
)
DATA_CONTRACTS = (
    TrainBatchSource,
    EpochSteps,
    PhasedData,
    EpochTaskProbabilities,
    PredictionLayout,
    ExampleOrder,
    MaxLength,
)


# ------------------------------------------------------------------ static: checked by mypy, never run


def _module_contracts(
    module: MultiTaskModule,
) -> tuple[BatchLossModel, TaskPredictor, LastScores, ScoredTasks, ParameterReporter, PretrainedSaver]:
    return module, module, module, module, module, module


def _data_contracts(
    data: MultiTaskDataModule,
) -> tuple[
    TrainBatchSource,
    EpochSteps,
    PhasedData,
    EpochTaskProbabilities,
    PredictionLayout,
    ExampleOrder,
    MaxLength,
]:
    return data, data, data, data, data, data, data


# ------------------------------------------------------------------ the type checker


def test_mypy_is_clean_on_the_package(mypy_result: tuple[int, str]) -> None:
    # run from the repository root (pyproject.toml's [tool.mypy]: the package and this file), started
    # in the background when collection ended (tests/conftest.py)
    returncode, report = mypy_result
    assert "No module named mypy" not in report, "mypy is missing: pip install -e '.[dev]'"
    assert returncode == 0, f"mypy found type errors:\n{report}"
    assert "Success: no issues found" in report, report
    assert "test_typing.py" not in report  # no note about this file either


# ------------------------------------------------------------------ the same contracts at run time


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> MultiTaskDataModule:
    root = write_cs224n_data(tmp_path_factory.mktemp("data"), n_train=8, n_dev=4, n_test=2)
    return MultiTaskDataModule(data_dir=str(root), cache_dir=False, batch_size=4, max_length=32)


def test_the_built_in_classes_meet_every_contract_at_run_time(data: MultiTaskDataModule) -> None:
    module = MultiTaskModule(encoder_config=TINY_BERT, adapter=AdapterConfig(size=8, num_heads=2))
    for contract in MODULE_CONTRACTS:
        assert missing_members(module, contract) == [], contract.__name__
    # before setup("fit") the data module's steps_per_epoch raises: the check must not run properties
    with pytest.raises(RuntimeError):
        _ = data.steps_per_epoch
    for data_contract in DATA_CONTRACTS:
        assert satisfies(data, data_contract), data_contract.__name__


class _Raising:
    @property
    def steps_per_epoch(self) -> int:
        raise RuntimeError("not set up")


class _Half:
    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        return {"sst": 1.0}


class _SwitchedOff:
    task_probabilities_for_epoch = None  # how a subclass turns a method off


class _NoLength:
    max_length = None  # a property of the protocol, so None is a value, not a missing member


def test_missing_members_are_named_and_properties_are_not_run() -> None:
    assert satisfies(_Raising(), EpochSteps)  # present, although reading it raises
    # PhasedData adds phases and eval_dataloader to EpochSteps' steps_per_epoch
    assert missing_members(_Raising(), PhasedData) == ["phases", "eval_dataloader"]
    assert missing_members(None, TrainBatchSource) == ["train_batch"]
    assert not satisfies(_Half(), PhasedData)
    half = _Half()
    assert require(half, EpochTaskProbabilities, "x", "y") is half
    assert missing_members(_SwitchedOff(), EpochTaskProbabilities) == ["task_probabilities_for_epoch"]
    assert satisfies(_NoLength(), MaxLength)
    with pytest.raises(PalUserError) as err:
        require(_Half(), PhasedData, "ContinualEvaluation", "use a MultiTaskDataModule.")
    assert str(err.value) == (
        "ContinualEvaluation needs PhasedData (phases, eval_dataloader, steps_per_epoch missing on _Half): "
        "use a MultiTaskDataModule."
    )
