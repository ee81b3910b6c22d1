"""What the callbacks need of a LightningModule or LightningDataModule, as ``Protocol`` s.

Any class with these members works, not only the built-in ones (mypy checks that those satisfy them,
``tests/test_typing.py``); :func:`require` and :func:`satisfies` check an object at run time, naming a
missing member instead of an ``AttributeError`` deep inside a hook.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar

from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    from pathlib import Path

    import lightning.pytorch as pl
    from torch import Tensor

    from pal_lightning.data.sampling.phase_plan import Phase
    from pal_lightning.tasks.specs import TaskSpec


C = TypeVar("C")

# data module (``trainer.datamodule``)


class TrainBatchSource(Protocol):
    """Rebuilds a training batch of ``task`` from positions in its train split (GEM's memories)."""

    def train_batch(self, task: str, indices: Sequence[int]) -> dict[str, Any]: ...


class EpochSteps(Protocol):
    """Knows the training batches per epoch per rank (valid after ``setup("fit")``)."""

    @property
    def steps_per_epoch(self) -> int: ...


class PhasedData(EpochSteps, Protocol):
    """A sequential schedule's phases and loaders of labelled splits (continual evaluation)."""

    @property
    def phases(self) -> Sequence[Phase]: ...

    def eval_dataloader(
        self, split: str = "dev", tasks: Sequence[str] | None = None, limit_examples: int | None = None
    ) -> Iterable[Any]: ...


class EpochTaskProbabilities(Protocol):
    """The task sampling probabilities of a (0-based) epoch (the training log)."""

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]: ...


class PredictionLayout(Protocol):
    """The tasks and splits ``predict`` serves, hence the prediction files a run writes."""

    @property
    def task_names(self) -> list[str]: ...

    @property
    def predict_splits(self) -> Sequence[str]: ...


class ExampleOrder(Protocol):
    """The ids of a split in file order (the prediction writer writes its rows in this order)."""

    def example_ids(self, task: str, split: str) -> list[str]: ...


class MaxLength(Protocol):
    """The longest tokenised sequence, saved with a pretrained folder for prediction."""

    @property
    def max_length(self) -> int: ...


# module (``pl_module``)


class BatchLossModel(Protocol):
    """The training loss of one batch, differentiable (GEM's memory gradients)."""

    def batch_loss(self, batch: Mapping[str, Any]) -> Tensor: ...


class TaskPredictor(Protocol):
    """The task specifications and the prediction from a task's output."""

    @property
    def task_specs(self) -> Mapping[str, TaskSpec]: ...

    def predict_from_output(self, task: str, output: Tensor) -> Tensor: ...


class LastScores(Protocol):
    """The scores of the latest evaluation of each stage, ``{stage: {key: value}}``."""

    @property
    def last_scores(self) -> Mapping[str, Mapping[str, float]]: ...


class ScoredTasks(Protocol):
    """The tasks whose scores make the overall score (the auxiliary ones are left out)."""

    @property
    def scored_tasks(self) -> list[str]: ...


class ParameterReporter(Protocol):
    """The parameter counts of the model (total, trainable, per part)."""

    def parameter_report(self) -> Any: ...


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


def _protocol_members(contract: type) -> list[str]:
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
    # getattr_static runs no property (a data module's raise before setup); what it cannot see (an
    # nn.Module's submodules) is asked for the usual way
    value = inspect.getattr_static(obj, name, _ABSENT)
    if value is _ABSENT:
        return hasattr(obj, name)
    # a method set to None is switched off, as `isinstance` reads it
    return value is not None or not inspect.isfunction(inspect.getattr_static(contract, name, None))


def missing_members(obj: object, contract: type) -> list[str]:
    """The members of the protocol ``contract`` that ``obj`` lacks (a method set to ``None`` counts)."""
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
    """``module.last_scores[stage]`` (:class:`LastScores`), else ``None``."""
    if not satisfies(module, LastScores):
        return None
    last = module.last_scores
    scores = last.get(stage) if isinstance(last, Mapping) else None
    return scores if isinstance(scores, Mapping) else None


def datamodule_of(trainer: pl.Trainer) -> object | None:
    """The trainer's data module, or ``None`` (not declared by Lightning's type)."""
    return getattr(trainer, "datamodule", None)
