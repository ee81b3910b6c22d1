"""One value per task from an int or a ``task -> int`` mapping (batch sizes, steps per phase)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pal_lightning.core.errors import PalUserError

__all__ = ["per_task"]


def per_task(value: int | Mapping[str, int], tasks: Sequence[str], what: str) -> dict[str, int]:
    """Expand an int or a ``task -> int`` mapping (naming each task, or giving a ``default``) to every task
    of ``tasks``; ``what`` is the option's name for messages (``batch_size``: ``--data.batch_size``).

    Raises:
        PalUserError: for a mapping naming an unknown task or missing one without a default, or a
            value below 1.
    """
    if isinstance(value, Mapping):
        default = value.get("default")
        unknown = [k for k in value if k != "default" and k not in tasks]
        missing = [t for t in tasks if t not in value and default is None]
        if unknown or missing:
            raise PalUserError(
                f"{what} (--data.{what}) per task must name the tasks {list(tasks)} (or give a 'default'); "
                f"unknown {unknown}, missing {missing}."
            )
        # `default` is None only when every task is named (checked above)
        out = {t: int(value.get(t, default)) for t in tasks}  # type: ignore[arg-type]
    else:
        out = dict.fromkeys(tasks, int(value))
    bad = {t: b for t, b in out.items() if b < 1}
    if bad:
        # name the option as the user wrote it, and the value they gave (not the per-task expansion)
        given = bad if isinstance(value, Mapping) else value
        raise PalUserError(
            f"{what} (--data.{what}) must be at least 1, got {given!r}. Give a positive number."
        )
    return out
