"""Refuse a checkpoint trained for other tasks, another encoder or adapter shape (every load); and
``MultiTaskModule(init_from=...)``: a ``fit`` that starts from another run's weights (optimizer, schedule and
step count fresh), e.g. stage 2 of "joint, then specialise"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.hub import resolve_encoder
from pal_lightning.core.plain_values import to_plain
from pal_lightning.core.version import reads_files_of, version_mismatch
from pal_lightning.module.optim_config import with_optim_group
from pal_lightning.module.saved_class import CHECKPOINT_CLASS_KEY, fits_saved_class, how_to_name
from pal_lightning.tasks.specs import TaskSpec, task_name_of, task_to_dict, task_to_hparam

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule

#: Hyper-parameters that fix the shape or meaning of the weights: a checkpoint must agree on them.
ARCHITECTURE_HPARAMS: tuple[str, ...] = (
    "encoder",
    "encoder_config",
    "adapter",
    "layer_sharing",
    "task_groups",
    "pooling",
    "pair_encoding",
    "heads",
)

#: Adapter options that only pick the starting values: a checkpoint trained with another still fits.
STARTING_VALUES_ONLY: frozenset[str] = frozenset({"init"})

#: Options of ``optim`` that also fix the optimizer's parameter groups: a resumed ``fit`` needs them equal.
OPTIMIZER_HPARAMS: tuple[str, ...] = ("freeze_encoder", "freeze_embeddings", "adapter_lr", "layer_lr_decay")

#: The checkpoint key holding the version of pal-lightning that wrote it.
VERSION_KEY = "pal_lightning_version"


def task_differences(saved_tasks: Sequence[Any], our_tasks: Sequence[Any], resuming: bool) -> list[str]:
    """How a checkpoint's task list differs from ours (saved form): names, definitions, else (resuming) order."""
    theirs = {task_name_of(t): t for t in saved_tasks}
    mine = {task_name_of(t): t for t in our_tasks}
    if set(theirs) != set(mine):
        return [
            f"it was trained for tasks [{', '.join(theirs)}] but the model is configured for "
            f"[{', '.join(mine)}]"
        ]
    changed = [n for n in mine if _plain_task(theirs[n]) != _plain_task(mine[n])]
    if changed:
        return [f"the task definition of {changed} differs (labels, files or columns)"]
    if resuming and list(theirs) != list(mine):
        return [
            f"it was trained with the task order [{', '.join(theirs)}], the model now has "
            f"[{', '.join(mine)}] (resuming a fit needs the same order)"
        ]
    return []


def _plain_task(task: Any) -> Any:
    # every field a TaskSpec has now: a checkpoint written before a field was added holds the same task
    if isinstance(task, Mapping):
        try:
            return to_plain(task_to_dict(TaskSpec(**task)))
        except (TypeError, ValueError):  # not a TaskSpec's fields: compared as saved
            pass
    return to_plain(task)


def checkpoint_differences(
    saved: Mapping[str, Any], ours: Mapping[str, Any], tasks: Sequence[TaskSpec], resuming: bool = False
) -> list[str]:
    """What a checkpoint's hyper-parameters ``saved`` say differently from ``ours``, as phrases: the tasks,
    the architecture hyper-parameters and, when ``resuming`` a fit, the optimizer's."""
    out: list[str] = []
    saved = with_optim_group(saved)  # a checkpoint saved before optim existed holds its options flat
    saved_tasks = saved.get("tasks")
    if saved_tasks is not None:
        out += task_differences(saved_tasks, [task_to_hparam(s) for s in tasks], resuming)
    for key in ARCHITECTURE_HPARAMS:
        if key == "encoder" and (
            saved.get("encoder_config") is not None or ours.get("encoder_config") is not None
        ):
            continue  # a random encoder of encoder_config's shape: the name is not used
        a, b = to_plain(saved.get(key)), to_plain(ours.get(key))
        if key == "adapter" and isinstance(a, dict) and isinstance(b, dict):
            fields = [k for k in dict.fromkeys([*a, *b]) if k not in STARTING_VALUES_ONLY]
            out += [
                f"adapter.{k} is {a.get(k)!r} in the checkpoint but {b.get(k)!r} here"
                for k in fields
                if a.get(k) != b.get(k)
            ]
        elif a != b and not (key == "encoder" and _same_encoder(str(a), str(b))):
            out.append(f"{key} is {a!r} in the checkpoint but {b!r} here")
    if resuming:
        theirs, mine = saved.get("optim") or {}, ours.get("optim") or {}
        out += [
            f"optim.{k} is {theirs.get(k)!r} in the checkpoint but {mine.get(k)!r} here"
            for k in OPTIMIZER_HPARAMS
            if to_plain(theirs.get(k)) != to_plain(mine.get(k))
        ]
    return out


