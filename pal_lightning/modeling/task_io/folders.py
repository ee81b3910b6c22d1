"""Task-only weights as one folder per task, with the task's config beside its weights.

The same idea as a ``save_pretrained`` folder, for one task's adapter and head::

    adapters/
      sts/
        task_weights.safetensors   the task's PALs and head (:func:`save_task_weights` format)
        config.json                the full task specification, label names, adapter shape, encoder

A folder can be copied, shared or loaded on its own; :func:`load_task_folders` checks that the
model's definition of the task (kind, labels, columns) matches the saved one before loading.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_text
from pal_lightning.modeling.encoder import MultiTaskBert
from pal_lightning.modeling.task_io.state import (
    adapter_signature,
    choose_tasks,
    encoder_and_heads,
    encoder_source,
    model_tasks,
)
from pal_lightning.modeling.task_io.weights import TaskChoice, load_task_weights, save_task_weights
from pal_lightning.tasks.specs import TaskSpec, task_to_dict

FORMAT = "pal-lightning-task-folder/1"
WEIGHTS_NAME = "task_weights.safetensors"
CONFIG_NAME = "config.json"


def save_task_folders(
    obj: nn.Module, folder: str | os.PathLike[str], tasks: TaskChoice = None, *, overwrite: bool = False
) -> list[Path]:
    """Write ``<folder>/<task>/`` (weights and config) for each of ``tasks`` (default: all).

    Args:
        obj: a :class:`~pal_lightning.module.multitask.MultiTaskModule` (or a module with ``.encoder``/``.heads``;
            ``task_specs`` and ``label_names`` are saved when it has them).
        folder: the parent folder.
        tasks: task names; ``None`` saves every task.
        overwrite: replace task folders that already hold saved weights (refused by default, checked
            for every task before anything is written).

    Returns:
        The task folders written.

    Raises:
        PalUserError: for an unknown task, or existing task folders without ``overwrite=True``.
    """
    encoder, heads = encoder_and_heads(obj)
    chosen = choose_tasks(tasks, model_tasks(encoder, heads), "this model")
    root = Path(folder)
    taken = [t for t in chosen if (root / t / WEIGHTS_NAME).exists() or (root / t / CONFIG_NAME).exists()]
    if taken and not overwrite:
        raise PalUserError(
            f"{root} already holds saved weights of {taken}. Nothing was written. Choose another folder or "
            "pass overwrite=True to replace them."
        )
    written = []
    for task in chosen:
        target = root / task
        save_task_weights(obj, target / WEIGHTS_NAME, tasks=[task], overwrite=True)
        config = task_folder_config(obj, encoder, task)
        atomic_write_text(target / CONFIG_NAME, json.dumps(config, indent=2) + "\n")
        written.append(target)
    return written


def task_folder_config(obj: nn.Module, encoder: MultiTaskBert, task: str) -> dict[str, object]:
    """The ``config.json`` of ``task``'s folder: its full specification and label names when ``obj`` has
    them, the adapter's shape and the encoder it was trained on."""
    from pal_lightning.core.version import __version__

    specs = getattr(obj, "task_specs", {}) or {}
    label_names = getattr(obj, "label_names", {}) or {}
    return {
        "format": FORMAT,
        "library_version": __version__,
        "task": task_to_dict(specs[task]) if task in specs else {"name": task},
        "label_names": label_names.get(task),
        "adapter": adapter_signature(encoder),
        "hidden_size": encoder.hidden_size,
        "num_hidden_layers": encoder.num_layers,
        "encoder": encoder_source(encoder),
    }


def load_task_folders(
    obj: nn.Module, folder: str | os.PathLike[str], tasks: TaskChoice = None, strict: bool = True
) -> list[str]:
    """Load the weights of ``<folder>/<task>/`` for each of ``tasks`` (default: every task folder) in place.

    Raises:
        PalUserError: for a folder without task folders, an unknown task, a task whose saved definition
            differs from the model's, or weights that do not fit (see :func:`load_task_weights`).
    """
    root = Path(folder)
    available = sorted(p.name for p in root.iterdir() if (p / CONFIG_NAME).is_file()) if root.is_dir() else []
    if not available:
        raise PalUserError(
            f"{root} holds no task folders (<task>/{CONFIG_NAME} and <task>/{WEIGHTS_NAME}). "
            "Save them with save_task_folders()."
        )
    chosen = choose_tasks(tasks, available, str(root))
    specs = getattr(obj, "task_specs", {}) or {}
    for task in chosen:  # every folder checked before any weight is loaded
        _check_task_folder(root / task, specs.get(task))
    for task in chosen:
        load_task_weights(obj, root / task / WEIGHTS_NAME, tasks=[task], strict=strict)
    return chosen


def _check_task_folder(folder: Path, spec: TaskSpec | None) -> None:
    """Refuse a folder that is not a task folder, or whose task was saved with another definition than
    ``spec`` (the model's; ``None``: not checked)."""
    config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    if config.get("format") != FORMAT:
        raise PalUserError(
            f"{folder / CONFIG_NAME} is not a pal-lightning task folder (format "
            f"{config.get('format')!r}). Save it with save_task_folders()."
        )
    saved = config.get("task") or {}
    if spec is not None and len(saved) > 1 and task_to_dict(spec) != saved:
        raise PalUserError(
            f"Task {folder.name!r} in {folder} was saved with another definition (kind, labels, files or "
            "columns) than this model's. Build the model with the saved task specification "
            f"({CONFIG_NAME} there)."
        )
