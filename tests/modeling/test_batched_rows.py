"""Every present task's module at once in a mixed batch (``AdapterMethod.batch_rows``,
:mod:`pal_lightning.modeling.methods.batched`, ``encoder.mixed_rows = "gather"``): the batched call equals
the hooks' loop over the tasks on every family's tiny config (padding, a task without a module, bf16
autocast), gradients reach the same per-task Parameters, the state keeps its keys, and the loop stays
where a method or the layers need it, and on the CPU by default (``"auto"``)."""

from __future__ import annotations

import pytest
import torch
from test_mixed_routing import ROW_TASKS, build, inputs
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.methods import METHODS, AdapterMethod
from pal_lightning.modeling.methods.batched import RowWeights, stack_linears
from pal_lightning.testing import FAMILY_TYPES

BATCHED = [name for name, m in METHODS.items() if type(m).batch_rows is not AdapterMethod.batch_rows]
"""The registry's methods that run a mixed batch at once (the PAL family, LoRA, bottleneck adapters)."""


def both_ways(model: MultiTaskEncoder, *args: torch.Tensor, tasks: list[str]) -> tuple[torch.Tensor, ...]:
    """The mixed forward batched, then looped over the tasks."""
    out = []
    for way in ("gather", "loop"):
        model.mixed_rows = way
        out.append(model(*args, tasks=tasks))
    return tuple(out)


def is_batched(model: MultiTaskEncoder, tasks: list[str]) -> bool:
    """Whether the mixed call of ``tasks`` holds one module for all rows (no per-task segments), as
    ``model.mixed_rows`` (default: ``"gather"``) says."""
    ids, mask, _ = inputs("bert")
    call = model.mixed_task_call(model.route(tasks), mask[: len(tasks)])
    return call is not None and not call.segments


def test_the_registry_batches_the_methods_in_layers() -> None:
    assert set(BATCHED) == {
        "pals",
        "pals_no_sharing",
        "low_rank",
        "pff",
        "lora",
        "houlsby",
        "pfeiffer",
        "bottleneck",
    }


@pytest.mark.parametrize("method", BATCHED)
@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_batched_rows_equal_the_loop(model_type: str, method: str) -> None:
    model = build(model_type, method, None)  # task c has no module: its rows get a zero term
    if model.mixed_by_task:  # DeBERTa's query/key sites: one forward per task, nothing to batch
        return
    model.mixed_rows = "gather"
    assert is_batched(model, ROW_TASKS)
    ids, mask, types = inputs(model_type)
    with torch.no_grad():
        batched, looped = both_ways(model, ids, mask, types, tasks=ROW_TASKS)
        alone = model(ids, mask, types, task="a")
    torch.testing.assert_close(batched, looped, atol=1e-5, rtol=0)
    rows = [i for i, t in enumerate(ROW_TASKS) if t == "a"]
    torch.testing.assert_close(batched[rows], alone[rows], atol=1e-5, rtol=0)


def test_batched_rows_keep_the_gelu_after_the_up_projection() -> None:
    """``activation: gelu`` (GELU on V^D's output): the batched call applies it as each task's module does."""
    ids, mask, types = inputs("bert")
    out = {}
    for activation in ("none", "gelu"):
        model = build("bert", "pals", None, activation=activation)
        with torch.no_grad():
            batched, looped = both_ways(model, ids, mask, types, tasks=ROW_TASKS)
        torch.testing.assert_close(batched, looped, atol=1e-5, rtol=0)
        out[activation] = batched
    assert (out["gelu"] - out["none"]).abs().max() > 1e-3  # the activation acts: the comparison can fail


@pytest.mark.parametrize("method", ["pals", "lora", "houlsby"])
def test_gradients_reach_the_same_parameters_as_the_loop(method: str) -> None:
    grads = []
    for way in ("gather", "loop"):
        model = build("bert", method, None).train()
        model.mixed_rows = way
        model.gradient_checkpointing_enable()  # the recomputation runs the batched products again
        ids, mask, types = inputs("bert")
        model(ids, mask, types, tasks=ROW_TASKS).square().sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert any(n.startswith("adapters.a.") for n in grads[0]) and any(
        n.startswith("adapters.b.") for n in grads[0]
    )
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=1e-5, rtol=1e-4, msg=name)


def test_under_bf16_autocast_batched_and_looped_agree() -> None:
    model = build("bert", "pals", None)
    ids, mask, types = inputs("bert")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        batched, looped = both_ways(model, ids, mask, types, tasks=ROW_TASKS)
    torch.testing.assert_close(batched.float(), looped.float(), atol=2e-2, rtol=0)


def test_the_state_keeps_its_keys_and_changed_weights_are_seen() -> None:
    model = build("bert", "lora", None)
    keys = list(model.state_dict())
    ids, mask, types = inputs("bert")
    model.mixed_rows = "gather"
    with torch.no_grad():
        before = model(ids, mask, types, tasks=ROW_TASKS)
        assert list(model.state_dict()) == keys  # the batched module is no submodule
        for p in model.adapters["b"].parameters():
            p.mul_(2.0)  # a weight changed in place between forwards (an optimizer step, a load)
        after, looped = both_ways(model, ids, mask, types, tasks=ROW_TASKS)
    rows = [i for i, t in enumerate(ROW_TASKS) if t == "b"]
    assert (after[rows] - before[rows]).abs().max() > 1e-3
    torch.testing.assert_close(after, looped, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("method", "sharing"), [("pa_on_top", None), ("bert_layer_on_top", None), ("none", "SI"), ("pals", "SI")]
)
def test_the_loop_stays_where_it_is_needed(method: str, sharing: str | None) -> None:
    # a block on top and no module have no batch_rows; individual layers run their copies per group
    model = build("bert", method, sharing)
    model.mixed_rows = "gather"
    assert not is_batched(model, ROW_TASKS)


def test_auto_loops_on_the_cpu_and_the_switch_chooses() -> None:
    model = build("bert", "pals", None)
    assert model.mixed_rows == "auto" and not is_batched(model, ROW_TASKS)  # the CPU: the loop
    model.mixed_rows = "gather"
    assert is_batched(model, ROW_TASKS)
    model.mixed_rows = "loop"
    assert not is_batched(model, ROW_TASKS)
    with pytest.raises(PalUserError, match="mixed_rows must be 'auto', 'gather' or 'loop', got 'Gather'"):
        model.mixed_rows = "Gather"  # type: ignore[assignment]
    assert model.mixed_rows == "loop"  # refused where it was set: the last good value stays


def test_row_weights_gather_each_rows_task_and_stack_zeros_for_none() -> None:
    torch.manual_seed(0)
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)
    weight, bias = stack_linears([first, None, second])
    assert weight.shape == (3, 2, 3) and bias is not None and bias.shape == (3, 2)
    assert not weight[1].any() and not bias[1].any()
    x = torch.randn(4, 5, 3)
    rows = RowWeights(torch.tensor([0, 0, 1, 2]))
    out = rows.linear([first, None, second], x)
    with torch.no_grad():
        torch.testing.assert_close(out[:2], first(x[:2]))
        assert not out[2].any()
        torch.testing.assert_close(out[3], second(x[3]))
    with pytest.raises(RuntimeError, match="rows first"):
        rows.check(torch.randn(20, 3), "layer 0")
    with pytest.raises(ValueError, match="every task is None"):
        stack_linears([None, None])