def _same_encoder(a: str, b: str) -> bool:
    # e.g. a hub id and its cached copy
    try:
        return resolve_encoder(a) == resolve_encoder(b)
    except PalUserError:
        return False


def check_checkpoint(
    checkpoint: Mapping[str, Any],
    ours: Mapping[str, Any],
    tasks: Sequence[TaskSpec],
    model_class: type | None = None,
    trainer: Any = None,
) -> None:
    """Refuse a checkpoint of another library series, saved from a class that ``model_class`` (the model's)
    neither is nor extends, or whose tasks, encoder or adapter shape differ from ``ours`` (a resumed ``fit``
    also needs the same task order and freezing options: one with optimizer states, unless ``trainer``, the
    model's, is validating, testing or predicting, which restore none)."""
    saved = checkpoint.get("hyper_parameters")
    if not isinstance(saved, Mapping):
        return  # not written by this module (a user's own checkpoint): the weights decide
    if not reads_files_of(checkpoint.get(VERSION_KEY)):
        raise PalUserError(version_mismatch("The checkpoint", checkpoint.get(VERSION_KEY)))
    recorded = saved.get(CHECKPOINT_CLASS_KEY)
    if model_class is not None and isinstance(recorded, str) and not fits_saved_class(recorded, model_class):
        raise PalUserError(
            f"The checkpoint was saved from {recorded}, but the model is {model_class.__qualname__}: name the "
            f"class it was saved from, {how_to_name(recorded, 'checkpoint')}; with a run's checkpoint, its "
            "config.yaml names it (--config runs/<name>/version_N/config.yaml)."
        )
    fn = getattr(getattr(trainer, "state", None), "fn", None)
    resuming = bool(checkpoint.get("optimizer_states")) and fn in (None, "fit")
    differences = checkpoint_differences(saved, ours, tasks, resuming=resuming)
    if differences:
        raise PalUserError(
            "The checkpoint does not fit this model: "
            + "; ".join(differences)
            + ". Use the configuration the checkpoint was trained with (the config.yaml in its run "
            "folder, e.g. --config runs/<name>/version_N/config.yaml), or pick a checkpoint trained "
            "with this configuration."
        )


def load_initial_weights(module: MultiTaskModule, path: str) -> None:
    """Copy the weights of checkpoint ``path`` into ``module`` (every key, every shape; settings checked)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise PalUserError(
            f"init_from checkpoint {path} does not exist. Pass the .ckpt file of the run to start from "
            "(e.g. the best checkpoint of the joint stage: runs/<name>/version_N/checkpoints/best-*.ckpt)."
        )
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO  # one-line errors for unreadable files

    checkpoint = AtomicCheckpointIO().load_checkpoint(str(file), map_location="cpu", weights_only=True)
    state = checkpoint.get("state_dict")
    if not isinstance(state, dict):
        raise PalUserError(
            f"init_from checkpoint {path} holds no state_dict; pass a checkpoint written by fit."
        )
    saved = checkpoint.get("hyper_parameters")
    if isinstance(saved, dict):
        differences = module.checkpoint_differences(saved, resuming=False)
        if differences:
            raise PalUserError(
                f"init_from checkpoint {path} does not fit this model: " + "; ".join(differences) + ". Train "
                "stage 2 with the stage-1 model settings (tasks, encoder, adapter ...); only "
                "freezing, learning rates and the schedule may change."
            )
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    reshaped = sorted(k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or reshaped:
        # checked before loading: a refused checkpoint leaves every weight as it was
        raise PalUserError(
            f"init_from checkpoint {path} does not match this model's weights (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}, other shapes {reshaped[:5]}). Use a checkpoint of the same model "
            "class and settings."
        )
    module.load_state_dict(state, strict=True)
