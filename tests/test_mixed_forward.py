"""Per-example task routing through the module: ``MultiTaskModule.forward_mixed`` runs one batch of rows of
several tasks (single sentences, cross pairs, siamese pairs) in one encoder pass and gives each row what its
own one-task batch gives it; ``mixed_losses`` gives each task's loss, and its gradients reach the present
tasks' modules and heads only; ``mix_batches`` builds the batch from one-task batches."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule  # noqa: E402
from pal_lightning.core.batch import LABELS, TASK, TASKS, mix_batches  # noqa: E402
from pal_lightning.core.errors import PalUserError  # noqa: E402
from pal_lightning.testing import tiny_bert_config, without_dropout  # noqa: E402

TASK_LIST = ("sst", "qqp", "sts", "glue_rte")
"""``glue_rte`` never has a row: its modules and head must get no gradient."""
SIZES = {"pals": {"size": 8, "num_heads": 2}, "lora": {"size": 4}, "bert_layer_on_top": {}}
DEVICES = [
    "cpu",
    *(["cuda"] if torch.cuda.is_available() else []),  # on a GPU machine; no skip elsewhere
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, which contend on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def module_of(method: str, sharing: str | None = "SI") -> MultiTaskModule:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=TASK_LIST,
        bert_config=without_dropout(tiny_bert_config(vocab_size=100, max_positions=64)),
        adapter={"method": method, **SIZES[method]},
        layer_sharing=sharing,
        pair_encoding={"sts": "siamese", "default": "cross"},
        dropout=0.0,
    )
    with torch.no_grad():  # moved from the zero start, so that each task computes something else
        for p in [*module.encoder.adapters.parameters(), *module.encoder.individual.parameters()]:
            p.add_(torch.randn_like(p) * 0.1)
    return module.eval()


def sentences(rows: int, length: int, seed: int, key: str = "") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 100, (rows, length), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, length // 2 :] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    if not key:
        types[:, length // 2 :] = 1  # a cross pair's second segment (harmless for single sentences)
    return {f"input_ids{key}": ids, f"attention_mask{key}": mask, f"token_type_ids{key}": types}


def one_task_batches() -> list[dict[str, Any]]:
    """What the data module makes: a batch of SST sentences, of cross Quora pairs, of siamese STS pairs."""
    return [
        {TASK: "sst", **sentences(3, 7, 0), LABELS: torch.tensor([0, 4, 2])},
        {TASK: "qqp", **sentences(2, 11, 1), LABELS: torch.tensor([1, 0])},
        {
            TASK: "sts",
            **sentences(3, 5, 2, "_a"),
            **sentences(3, 8, 3, "_b"),
            LABELS: torch.tensor([0.5, 4.0, 2.5]),
        },
    ]


def interleaved(batch: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor]:
    """``batch`` with its rows in another order (so that routing must sort), and that order."""
    order = torch.tensor([5, 0, 3, 7, 1, 6, 2, 4])
    out = {k: v[order] if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out[TASKS] = [batch[TASKS][i] for i in order.tolist()]
    return out, order


def one_task_outputs(module: MultiTaskModule, device: str = "cpu") -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {b[TASK]: module(to(b, device)) for b in one_task_batches()}


def to(batch: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("method", list(SIZES))
def test_each_row_gets_its_own_tasks_head_output(method: str, device: str) -> None:
    module = module_of(method).to(device)
    alone = one_task_outputs(module, device)
    mixed, order = interleaved(mix_batches(one_task_batches()))
    with torch.no_grad():
        outputs = module.forward_mixed(to(mixed, device))
    assert set(outputs) == {"sst", "qqp", "sts"}
    starts = {"sst": 0, "qqp": 3, "sts": 5}  # each task's first row before interleaving
    for task, (rows, output) in outputs.items():
        assert rows.tolist() == sorted(rows.tolist()) and all(mixed[TASKS][r] == task for r in rows.tolist())
        expected = alone[task][order[rows.cpu()] - starts[task]]  # the same examples, by their original row
        torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5, msg=task)


def test_losses_and_gradients_reach_the_present_tasks_only() -> None:
    module = module_of("pals").train()
    mixed, _ = interleaved(mix_batches(one_task_batches()))
    losses = module.mixed_losses(mixed)
    for batch in one_task_batches():  # each task's loss is its one-task batch's loss
        torch.testing.assert_close(losses[batch[TASK]], module.batch_loss(batch), atol=1e-5, rtol=1e-5)
    module.zero_grad()
    sum(losses.values()).backward()
    for task in ("sst", "qqp", "sts"):
        params = [*module.encoder.task_parameters(task), *module.heads[task].named_parameters()]
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for _, p in params), task
    absent = [*module.encoder.task_parameters("glue_rte"), *module.heads["glue_rte"].named_parameters()]
    assert all(p.grad is None for _, p in absent)


def test_task_indices_name_rows_too() -> None:
    module = module_of("lora", sharing=None)
    mixed = mix_batches(one_task_batches())
    by_index = {**mixed, TASKS: torch.tensor([TASK_LIST.index(t) for t in mixed[TASKS]])}
    with torch.no_grad():
        named, indexed = module.forward_mixed(mixed), module.forward_mixed(by_index)
    for task in named:
        assert torch.equal(named[task].output, indexed[task].output)


def test_mix_batches_keeps_every_row() -> None:
    batches = one_task_batches()
    mixed = mix_batches(batches)
    assert mixed[TASKS] == ["sst"] * 3 + ["qqp"] * 2 + ["sts"] * 3
    assert mixed["input_ids"].shape == (8, 11) and mixed["input_ids_b"].shape == (8, 8)
    assert torch.equal(mixed["input_ids"][5:, :5], batches[2]["input_ids_a"])
    assert not mixed["attention_mask_b"][:5].any()  # rows without a second sentence: padding
    assert mixed[LABELS].dtype == torch.float32 and mixed[LABELS][:3].tolist() == [0.0, 4.0, 2.0]


def test_bad_mixed_batches_are_refused() -> None:
    module = module_of("pals", sharing=None)
    mixed = mix_batches(one_task_batches())
    without_second = {k: v for k, v in mixed.items() if not k.endswith("_b")}
    with pytest.raises(PalUserError, match="siamese"):
        module.forward_mixed(without_second)
    with pytest.raises(PalUserError, match="out of range"):
        module.forward_mixed({**mixed, TASKS: torch.full((8,), 9)})
    with pytest.raises(PalUserError, match="nli"):
        module.forward_mixed({**mixed, TASKS: ["nli"] * 8})
    with pytest.raises(PalUserError, match="labels"):
        module.mixed_losses({k: v for k, v in mixed.items() if k != LABELS})
