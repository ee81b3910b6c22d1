"""Layer-sharing regimes: per encoder layer, frozen (F), shared (S) or individual (I, a copy per task or
task group), e.g. ``FFFSSSIIIIII``, bottom layer first (docs/design.md)."""

from __future__ import annotations

from collections.abc import Sequence

from pal_lightning.core.errors import PalUserError

FROZEN, SHARED, INDIVIDUAL = "F", "S", "I"
LETTERS = (FROZEN, SHARED, INDIVIDUAL)


def parse_layer_sharing(spec: str | None, num_layers: int) -> str:
    """The regime as ``num_layers`` upper-case letters (``None``: all shared; spaces, ``-``, ``_`` ignored).
    Raises ``PalUserError`` for a non-string, another letter, or a length other than ``num_layers``."""
    if spec is None:
        return SHARED * num_layers
    if not isinstance(spec, str):
        raise PalUserError(
            f"layer_sharing must be a string of F/S/I letters, one per layer, got {spec!r}; "
            f"e.g. {'F' * (num_layers // 3)}{'S' * (num_layers // 3)}{'I' * (num_layers - 2 * (num_layers // 3))}."
        )
    letters = "".join(c for c in spec if c not in " -_\t").upper()
    unknown = sorted({c for c in letters if c not in LETTERS})
    if unknown:
        raise PalUserError(
            f"layer_sharing {spec!r} has unknown letter(s) {unknown}: use F (frozen), S (shared) or "
            "I (individual: a copy per task), one per layer."
        )
    if len(letters) != num_layers:
        raise PalUserError(
            f"layer_sharing {spec!r} has {len(letters)} letters but the encoder has {num_layers} layers: "
            f"give one letter per layer, bottom first (e.g. {'S' * (num_layers - 1)}I)."
        )
    return letters


def layers_with(regime: str, letter: str) -> tuple[int, ...]:
    """0-based indices of the layers marked ``letter`` in ``regime``."""
    return tuple(i for i, c in enumerate(regime) if c == letter)


def stored_parameters(
    regime: str, layer_parameters: Sequence[int] | int, shared_other: int, num_tasks: int
) -> int:
    """Encoder parameters stored to serve ``num_tasks`` tasks: ``shared_other + sum_l n_l * (T if I else 1)``;
    ``layer_parameters``: per layer, or one number for all."""
    sizes = [layer_parameters] * len(regime) if isinstance(layer_parameters, int) else list(layer_parameters)
    if len(sizes) != len(regime):
        raise ValueError(f"{len(sizes)} layer sizes for a regime of {len(regime)} layers")
    return shared_other + sum(
        n * (num_tasks if c == INDIVIDUAL else 1) for n, c in zip(sizes, regime, strict=True)
    )


def resolve_task_groups(
    groups: Sequence[Sequence[str]] | None, tasks: Sequence[str], regime: str | None = None
) -> dict[str, str]:
    """Task -> the name of the group whose copies of the I layers it uses (a task in no group: its own).
    Raises ``PalUserError`` for groups without I layers in ``regime``, an unknown task, a task in two groups,
    or an empty group."""
    if groups and regime is not None and INDIVIDUAL not in regime:
        raise PalUserError(
            f"task_groups {list(groups)} share individual (I) layers, but layer_sharing {regime!r} has "
            "none: mark the layers to share within groups with I, or drop task_groups."
        )
    out: dict[str, str] = {}
    for group in groups or ():
        members = [group] if isinstance(group, str) else list(group)
        if not members:
            raise PalUserError(
                "task_groups has an empty group: list the tasks of each group, e.g. [[sst, qqp]]."
            )
        unknown = [t for t in members if t not in tasks]
        if unknown:
            raise PalUserError(
                f"task_groups names task(s) {unknown} that the model does not have (tasks: {', '.join(tasks)})."
            )
        twice = [t for t in members if t in out or members.count(t) > 1]
        if twice:
            raise PalUserError(
                f"task_groups lists task(s) {sorted(set(twice))} twice: put each task in one group."
            )
        for task in members:
            out[task] = "+".join(members)  # the group's name
    return {task: out.get(task, task) for task in tasks}
