"""``MultiTaskModule(init_from=...)``: a ``fit`` starts from another run's weights (optimizer, schedule and
step count fresh), e.g. stage 2 of "joint, then specialise"."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pal_lightning.core.errors import PalUserError

if TYPE_CHECKING:
    from pal_lightning.module.multitask import MultiTaskModule


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
