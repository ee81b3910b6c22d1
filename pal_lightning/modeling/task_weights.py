"""Save and load only the task-specific weights (adapters and heads) of chosen tasks.

A user keeps one shared pretrained encoder plus a small safetensors file per task set. The file holds
``adapters.<task>.*`` and, with individual (I) layers, ``individual.<task>.*`` (from the encoder) and
``heads.<task>.*`` (from ``obj.heads`` when present), and metadata that makes a mismatched load fail
loudly::

    format             "pal-lightning-task-weights/1"
    tasks              JSON list of the saved task names
    heads              JSON list of the tasks whose head was saved
    adapter            JSON {"adapter", "pal_size", "num_heads", "layers"} (resolved, shape-relevant), plus
                       "activation", "individual_layers" and "task_groups" when they are not the defaults
    hidden_size, num_hidden_layers, encoder (name or path the encoder came from, informative only)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes
from torch import nn

from pal_lightning.errors import PalUserError
from pal_lightning.files import atomic_write_bytes
from pal_lightning.modeling.accounting import _encoder_and_heads
from pal_lightning.modeling.encoder import ADAPTERS_PREFIX, INDIVIDUAL_PREFIX, MultiTaskBert

FORMAT = "pal-lightning-task-weights/1"
HEADS_PREFIX = "heads"


def _adapter_signature(encoder: MultiTaskBert) -> dict[str, object]:
    cfg = encoder.pal_config
    signature: dict[str, object] = {
        "adapter": cfg.adapter,
        "pal_size": encoder.pal_size,
        "num_heads": cfg.num_heads if cfg.has_attention or cfg.adapter == "pa_on_top" else None,
        "layers": list(encoder.pal_layers),
    }
    if cfg.activation != "none":  # only when set, so files saved before the option still match
        signature["activation"] = cfg.activation
    if encoder.individual_layers:  # likewise: only with individual layers
        signature["individual_layers"] = list(encoder.individual_layers)
        groups = sorted({g for t, g in encoder.task_group.items() if g != t})
        if groups:
            signature["task_groups"] = groups
    return signature


def _model_tasks(encoder: MultiTaskBert, heads: nn.ModuleDict | None) -> list[str]:
    tasks = list(encoder.task_names)
    if heads is not None:
        tasks += [t for t in heads if t not in tasks]
    return tasks


def _task_state(encoder: MultiTaskBert, heads: nn.ModuleDict | None, task: str) -> dict[str, torch.Tensor]:
    """The live tensors (sharing storage with the parameters) of ``task``'s adapter, individual layers and
    head."""
    state: dict[str, torch.Tensor] = {}
    if task in encoder.adapters:
        state.update(encoder.adapters[task].state_dict(prefix=f"{ADAPTERS_PREFIX}.{task}."))
    group = encoder.task_group.get(task, task)
    if group in encoder.individual:  # its group's copies (the task's own without task_groups)
        state.update(encoder.individual[group].state_dict(prefix=f"{INDIVIDUAL_PREFIX}.{group}."))
    if heads is not None and task in heads:
        state.update(heads[task].state_dict(prefix=f"{HEADS_PREFIX}.{task}."))
    return state


def _choose(tasks: object, available: list[str], where: str) -> list[str]:
    if tasks is None:
        return list(available)
    chosen = [tasks] if isinstance(tasks, str) else list(tasks)  # type: ignore[call-overload]
    unknown = [t for t in chosen if t not in available]
    if unknown:
        raise PalUserError(
            f"Task(s) {unknown} are not in {where}. Available: {', '.join(available) or 'none'}."
        )
    return chosen


def save_task_weights(
    obj: nn.Module,
    path: str | os.PathLike[str],
    tasks: str | list[str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the adapters and heads of ``tasks`` (default: all) to a safetensors file.

    Args:
        obj: a :class:`MultiTaskBert` or a module with ``.encoder`` (and optionally ``.heads``).
        path: the file to write; its folder is created.
        tasks: task names; ``None`` saves every task.
        overwrite: replace an existing file (refused by default).

    Returns:
        The path written.

    Raises:
        PalUserError: for an existing file without ``overwrite=True``, an unknown task, or nothing to save.
    """
    encoder, heads = _encoder_and_heads(obj)
    path = Path(path)
    if path.exists() and not overwrite:
        raise PalUserError(
            f"{path} already exists. Choose another path or pass overwrite=True to replace it."
        )
    chosen = _choose(tasks, _model_tasks(encoder, heads), "this model")
    tensors: dict[str, torch.Tensor] = {}
    for task in chosen:
        for key, value in _task_state(encoder, heads, task).items():
            tensors[key] = value.detach().to("cpu").contiguous().clone()
    if not tensors:
        raise PalUserError(
            f"Tasks {chosen} have no task-specific weights here (adapter 'none' and no heads): nothing to save."
        )
    metadata = {
        "format": FORMAT,
        "tasks": json.dumps(chosen),
        "heads": json.dumps([t for t in chosen if heads is not None and t in heads]),
        "adapter": json.dumps(_adapter_signature(encoder)),
        "hidden_size": str(encoder.hidden_size),
        "num_hidden_layers": str(encoder.num_layers),
        "encoder": str(getattr(encoder.config, "_name_or_path", "") or ""),
    }
    atomic_write_bytes(path, safetensors_bytes(tensors, metadata=metadata))
    return path


