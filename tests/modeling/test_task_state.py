"""What belongs to one task (modeling.task_state) and the pure pairing of a task's tensors with a file's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.task_io.state import (
    choose_tasks,
    encoder_and_heads,
    model_tasks,
    task_prefixes,
    task_state,
)
from pal_lightning.modeling.task_io.weights import match_task_tensors
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY


def _encoder(**options) -> MultiTaskEncoder:
    return MultiTaskEncoder.from_config(TINY, ["a", "b", "c"], size=8, num_heads=2, **options)


def test_choose_tasks_defaults_to_all_and_names_the_unknown_ones():
    assert choose_tasks(None, ["a", "b"], "here") == ["a", "b"]
    assert choose_tasks("b", ["a", "b"], "here") == ["b"]
    with pytest.raises(PalUserError, match=r"\['x'\] are not in the file\. Available: a, b"):
        choose_tasks(["a", "x"], ["a", "b"], "the file")


def test_model_tasks_lists_the_encoder_tasks_then_head_only_tasks():
    holder = nn.Module()
    holder.encoder = _encoder()
    holder.heads = nn.ModuleDict({"c": nn.Linear(2, 2), "extra": nn.Linear(2, 2)})
    encoder, heads = encoder_and_heads(holder)
    assert encoder is holder.encoder and heads is holder.heads
    assert model_tasks(encoder, heads) == ["a", "b", "c", "extra"]
    with pytest.raises(PalUserError, match="MultiTaskEncoder"):
        encoder_and_heads(nn.Linear(2, 2))


def test_a_grouped_task_owns_its_adapter_its_groups_layer_copy_and_its_head():
    encoder = _encoder(layer_sharing="SSI", task_groups=[["a", "b"]])
    heads = nn.ModuleDict({"a": nn.Linear(32, 2)})
    assert task_prefixes(encoder, "a") == ("adapters.a.", "individual.a+b.", "heads.a.")
    state = task_state(encoder, heads, "a")
    assert {k.split(".")[0] for k in state} == {"adapters", "individual", "heads"}
    assert all(k.startswith(task_prefixes(encoder, "a")) for k in state)
    # live tensors: the state shares storage with the parameters
    assert state["heads.a.weight"].data_ptr() == heads["a"].weight.data_ptr()
    # task c has no group partner and no head: its own copy, nothing of a/b
    assert {k.split(".")[1] for k in task_state(encoder, heads, "c")} == {"c"}


def test_match_task_tensors_pairs_by_key_and_reports_one_sided_keys_and_shapes():
    target = {"adapters.t.w": torch.zeros(2, 3), "adapters.t.b": torch.zeros(3), "heads.t.w": torch.zeros(4)}
    file_shapes = {
        "adapters.t.w": (2, 3),
        "adapters.t.b": (5,),  # another shape
        "adapters.t.extra": (1,),  # unexpected
        "adapters.u.w": (2, 3),  # another task: not looked at
    }
    found, problems = match_task_tensors("t", target, file_shapes, ("adapters.t.", "heads.t."), strict=True)
    assert (
        sorted(found) == ["adapters.t.b", "adapters.t.w"] and found["adapters.t.w"] is target["adapters.t.w"]
    )
    assert problems == [
        "task 't': missing ['heads.t.w'], unexpected ['adapters.t.extra']",
        "adapters.t.b: file (5,), model (3,)",
    ]
    _, lenient = match_task_tensors("t", target, file_shapes, ("adapters.t.", "heads.t."), strict=False)
    assert lenient == ["adapters.t.b: file (5,), model (3,)"]  # shapes are checked even when not strict
