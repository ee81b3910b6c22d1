"""The contracts between the callbacks and the LightningModule / LightningDataModule, as ``Protocol`` s.

The callbacks work with any module or data module that has the few members they use, not only
:class:`~pal_lightning.MultiTaskModule` and :class:`~pal_lightning.MultiTaskDataModule`. Each
protocol below names one such contract and who relies on it; mypy (``tests/test_typing.py``) checks
that the built-in classes satisfy them, and :func:`require` / :func:`satisfies` check an object at
run time, so that a missing member is reported by name instead of as an ``AttributeError`` deep
inside a hook.

Data module (``trainer.datamodule``):

* :class:`TrainBatchSource` - GEM rebuilds remembered examples;
* :class:`EpochSteps` - the learning-rate schedule's length (``MultiTaskModule.configure_optimizers``);
* :class:`PhasedData` - continual evaluation after each phase of a sequential schedule;
* :class:`EpochTaskProbabilities` - the training log's per-epoch task probabilities;
* :class:`PredictionLayout` / :class:`ExampleOrder` - which prediction files a run writes, in which row order;
* :class:`MaxLength` - the tokenisation length saved with a pretrained folder.

Module (``pl_module``):

* :class:`BatchLossModel` - GEM's memory gradients;
* :class:`SharedParameterEncoder` - GEM's ``parameters="shared"`` (``pl_module.encoder``);
* :class:`TaskPredictor` - continual evaluation and the training log's accuracy;
* :class:`LastScores` / :class:`ScoredTasks` - score reports and the best-checkpoint choice;
* :class:`ParameterReporter` - the parameter counts in the score report;
* :class:`PretrainedSaver` - the save-pretrained callback.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    from pathlib import Path

    import lightning.pytorch as pl
    from torch import Tensor, nn

    from pal_lightning.data.sampling.phase_plan import Phase
    from pal_lightning.tasks.specs import TaskSpec

__all__ = [
    "BatchLossModel",
    "EpochSteps",
    "EpochTaskProbabilities",
    "ExampleOrder",
    "LastScores",
    "MaxLength",
    "ParameterReporter",
    "PhasedData",
    "PredictionLayout",
    "PretrainedSaver",
    "ScoredTasks",
    "SharedParameterEncoder",
    "TaskPredictor",
    "TrainBatchSource",
    "datamodule_of",
    "last_stage_scores",
    "missing_members",
    "require",
    "satisfies",
]

C = TypeVar("C")

# ---------------------------------------------------------------------------------------- data module


@runtime_checkable
class TrainBatchSource(Protocol):
    """Rebuilds a training batch of ``task`` from positions in its train split (GEM's memories)."""

    def train_batch(self, task: str, indices: Sequence[int]) -> dict[str, Any]: ...


@runtime_checkable
class EpochSteps(Protocol):
    """Knows the training batches per epoch per rank (valid after ``setup("fit")``)."""

    @property
    def steps_per_epoch(self) -> int: ...


@runtime_checkable
class PhasedData(EpochSteps, Protocol):
    """A sequential schedule's phases, and loaders of any labelled split for some tasks
    (:class:`~pal_lightning.callbacks.ContinualEvaluation`)."""

    @property
    def phases(self) -> Sequence[Phase]: ...

    def eval_dataloader(
        self, split: str = "dev", tasks: Sequence[str] | None = None, limit_examples: int | None = None
    ) -> Iterable[Any]: ...


@runtime_checkable
class EpochTaskProbabilities(Protocol):
    """The task sampling probabilities of a (0-based) epoch (the training log; what a data module reads
    from its :class:`~pal_lightning.data.sampling.schedules.SamplingSchedule`)."""

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]: ...


@runtime_checkable
class PredictionLayout(Protocol):
    """The tasks and splits ``predict`` serves, hence the prediction files a run writes."""

    @property
    def task_names(self) -> list[str]: ...

    @property
    def predict_splits(self) -> Sequence[str]: ...


@runtime_checkable
class ExampleOrder(Protocol):
    """The ids of a split in file order (the prediction writer writes its rows in this order)."""

    def example_ids(self, task: str, split: str) -> list[str]: ...


@runtime_checkable
class MaxLength(Protocol):
    """The longest tokenised sequence, saved with a pretrained folder for prediction."""

    @property
    def max_length(self) -> int: ...


# ---------------------------------------------------------------------------------------- module


@runtime_checkable
class BatchLossModel(Protocol):
    """The training loss of one batch, differentiable (GEM's memory gradients)."""

    def batch_loss(self, batch: Mapping[str, Any]) -> Tensor: ...