def read_task_weights_metadata(path: str | os.PathLike[str]) -> dict[str, object]:
    """The decoded metadata of a task-weights file (tasks, heads, adapter, hidden_size, ...).

    Raises:
        PalUserError: when the file is missing or is not a pal-lightning task-weights file.
    """
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
    return {
        "tasks": json.loads(raw["tasks"]),
        "heads": json.loads(raw["heads"]),
        "adapter": json.loads(raw["adapter"]),
        "hidden_size": int(raw["hidden_size"]),
        "num_hidden_layers": int(raw["num_hidden_layers"]),
        "encoder": raw.get("encoder", ""),
    }


def load_task_weights(
    obj: nn.Module,
    path: str | os.PathLike[str],
    tasks: str | list[str] | None = None,
    strict: bool = True,
) -> list[str]:
    """Load the adapters and heads of ``tasks`` (default: every task in the file) into ``obj`` in place.

    Args:
        obj: a :class:`MultiTaskBert` or a module with ``.encoder`` (and optionally ``.heads``).
        path: a file written by :func:`save_task_weights`.
        tasks: which saved tasks to load; each must also exist in ``obj``.
        strict: require that the file and the model hold exactly the same tensors for those tasks; with
            ``False`` tensors present on one side only are skipped.

    Returns:
        The tasks loaded.

    Raises:
        PalUserError: for a missing or foreign file, an adapter configuration or width that differs from
            the model's, unknown tasks, missing/unexpected tensors (strict) or differing shapes.
    """
    encoder, heads = _encoder_and_heads(obj)
    meta = read_task_weights_metadata(path)
    mine = _adapter_signature(encoder)
    if meta["hidden_size"] != encoder.hidden_size or meta["adapter"] != mine:
        raise PalUserError(
            f"{path} was saved for width {meta['hidden_size']} with adapter {meta['adapter']}, but this model "
            f"has width {encoder.hidden_size} with adapter {mine}. Build the model with the same encoder and "
            "PAL options as the one that saved the file."
        )
    chosen = _choose(tasks, meta["tasks"], str(path))  # type: ignore[arg-type]
    model_tasks = _model_tasks(encoder, heads)
    absent = [t for t in chosen if t not in model_tasks]
    if absent:
        raise PalUserError(
            f"Task(s) {absent} from {path} are not in this model (tasks: {', '.join(model_tasks)}). "
            "Build the model with those tasks first."
        )
    with safe_open(str(path), framework="pt") as f:
        file_keys = set(f.keys())
        plan: list[tuple[torch.Tensor, str]] = []
        problems: list[str] = []
        for task in chosen:
            target = _task_state(encoder, heads, task)
            group = encoder.task_group.get(task, task)
            prefixes = (f"{ADAPTERS_PREFIX}.{task}.", f"{INDIVIDUAL_PREFIX}.{group}.", f"{HEADS_PREFIX}.{task}.")
            in_file = {k for k in file_keys if k.startswith(prefixes)}
            missing = sorted(set(target) - in_file)
            unexpected = sorted(in_file - set(target))
            if strict and (missing or unexpected):
                problems.append(f"task {task!r}: missing {missing[:5]}, unexpected {unexpected[:5]}")
            for key in sorted(set(target) & in_file):
                shape = tuple(f.get_slice(key).get_shape())
                if shape != tuple(target[key].shape):
                    problems.append(f"{key}: file {shape}, model {tuple(target[key].shape)}")
                plan.append((target[key], key))
        if problems:
            hint = ""
            if any(f"{HEADS_PREFIX}." in p for p in problems):
                # the usual cause: a pair task's head is built for pair_encoding (siamese heads read
                # [u, v, |u-v|, u*v], siamese STS has none), which the file does not record
                ours = getattr(getattr(obj, "hparams", None), "get", lambda _k: None)("pair_encoding")
                hint = (
                    " The heads differ: heads of pair tasks depend on pair_encoding; build the model with the "
                    "pair_encoding it was trained with (configs/quickstart.yaml: pair_encoding='siamese')"
                    + (f", this model has {ours!r}" if ours is not None else "")
                    + "."
                )
            raise PalUserError(
                f"{path} does not match this model: {'; '.join(problems)}. Use the same heads and PAL options "
                "as when saving, or strict=False to skip tensors present on one side only." + hint
            )
        with torch.no_grad():
            for tensor, key in plan:
                tensor.copy_(f.get_tensor(key))
    return chosen
