"""Task-only weights as one folder per task: ``<task>/task_weights.safetensors`` and ``<task>/config.json``
(the task's specification, labels, adapter shape and encoder, checked before loading)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_text
from pal_lightning.modeling.encoder import MultiTaskEncoder
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
    """Write ``<folder>/<task>/`` (weights and ``config.json``) for each of ``tasks`` (default: all). Raises
    ``PalUserError`` for an unknown task, or existing task folders without ``overwrite=True``."""
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


def task_folder_config(obj: nn.Module, encoder: MultiTaskEncoder, task: str) -> dict[str, object]:
    """The ``config.json`` of ``task``'s folder: its specification, labels, adapter shape and encoder."""
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
    """Load ``<folder>/<task>/`` for each of ``tasks`` (default: all) in place, after checking every folder.
    Raises ``PalUserError`` for no task folder, an unknown task, another saved task definition, or weights
    that do not fit."""
    root = Path(folder)
    available = sorted(p.name for p in root.iterdir() if (p / CONFIG_NAME).is_file()) if root.is_dir() else []
    if not available:
        raise PalUserError(
            f"{root} holds no task folders (<task>/{CONFIG_NAME} and <task>/{WEIGHTS_NAME}). "
            "Save them with save_task_folders()."
        )
    chosen = choose_tasks(tasks, available, str(root))
    specs = getattr(obj, "task_specs", {}) or {}
    for task in chosen:
        _check_task_folder(root / task, specs.get(task))
    for task in chosen:
        load_task_weights(obj, root / task / WEIGHTS_NAME, tasks=[task], strict=strict)
    return chosen


def _check_task_folder(folder: Path, spec: TaskSpec | None) -> None:
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
