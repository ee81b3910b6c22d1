"""Per-example task routing in the encoder (``MultiTaskEncoder.forward(..., tasks=...)``): every method of the
registry on every family's tiny config, with shared and frozen/individual layers, gives each row of a mixed
batch what a forward of its own task gives it; gradients reach the present tasks' modules only; the
``task=`` path is untouched; the grouping itself (:mod:`pal_lightning.modeling.families.routing`)."""

from __future__ import annotations

import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.families.routing import route_rows
from pal_lightning.modeling.methods import METHODS
from pal_lightning.testing import FAMILY_TYPES, tiny_family_config
from pal_lightning.testing.conformance import tiny_options

ROW_TASKS = ["b", "a", "c", "a", "b", "a"]
"""Interleaved, so that sorting is not the identity; ``c`` loses its adapter (its rows pass through)."""

DEVICES = [
    "cpu",
    *(["cuda"] if torch.cuda.is_available() else []),  # on a GPU machine; no skip elsewhere
]


def options(method: str) -> dict:
    """The conformance check's small options, with the method's default targets."""
    return {k: v for k, v in tiny_options(method).items() if k != "targets"}


def no_dropout(config: dict) -> dict:
    names = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout")
    return {**config, **dict.fromkeys((*names, "embedding_dropout", "mlp_dropout"), 0.0)}


def build(
    model_type: str,
    method: str,
    sharing: str | None = None,
    device: str = "cpu",
    *,
    layers: int = 2,
    c_module: bool = False,
    **kwargs,
) -> MultiTaskEncoder:
    """A tiny encoder of tasks a, b and c whose task modules (and individual copies) are moved away from
    their start, so that every task computes something else; task ``c`` has no module unless ``c_module``."""
    torch.manual_seed(0)
    model = MultiTaskEncoder.from_config(
        no_dropout(tiny_family_config(model_type, layers=layers)),
        ["a", "b", "c"],
        adapter=method,
        attn_implementation="eager",
        layer_sharing=sharing,
        **{**options(method), **kwargs},
    )
    # a zero start would make every task the shared encoder: the test would prove nothing
    with torch.no_grad():
        for p in [*model.adapters.parameters(), *model.individual.parameters()]:
            p.add_(torch.randn_like(p) * 0.1)
    if "c" in model.adapters and not c_module:
        del model.adapters["c"]
    return model.eval().to(device)


def inputs(model_type: str, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (len(ROW_TASKS), 9), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[4, 3:] = 0
    ids[mask == 0] = 1 if model_type in ("roberta", "xlm-roberta", "mpnet") else 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    return ids.to(device), mask.to(device), types.to(device)


def check_rows_as_alone(model: MultiTaskEncoder, model_type: str, device: str = "cpu") -> None:
    ids, mask, types = inputs(model_type, device)
    with torch.no_grad():
        mixed = model(ids, mask, types, tasks=ROW_TASKS)
        alone = {t: model(ids, mask, types, task=t) for t in "abc"}
    for task, out in alone.items():
        rows = [i for i, t in enumerate(ROW_TASKS) if t == task]
        torch.testing.assert_close(mixed[rows], out[rows], atol=1e-5, rtol=1e-5, msg=f"rows of {task}")
    if len(model.adapters) or model.individual_layers:  # the tasks differ: the rows above were routed
        assert (alone["a"] - alone["b"]).abs().max() > 1e-3


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_each_row_gets_its_own_tasks_output(model_type: str, method: str) -> None:
    for sharing in (None, "FI"):  # all shared; a frozen layer under an individual last layer
        check_rows_as_alone(build(model_type, method, sharing), model_type)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("model_type", "method"),
    [("bert", "pals"), ("modernbert", "lora"), ("deberta-v2", "bert_layer_on_top"), ("mpnet", "houlsby")],
)
def test_on_each_device(model_type: str, method: str, device: str) -> None:
    check_rows_as_alone(build(model_type, method, "SI", device), model_type, device)


def test_rows_without_a_mask_or_token_types_get_their_own_tasks_output() -> None:
    model = build("bert", "pals")
    ids = inputs("bert")[0]
    with torch.no_grad():
        mixed = model(ids, tasks=ROW_TASKS)
        alone = {t: model(ids, task=t) for t in "abc"}
    for task, out in alone.items():
        rows = [i for i, t in enumerate(ROW_TASKS) if t == task]
        torch.testing.assert_close(mixed[rows], out[rows], atol=1e-5, rtol=1e-5)


def test_tasks_sharing_individual_copies_run_them_on_one_slice() -> None:
    model = build("bert", "pals", "IS", task_groups=[["a", "c"]])
    routing = model.route(ROW_TASKS)
    assert routing.tasks == ("a", "c", "b")  # a and c next to each other: their group's copies run once
    assert [g for g, _, _ in routing.groups] == ["a+c", "b"] or len(routing.groups) == 2
    check_rows_as_alone(model, "bert")


