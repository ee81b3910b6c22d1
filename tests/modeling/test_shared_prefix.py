"""Several tasks of one input (``MultiTaskEncoder.shared_prefix``): rows repeating an input run the layers
below every task's module once and branch where the modules begin; the result is the plain mixed forward's
within 1e-5 on every family's tiny config and for every registered method, with F/S/I layer sharing; the
first task layer is found per placement and sharing regime, 0 (the plain path) when in doubt; modules from
layer 0, training and gradients take the plain path (counted layer calls)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_mixed_routing import build as moved_encoder

from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.modeling.families.prefix import distinct_rows, first_task_layer
from pal_lightning.modeling.methods import METHODS, get_method
from pal_lightning.modeling.methods.where import Placement
from pal_lightning.testing import FAMILY_TYPES

#: Rows of three distinct inputs (0 and 1 padded), each asked of several tasks, interleaved.
PICK = [0, 0, 0, 1, 2, 1, 0, 2]
ROW_TASKS = ["a", "b", "c", "a", "b", "c", "c", "a"]


def build(model_type: str, method: str, sharing: str | None = None, **options) -> MultiTaskEncoder:
    """Three layers, tasks a, b and c with moved modules (:func:`test_mixed_routing.build`)."""
    return moved_encoder(model_type, method, sharing, layers=3, c_module=True, **options)


def inputs(model_type: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 100, (3, 9), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 1 if model_type in ("roberta", "xlm-roberta", "mpnet") else 0
    return ids[PICK], mask[PICK], torch.zeros_like(ids)[PICK]


def rows_per_layer(model: MultiTaskEncoder) -> list[list[int]]:
    """Per layer (shared ones and I-layer slots), the rows of each call it gets from now on."""
    seen: list[list[int]] = [[] for _ in range(model.num_layers)]
    for i, layer in enumerate(model.family.layer_list(model.backbone)):

        def count(module, args, kwargs, i=i):
            seen[i].append((args[0] if args else next(iter(kwargs.values()))).shape[0])

        layer.register_forward_pre_hook(count, with_kwargs=True)
    return seen


def check_once_below(model: MultiTaskEncoder, model_type: str, first: int, below: int | None = None) -> None:
    """The shared prefix's forward equals the plain one, the first task layer is ``first`` and the layers
    below ``below`` (default ``first``; one more where the rows branch at its join norm) ran on 3 rows."""
    assert first_task_layer(model) == first
    below = first if below is None else below
    ids, mask, types = inputs(model_type)
    with torch.no_grad():
        plain = model(ids, mask, types, tasks=ROW_TASKS)
        one_task = model(ids, mask, types, task="b")
        seen = rows_per_layer(model)
        with model.shared_prefix():
            once = model(ids, mask, types, tasks=ROW_TASKS)
            once_one_task = model(ids, mask, types, task="b")
    torch.testing.assert_close(once, plain, atol=1e-5, rtol=0)
    torch.testing.assert_close(once_one_task, one_task, atol=1e-5, rtol=0)
    assert seen == [[3, 3] if i < below else [len(PICK)] * 2 for i in range(model.num_layers)]


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_every_family_top_layer_pals_with_individual_layers_and_heads_only(model_type: str) -> None:
    # PALs in the top layer, the bottom one frozen: a post-LN layer's attention and FFN once too (the rows
    # branch at its join norm), a pre-LN layer's (ModernBERT: the term joins its output) per row
    joined = 2 if model_type == "modernbert" else 3
    check_once_below(build(model_type, "pals", "FSS", num_layers=1, placement="top"), model_type, 2, joined)
    # the top layer also individual (I): its copies run per row
    check_once_below(build(model_type, "pals", "SSI", num_layers=1, placement="top"), model_type, 2)
    # heads only: the whole encoder once per distinct input
    check_once_below(build(model_type, "none"), model_type, 3)


@pytest.mark.parametrize("mixed_rows", ["loop", "gather"])
@pytest.mark.parametrize("method", sorted(m for m in METHODS if m != "none"))
def test_every_method_in_the_top_layer(method: str, mixed_rows: str) -> None:
    slot = get_method(method).where.slot
    options = {} if slot == "top" else {"num_layers": 1, "placement": "top"}
    model = build("bert", method, **options)
    model.mixed_rows = mixed_rows  # the tasks' modules looped, or gathered per row (as off the CPU)
    # a block on top reads the last layer's arguments: that layer runs per row; beside it (PALs), BERT's
    # top layer branches at its join norm
    check_once_below(model, "bert", 2, 3 if slot == "beside" else 2)


def test_a_layer_whose_output_is_not_its_join_norms_branches_at_its_entry() -> None:
    model = build("bert", "pals", num_layers=1, placement="top")
    top = model.family.layer_list(model.backbone)[2]
    top.register_forward_hook(lambda module, args, output: output * 1.0)  # a new tensor: not the norm's
    ids, mask, types = inputs("bert")
    with torch.no_grad():
        plain = model(ids, mask, types, tasks=ROW_TASKS)
        seen = rows_per_layer(model)
        with model.shared_prefix():
            once = model(ids, mask, types, tasks=ROW_TASKS)
    torch.testing.assert_close(once, plain, atol=1e-5, rtol=0)
    assert seen == [[3], [3], [3, len(PICK)]]  # pass 1 through it, checked; pass 2 from its entry


def test_lora_and_bottleneck_in_two_top_layers_below_individual_layers() -> None:
    check_once_below(build("bert", "lora", "SSI", num_layers=2, placement="top"), "bert", 1)
    check_once_below(build("bert", "houlsby", "SSI", num_layers=1, placement="top"), "bert", 2)
    check_once_below(build("bert", "none", "SII"), "bert", 1)


def test_modules_from_layer_0_training_and_gradients_take_the_plain_path() -> None:
    model = build("bert", "pals", placement="all")
    assert first_task_layer(model) == 0
    ids, mask, types = inputs("bert")
    seen = rows_per_layer(model)
    with model.shared_prefix(), torch.no_grad():
        model(ids, mask, types, tasks=ROW_TASKS)
    assert seen == [[len(PICK)]] * 3
    later = build("bert", "pals", num_layers=1, placement="top")
    seen = rows_per_layer(later)
    with later.shared_prefix():
        later(ids, mask, types, tasks=ROW_TASKS)  # gradients on
        with torch.no_grad():
            later.train()(ids, mask, types, tasks=ROW_TASKS)
    assert seen == [[len(PICK)] * 2] * 3
    assert later._prefix_once is False  # the context restores the plain path


def test_the_first_task_layer_is_conservative() -> None:
    model = build("bert", "pals", "SIS", num_layers=1, placement="top")
    assert first_task_layer(model) == 1  # the individual layer, below the PALs
    # a placement the library does not know (a user's): no shared prefix
    model.adapter_config = SimpleNamespace(adapter_method=SimpleNamespace(where=Placement()))
    assert first_task_layer(model) == 0
    # a module listing a layer below the config's
    lora = build("bert", "lora", num_layers=1, placement="top")
    assert first_task_layer(lora) == 2
    lora.adapters["a"].layers = (0, 2)
    assert first_task_layer(lora) == 0
    # DeBERTa with LoRA on the query and key (their Linears project the relative embeddings too)
    deberta = build("deberta-v2", "lora", num_layers=1, placement="top", targets=["query", "value"])
    assert deberta.mixed_by_task and first_task_layer(deberta) == 0


def test_distinct_rows_compare_ids_mask_and_token_types() -> None:
    ids = torch.tensor([[5, 6, 0], [5, 6, 0], [5, 6, 0], [5, 6, 0], [7, 8, 9]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]])
    types = torch.tensor([[0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]])
    first, inverse = distinct_rows(ids, mask, types)
    assert len(first) == 4 and inverse[0] == inverse[1]
    assert len(set(inverse.tolist())) == 4 and sorted(first.tolist()) == [0, 2, 3, 4]
    assert all(int(first[inverse[r]]) <= r for r in range(5))  # each distinct input's first row
    assert distinct_rows(ids[2:], mask[2:], types[2:]) is None  # nothing repeats
    assert len(distinct_rows(ids, None, None)[0]) == 2


def test_the_same_ids_under_another_mask_or_other_token_types_are_another_input() -> None:
    model = build("bert", "pals", "FSS", num_layers=1, placement="top")
    assert model.takes_token_types
    ids = torch.randint(3, 100, (1, 9), generator=torch.Generator().manual_seed(2)).repeat(3, 1)
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    mask[1, 6:] = 0  # row 1: row 0's ids, padded
    types[2, 5:] = 1  # row 2: row 0's ids, a pair
    with torch.no_grad():
        plain = model(ids, mask, types, tasks=["a", "b", "c"])
        with model.shared_prefix():
            once = model(ids, mask, types, tasks=["a", "b", "c"])
    torch.testing.assert_close(once, plain, atol=1e-5, rtol=0)
