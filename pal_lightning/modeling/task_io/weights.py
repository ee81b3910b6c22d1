"""Save and load only the task-specific weights of chosen tasks: one safetensors file holding
``adapters.<task>.*``, ``individual.<group>.*`` and ``heads.<task>.*``, with metadata (format, tasks,
heads, adapter signature, width, encoder) that makes a mismatched load fail."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_bytes
from pal_lightning.modeling.task_io.state import (
    HEADS_PREFIX,
    adapter_signature,
    choose_tasks,
    encoder_and_heads,
    encoder_source,
    model_tasks,
    task_prefixes,
    task_state,
)

__all__ = ["FORMAT", "HEADS_PREFIX", "load_task_weights", "read_task_weights_metadata", "save_task_weights"]

FORMAT = "pal-lightning-task-weights/1"

TaskChoice = str | Sequence[str] | None
"""Which tasks: one name, several, or ``None`` for all."""


def save_task_weights(
    obj: nn.Module, path: str | os.PathLike[str], tasks: TaskChoice = None, *, overwrite: bool = False
) -> Path:
    """Write the adapters, individual layers and heads of ``tasks`` (default: all) to a safetensors file.
    Raises ``PalUserError`` for an existing file without ``overwrite=True``, an unknown task, or nothing to
    save."""
    encoder, heads = encoder_and_heads(obj)
    path = Path(path)
    if path.exists() and not overwrite:
        raise PalUserError(
            f"{path} already exists. Choose another path or pass overwrite=True to replace it."
        )
    chosen = choose_tasks(tasks, model_tasks(encoder, heads), "this model")
    tensors: dict[str, torch.Tensor] = {}
    for task in chosen:
        for key, value in task_state(encoder, heads, task).items():
            tensors[key] = value.detach().to("cpu").contiguous().clone()
    if not tensors:
        raise PalUserError(
            f"Tasks {chosen} have no task-specific weights here (adapter 'none' and no heads): nothing to save."
        )
    metadata = {
        "format": FORMAT,
        "tasks": json.dumps(chosen),
        "heads": json.dumps([t for t in chosen if heads is not None and t in heads]),
        "adapter": json.dumps(adapter_signature(encoder)),
        "hidden_size": str(encoder.hidden_size),
        "num_hidden_layers": str(encoder.num_layers),
        "encoder": encoder_source(encoder),
    }
    atomic_write_bytes(path, safetensors_bytes(tensors, metadata=metadata))
    return path


def read_task_weights_metadata(path: str | os.PathLike[str]) -> dict[str, object]:
    """The decoded metadata of a task-weights file (tasks, heads, adapter, hidden_size, ...). Raises
    ``PalUserError`` when the file is missing or is not a pal-lightning task-weights file."""
    path = Path(path)
    if not path.is_file():
        raise PalUserError(f"Task-weights file {path} does not exist. Save one with save_task_weights().")
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
    except Exception as err:  # noqa: BLE001 - any parse failure means "not our file"
        raise PalUserError(f"{path} is not a safetensors file ({err}).") from err
    if raw.get("format") != FORMAT:
        raise PalUserError(
            f"{path} is not a pal-lightning task-weights file (format {raw.get('format')!r}, expected "
            f"{FORMAT!r}). Save it with save_task_weights()."
        )
    decoded = {
        k: json.loads(raw[k]) for k in ("tasks", "heads", "adapter", "hidden_size", "num_hidden_layers")
    }
    return {**decoded, "encoder": raw.get("encoder", "")}


def load_task_weights(
    obj: nn.Module, path: str | os.PathLike[str], tasks: TaskChoice = None, strict: bool = True
) -> list[str]:
    """Load the tensors of ``tasks`` (default: all in the file) into ``obj`` in place; ``strict=False`` skips
    tensors present on one side only. Raises ``PalUserError`` for a missing or foreign file, other adapter
    options or width, unknown tasks, missing/unexpected tensors (strict) or differing shapes."""
    encoder, heads = encoder_and_heads(obj)
    meta = read_task_weights_metadata(path)
    mine = adapter_signature(encoder)
    if meta["hidden_size"] != encoder.hidden_size or meta["adapter"] != mine:
        raise PalUserError(
            f"{path} was saved for width {meta['hidden_size']} with adapter {meta['adapter']}, but this model "
            f"has width {encoder.hidden_size} with adapter {mine}. Build the model with the same encoder and "
            "PAL options as the one that saved the file."
        )
    chosen = choose_tasks(tasks, meta["tasks"], str(path))  # type: ignore[arg-type]
    choose_tasks(chosen, model_tasks(encoder, heads), "this model (build it with the tasks to load)")
    with safe_open(str(path), framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        targets: dict[str, torch.Tensor] = {}
        problems: list[str] = []
        for task in chosen:
            found, task_problems = match_task_tensors(
                task, task_state(encoder, heads, task), shapes, task_prefixes(encoder, task), strict
            )
            targets.update(found)
            problems += task_problems
        if problems:
            raise _mismatch_error(obj, path, problems)
        with torch.no_grad():
            for key, tensor in targets.items():
                tensor.copy_(f.get_tensor(key))
    return chosen


def match_task_tensors(
    task: str,
    target: dict[str, torch.Tensor],
    file_shapes: dict[str, tuple[int, ...]],
    prefixes: tuple[str, ...],
    strict: bool,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The model tensors to fill, by file key (those under ``prefixes`` on both sides), and the problems."""
    in_file = {k for k in file_shapes if k.startswith(prefixes)}
    missing, unexpected = sorted(set(target) - in_file), sorted(in_file - set(target))
    problems = []
    if strict and (missing or unexpected):
        problems.append(f"task {task!r}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    both = sorted(set(target) & in_file)
    problems += [
        f"{k}: file {file_shapes[k]}, model {tuple(target[k].shape)}"
        for k in both
        if file_shapes[k] != tuple(target[k].shape)
    ]
    return {k: target[k] for k in both}, problems


def _mismatch_error(obj: nn.Module, path: str | os.PathLike[str], problems: list[str]) -> PalUserError:
    hint = ""
    if any(f"{HEADS_PREFIX}." in p for p in problems):
        ours = getattr(getattr(obj, "hparams", None), "get", lambda _k: None)("pair_encoding")
        hint = (
            " The heads differ: heads of pair tasks depend on pair_encoding; build the model with the "
            "pair_encoding it was trained with (configs/quickstart.yaml: pair_encoding='siamese')"
            + (f", this model has {ours!r}" if ours is not None else "")
            + "."
        )
    return PalUserError(
        f"{path} does not match this model: {'; '.join(problems)}. Use the same heads and PAL options "
        "as when saving, or strict=False to skip tensors present on one side only." + hint
    )
