"""Start a ``fit`` from another run's weights without resuming it (``MultiTaskModule(init_from=...)``).

The two-stage recipe "joint, then specialise" trains all tasks with a shared encoder (stage 1),
then freezes the encoder and trains each task's adapter and head from stage 1's weights (stage 2).
Stage 2 is a new run, not a resume: its optimizer, learning-rate schedule and step count start
fresh; only the weights are copied. The checkpoint must fit the model (same tasks, encoder and
adapter shape), checked by :meth:`MultiTaskModule.checkpoint_differences`, the check every
``--ckpt_path`` load goes through.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule


def check_init_from(path: str | None) -> None:
    """Fail with one line when ``init_from`` names no file.

    Raises:
        PalUserError: naming the path and what to pass instead.
    """
    if path is not None and not Path(path).expanduser().is_file():
        raise PalUserError(
            f"init_from checkpoint {path} does not exist. Pass the .ckpt file of the run to start from "
            "(e.g. the best checkpoint of the joint stage: runs/<name>/version_N/checkpoints/best-*.ckpt)."
        )


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint at ``path`` loaded on the CPU with ``weights_only=True``.

    Raises:
        PalUserError: for a missing, truncated or unsafe file (messages of the CLI's checkpoint reader).
    """
    # the CLI's checkpoint reader turns torch.load's tracebacks into one-line user errors; it has no
    # dependency on the module (imported here, not at the top, to keep the module layer light)
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO

    return AtomicCheckpointIO().load_checkpoint(
        str(Path(path).expanduser()), map_location="cpu", weights_only=True
    )


def load_initial_weights(module: MultiTaskModule, path: str) -> None:
    """Copy the weights of checkpoint ``path`` into ``module`` (strict: every key, every shape).

    Raises:
        PalUserError: when the checkpoint was trained for other tasks, another encoder or adapter shape
            (each difference named), or holds no ``state_dict``.
    """
    check_init_from(path)
    checkpoint = read_checkpoint(path)
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
