"""Per-example task routing: a mixed batch's rows sorted by task once (stable), put back once at the end
(docs/design.md §2, "Mixed-task batches")."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from pal_lightning.core.errors import PalUserError

#: Each row's task: a ``LongTensor[B]`` of indices into the encoder's tasks, or one name per row.
RowTasks = torch.Tensor | Sequence[str]


@dataclass(frozen=True)
class TaskRouting:
    """The rows of one batch grouped by task (:func:`route_rows`); :meth:`rows` gives a task's rows."""

    tasks: tuple[str, ...]
    """The tasks present, in the order their rows are sorted."""
    bounds: tuple[int, ...]
    """``len(tasks) + 1`` offsets: the sorted rows ``bounds[k]:bounds[k + 1]`` are ``tasks[k]``'s."""
    order: torch.Tensor | None
    """``LongTensor[B]``: sorted row ``r`` is input row ``order[r]``; ``None`` when already grouped."""
    groups: tuple[tuple[str, int, int], ...] = ()
    """``(group, start, stop)`` of each group sharing individual layers, over the sorted rows."""
    device: torch.device | None = None
    """Where :meth:`rows` puts its indices (the inputs' device)."""

    @property
    def size(self) -> int:
        """B, the number of rows."""
        return self.bounds[-1]

    def slices(self) -> Iterator[tuple[str, int, int]]:
        """``(task, start, stop)`` of each task present, over the sorted rows."""
        for k, task in enumerate(self.tasks):
            yield task, self.bounds[k], self.bounds[k + 1]

    def rows(self, task: str) -> torch.Tensor:
        """The input-order indices of ``task``'s rows (ascending). Raises ``PalUserError`` for a task with no
        row in the batch."""
        for name, start, stop in self.slices():
            if name == task:
                if self.order is None:
                    return torch.arange(start, stop, device=self.device)
                return self.order[start:stop]
        raise PalUserError(f"Task {task!r} has no row in this batch (present: {', '.join(self.tasks)}).")

    def sort(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` (input order) in the sorted order."""
        return rows if self.order is None else rows.index_select(0, self.order.to(rows.device))

    def unsort(self, rows: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`sort`."""
        if self.order is None:
            return rows
        order = self.order.to(rows.device)
        return torch.empty_like(rows).index_copy_(0, order, rows)


def task_indices(tasks: RowTasks, names: Sequence[str]) -> torch.Tensor:
    """Each row's task as an index into ``names``, on the host. Raises ``PalUserError`` for an empty batch, a
    name that is not one of ``names`` or an index out of range."""
    if isinstance(tasks, torch.Tensor):
        if tasks.dim() != 1 or tasks.dtype.is_floating_point or tasks.dtype == torch.bool:
            raise PalUserError(
                f"tasks must be a 1-D integer tensor (one task index per row), got {tasks.dtype} of shape "
                f"{tuple(tasks.shape)}. Pass torch.tensor([...], dtype=torch.long) or a list of task names."
            )
        indices = tasks.detach().to("cpu", torch.long)  # one copy to the host when on a device
        bad = [int(i) for i in indices if not 0 <= int(i) < len(names)]
        if bad:
            raise PalUserError(
                f"Task indices {sorted(set(bad))} are out of range: this model's tasks are "
                f"{', '.join(f'{i}={n}' for i, n in enumerate(names))}."
            )
    else:
        position = {name: i for i, name in enumerate(names)}
        unknown = sorted({str(t) for t in tasks if t not in position})
        if unknown:
            raise PalUserError(
                f"Unknown task(s) {unknown} in tasks: this model's tasks are {', '.join(names)}. "
                "Name each row's task among them."
            )
        indices = torch.tensor([position[t] for t in tasks], dtype=torch.long)
    if not len(indices):
        raise PalUserError("A mixed batch needs at least one row: tasks is empty.")
    return indices


def route_rows(
    tasks: RowTasks,
    names: Sequence[str],
    group_of: Mapping[str, str] | None = None,
    device: torch.device | str | None = None,
) -> TaskRouting:
    """Group the rows of a batch by task with one stable sort; ``group_of`` (task -> group of I layers) keeps
    a group's tasks together; ``device``: where the order lives. Raises ``PalUserError`` for an unknown task
    or index, or an empty batch."""
    indices = task_indices(tasks, names)
    # tasks of one group next to each other, groups in the order of their first task
    group = [(group_of or {}).get(name, name) for name in names]
    sequence = sorted(range(len(names)), key=lambda i: (group.index(group[i]), i))
    rank = torch.empty(len(names), dtype=torch.long)
    rank[torch.tensor(sequence)] = torch.arange(len(names))
    keys = rank[indices]
    counts = torch.bincount(keys, minlength=len(names)).tolist()
    present = [(names[sequence[k]], count) for k, count in enumerate(counts) if count]
    bounds = [0, *itertools.accumulate(count for _, count in present)]
    order: torch.Tensor | None = None
    if bool((keys[1:] < keys[:-1]).any()):
        order = torch.sort(keys, stable=True).indices.to(device)
    groups: list[tuple[str, int, int]] = []
    if group_of:
        for (task, _), start, stop in zip(present, bounds[:-1], bounds[1:], strict=True):
            name = group_of[task]
            if groups and groups[-1][0] == name:
                groups[-1] = (name, groups[-1][1], stop)
            else:
                groups.append((name, start, stop))
    where = None if device is None else torch.device(device)
    return TaskRouting(tuple(t for t, _ in present), tuple(bounds), order, tuple(groups), where)
