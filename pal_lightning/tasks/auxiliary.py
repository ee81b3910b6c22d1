"""Auxiliary tasks: trained and evaluated like any other, but left out of ``val/overall`` and
``test/overall``, so extra training data never changes what the overall score means."""

from __future__ import annotations

from collections.abc import Sequence

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import repeated_names


def check_auxiliary(auxiliary: Sequence[str] | str | None, tasks: Sequence[str]) -> list[str]:
    """The auxiliary task names as a list, checked against the model's ``tasks``.

    Raises:
        PalUserError: a name not among the tasks, a name given twice, or every task auxiliary.
    """
    if auxiliary is None:
        return []
    names = [auxiliary] if isinstance(auxiliary, str) else [str(a) for a in auxiliary]
    unknown = [a for a in names if a not in tasks]
    if unknown:
        raise PalUserError(
            f"auxiliary names {unknown}, which are not among the tasks {list(tasks)}: add them to "
            "--model.tasks or remove them from --model.auxiliary."
        )
    repeated = repeated_names(names)
    if repeated:
        raise PalUserError(f"auxiliary lists {repeated} more than once; name each auxiliary task once.")
    if names and set(names) >= set(tasks):
        raise PalUserError(
            f"Every task ({list(tasks)}) is auxiliary, so val/overall would cover none; leave at least "
            "one task out of --model.auxiliary."
        )
    return names