@pytest.mark.parametrize(("method", "sharing"), [("pals", "IS"), ("pa_on_top", "SI")])
def test_a_group_after_the_first_rows_cuts_its_tasks_calls_at_its_own_offsets(
    method: str, sharing: str
) -> None:
    """The group b+c starts after a's rows and holds two tasks: its copies' call is renumbered from its
    first row (``narrowed``), each task's rows still getting their own modules (a block on top: in the
    copy of the last layer)."""
    model = build("bert", method, sharing, task_groups=[["b", "c"]], c_module=True)
    routing = model.route(ROW_TASKS)
    (start, stop) = next((lo, hi) for g, lo, hi in routing.groups if g == "b+c")
    assert start == ROW_TASKS.count("a") and stop == len(ROW_TASKS)  # not at row 0, two tasks inside
    check_rows_as_alone(model, "bert")


def test_only_deberta_on_query_or_key_runs_one_forward_per_task() -> None:
    assert build("deberta-v2", "lora", None).mixed_by_task  # LoRA's default targets: query, value
    assert not build("deberta-v2", "lora", None, targets=["value"]).mixed_by_task
    assert not build("deberta-v2", "pals", None).mixed_by_task
    assert not build("bert", "lora", None).mixed_by_task


@pytest.mark.parametrize("method", ["pals", "lora", "pa_on_top", "none"])
def test_gradients_reach_the_present_tasks_only(method: str) -> None:
    model = build("bert", method, "SI").train()
    ids, mask, types = inputs("bert")
    model(ids[:4], mask[:4], types[:4], tasks=["b", "a", "a", "b"]).square().sum().backward()
    for task in "ab":
        grads = [p.grad for _, p in model.task_parameters(task)]
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads), task
    assert all(p.grad is None for _, p in model.task_parameters("c"))


def test_checkpointed_mixed_forward_has_the_same_gradients() -> None:
    grads = []
    for checkpointing in (False, True):
        model = build("bert", "pals", "SI").train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        ids, mask, types = inputs("bert")
        model(ids, mask, types, tasks=ROW_TASKS).square().sum().backward()
        grads.append([p.grad for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1])
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(plain, recomputed)


def test_the_single_task_path_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    model = build("bert", "pals", "SI")
    ids, mask, types = inputs("bert")
    with torch.no_grad():
        routed_once = model(ids, mask, types, tasks=["a"] * len(ROW_TASKS))
        monkeypatch.setattr(model, "route", lambda *a, **k: pytest.fail("task= must not route"))
        monkeypatch.setattr(
            model, "mixed_task_call", lambda *a, **k: pytest.fail("task= makes no mixed call")
        )
        single = model(ids, mask, types, task="a")
    assert torch.equal(single, routed_once)  # one task present: the single-task path, bit for bit


def test_indices_names_and_a_routing_are_the_same_request() -> None:
    model = build("bert", "low_rank", None)
    ids, mask, types = inputs("bert")
    indices = torch.tensor([model.task_names.index(t) for t in ROW_TASKS])
    with torch.no_grad():
        by_names = model(ids, mask, types, tasks=ROW_TASKS)
        by_indices = model(ids, mask, types, tasks=indices)
        by_routing = model(ids, mask, types, tasks=model.route(indices))
    assert torch.equal(by_names, by_indices) and torch.equal(by_names, by_routing)


def test_grouping_sorts_once_and_knows_each_tasks_rows() -> None:
    routing = route_rows(ROW_TASKS, ["a", "b", "c"])
    assert routing.tasks == ("a", "b", "c") and routing.bounds == (0, 3, 5, 6)
    assert routing.rows("a").tolist() == [1, 3, 5] and routing.rows("c").tolist() == [2]
    rows = torch.arange(6) * 10
    assert routing.sort(rows).tolist() == [10, 30, 50, 0, 40, 20]
    assert torch.equal(routing.unsort(routing.sort(rows)), rows)
    grouped = route_rows(["a", "a", "c"], ["a", "b", "c"])
    assert grouped.order is None and grouped.tasks == ("a", "c")  # already grouped: nothing to sort
    assert grouped.rows("c").tolist() == [2] and grouped.rows("a").tolist() == [0, 1]
    later = route_rows(["a", "c", "b"], ["a", "b", "c"])  # out of order after a first row that is in place
    assert later.order is not None and later.sort(torch.arange(3)).tolist() == [0, 2, 1]
    with pytest.raises(PalUserError, match="no row"):
        grouped.rows("b")


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        (["a", "zz"], "Unknown task"),
        (torch.tensor([0, 3]), "out of range"),
        (torch.tensor([0.0, 1.0]), "integer tensor"),
        ([], "at least one row"),
    ],
)
def test_bad_tasks_are_refused(tasks, message: str) -> None:
    with pytest.raises(PalUserError, match=message):
        route_rows(tasks, ["a", "b", "c"])


def test_forward_needs_one_task_per_row_and_one_way_of_saying_it() -> None:
    model = build("bert", "pals", None)
    ids, mask, types = inputs("bert")
    with pytest.raises(PalUserError, match="one per row"):
        model(ids, mask, types)
    with pytest.raises(PalUserError, match="not both"):
        model(ids, mask, types, task="a", tasks=ROW_TASKS)
    with pytest.raises(PalUserError, match="one task per row"):
        model(ids, mask, types, tasks=ROW_TASKS[:3])