@runtime_checkable
class SharedParameterEncoder(Protocol):
    """The parameters every task updates (GEM projects only these with ``parameters="shared"``)."""

    def shared_parameters(self) -> Iterator[tuple[str, nn.Parameter]]: ...


@runtime_checkable
class TaskPredictor(Protocol):
    """The task specifications and the prediction from a task's output (metrics outside the module)."""

    @property
    def task_specs(self) -> Mapping[str, TaskSpec]: ...

    def predict_from_output(self, task: str, output: Tensor) -> Tensor: ...


@runtime_checkable
class LastScores(Protocol):
    """The scores of the latest evaluation of each stage, ``{stage: {key: value}}`` (replaced at every
    evaluation, unlike ``trainer.callback_metrics``, so they say what *this* evaluation measured)."""

    @property
    def last_scores(self) -> Mapping[str, Mapping[str, float]]: ...


@runtime_checkable
class ScoredTasks(Protocol):
    """The tasks whose scores make the overall score (the auxiliary ones are left out)."""

    @property
    def scored_tasks(self) -> list[str]: ...


@runtime_checkable
class ParameterReporter(Protocol):
    """The parameter counts of the model (total, trainable, per part)."""

    def parameter_report(self) -> Any: ...


@runtime_checkable
class PretrainedSaver(Protocol):
    """Saves a folder that ``from_pretrained`` loads back (the arguments the callback passes)."""

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        *,
        scores: Mapping[str, float] | None = None,
        max_length: int | None = None,
        state_dict: Mapping[str, Tensor] | None = None,
        scores_note: str | None = None,
    ) -> Path: ...


# ---------------------------------------------------------------------------------------- checks


def _protocol_members(contract: type) -> list[str]:
    """The public names a protocol declares (methods, properties and annotated attributes)."""
    names: dict[str, None] = {}
    for base in contract.__mro__:
        if base is object or base is Protocol or base.__module__ == "typing":
            continue
        for name in [*vars(base), *getattr(base, "__annotations__", {})]:
            if not name.startswith("_"):
                names[name] = None
    return list(names)


_ABSENT = object()


def _has(obj: object, name: str, contract: type) -> bool:
    # inspect.getattr_static does not run properties: `isinstance(obj, Protocol)` does on Python
    # < 3.12, and a data module's properties raise before `setup` (steps_per_epoch). What it does not
    # see (an nn.Module's submodules, found by `__getattr__`) is asked for the usual way.
    value = inspect.getattr_static(obj, name, _ABSENT)
    if value is _ABSENT:
        return hasattr(obj, name)
    # a method set to None is switched off, as `isinstance` with a runtime-checkable protocol reads it
    return value is not None or not inspect.isfunction(inspect.getattr_static(contract, name, None))


def missing_members(obj: object, contract: type) -> list[str]:
    """The members of the protocol ``contract`` that ``obj`` lacks (empty when it satisfies it); a
    method of the protocol that ``obj`` sets to ``None`` counts as missing."""
    if obj is None:
        return _protocol_members(contract)
    return [name for name in _protocol_members(contract) if not _has(obj, name, contract)]


def satisfies(obj: object, contract: type[C]) -> TypeGuard[C]:
    """Whether ``obj`` has every member of the protocol ``contract`` (without running its properties)."""
    return obj is not None and not missing_members(obj, contract)


def require(obj: object, contract: type[C], user: str, fix: str) -> C:
    """``obj`` typed as ``contract``, or a :class:`PalUserError` naming what ``user`` misses and ``fix``."""
    if satisfies(obj, contract):
        return obj
    what = "nothing" if obj is None else type(obj).__name__
    missing = ", ".join(missing_members(obj, contract))
    raise PalUserError(f"{user} needs {contract.__name__} ({missing} missing on {what}): {fix}")


def last_stage_scores(module: object, stage: str) -> Mapping[str, float] | None:
    """``module.last_scores[stage]`` when the module keeps its latest scores (:class:`LastScores`), else ``None``."""
    if not satisfies(module, LastScores):
        return None
    last = module.last_scores
    scores = last.get(stage) if isinstance(last, Mapping) else None
    return scores if isinstance(scores, Mapping) else None


def datamodule_of(trainer: pl.Trainer) -> object | None:
    """The trainer's data module, or ``None`` (Lightning sets ``trainer.datamodule`` at run time only,
    so its type does not declare it)."""
    return getattr(trainer, "datamodule", None)
