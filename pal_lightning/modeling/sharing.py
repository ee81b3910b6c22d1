"""Layer-sharing regimes: per encoder layer, frozen (F), shared (S) or individual (I).

A regime is a string with one letter per layer, bottom layer first, e.g. ``FFFSSSIIIIII`` for BERT-base:

* ``F`` (frozen): the pretrained layer, used by every task and never updated;
* ``S`` (shared): one layer used and updated by every task (the usual multi-task model);
* ``I`` (individual): a copy of the pretrained layer per task, used and updated by that task alone.

``None`` (the default) means every layer ``S``. The embeddings are not part of the spec: they are shared
(frozen with ``freeze_embeddings``). All ``I`` with frozen embeddings stores what separate single-task
models store, less one copy of the embeddings per extra task; all ``S`` is the usual shared model.

What serving all T tasks stores (:func:`stored_parameters`): the embeddings once, each F or S layer once,
each I layer T times; task-specific adapters and heads come on top.

Task groups (:func:`resolve_task_groups`): related tasks can share their I layers, e.g. ``[["sst", "qqp"]]``
gives SST and Quora one copy of each I layer and STS its own; each I layer is then stored once per group.
"""

from __future__ import annotations

from collections.abc import Sequence

from pal_lightning.core.errors import PalUserError

FROZEN, SHARED, INDIVIDUAL = "F", "S", "I"
LETTERS = (FROZEN, SHARED, INDIVIDUAL)


def parse_layer_sharing(spec: str | None, num_layers: int) -> str:
    """The regime as an upper-case string of ``num_layers`` letters (``None``: all shared).

    Whitespace, ``-`` and ``_`` are ignored, so ``"FFF-SSS-IIIIII"`` reads as ``"FFFSSSIIIIII"``.

    Raises:
        PalUserError: for a spec that is not a string, has another letter, or a length other than
            ``num_layers``.
    """
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
    """Encoder parameters stored to serve ``num_tasks`` tasks under ``regime`` (adapters and heads apart).

    Args:
        regime: the parsed regime (:func:`parse_layer_sharing`).
        layer_parameters: parameters of each layer, or one number when all layers have the same size.
        shared_other: parameters outside the layers, stored once (the embeddings).
        num_tasks: T.

    Returns:
        ``shared_other + sum_l n_l * (T if regime[l] == "I" else 1)``.
    """
    sizes = [layer_parameters] * len(regime) if isinstance(layer_parameters, int) else list(layer_parameters)
    if len(sizes) != len(regime):
        raise ValueError(f"{len(sizes)} layer sizes for a regime of {len(regime)} layers")
    return shared_other + sum(
        n * (num_tasks if c == INDIVIDUAL else 1) for n, c in zip(sizes, regime, strict=True)
    )


def group_name(tasks: Sequence[str]) -> str:
    """The name of a group of tasks: its tasks joined by ``+`` (a task alone keeps its own name)."""
    return "+".join(tasks)


def resolve_task_groups(
    groups: Sequence[Sequence[str]] | None, tasks: Sequence[str], regime: str | None = None
) -> dict[str, str]:
    """Map each task to the name of the group whose copies of the individual layers it uses.

    Args:
        groups: lists of tasks that share their individual (I) layers, e.g. ``[["sst", "qqp"]]``; a task
            in no group is a group of its own. ``None``: every task alone.
        tasks: the model's tasks.
        regime: the parsed layer-sharing regime, to refuse groups when it has no I layer (``None``: not
            checked).

    Raises:
        PalUserError: for groups without I layers, a task that is not the model's, a task in two groups,
            or an empty group.
    """
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
            out[task] = group_name(members)
    return {task: out.get(task, task) for task in tasks}
