"""SimCSE inside MultiTaskModule: dropout views, the loss of a batch, training, weight 0, logging, errors."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import pool
from pal_lightning.modeling.simcse import SimCSEConfig
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import quiet_trainer
from pal_lightning.testing.batches import TinyData, make_batch, tiny_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _hand_loss(
    z1: torch.Tensor, z2: torch.Tensor, tau: float, skip: set[tuple[int, int]] = frozenset()
) -> float:
    """InfoNCE written out row by row (independent of simcse_loss); ``skip`` holds (anchor, candidate)
    pairs left out of the denominator."""
    total = 0.0
    for i in range(len(z1)):
        sims = {
            j: float(torch.dot(z1[i], z2[j]) / (z1[i].norm() * z2[j].norm())) / tau
            for j in range(len(z2))
            if (i, j) not in skip
        }
        total += -(sims[i] - math.log(sum(math.exp(s) for s in sims.values())))
    return total / len(z1)


def _pair_skips(ids: torch.Tensor, mask: torch.Tensor) -> set[tuple[int, int]]:
    """The (row, column) pairs that are no negatives: a pair's other sentence (rows ``n/2`` apart) and
    identical sentences."""
    n = len(ids)
    tokens = [ids[r][mask[r].bool()].tolist() for r in range(n)]
    return {
        (i, j)
        for i in range(n)
        for j in range(n)
        if i != j and (abs(i - j) == n // 2 or tokens[i] == tokens[j])
    }


def test_two_dropout_passes_differ_and_agree_in_eval() -> None:
    module = tiny_module()  # TINY_BERT keeps BERT's dropout 0.1
    batch = make_batch("sst")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    module.train()
    first, second = (pool(module.encoder(ids, mask, task="sst"), mask) for _ in range(2))
    assert not torch.allclose(first, second)
    module.eval()
    first, second = (pool(module.encoder(ids, mask, task="sst"), mask) for _ in range(2))
    assert torch.equal(first, second)


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])  # single, cross pair, siamese pair
def test_unsupervised_loss_equals_hand_computation(task: str) -> None:
    module = tiny_module(simcse=SimCSEConfig(temperature=0.1))
    module.train()
    batch = make_batch(task)
    torch.manual_seed(3)
    got = module.simcse_loss(batch)
    # the same two dropout views by hand: sentences (both sides of a pair) stacked twice, one pass
    if task == "sst":
        ids, mask = batch["input_ids"], batch["attention_mask"]
    elif task == "sts":  # siamese in the tiny module
        length = max(batch["input_ids_a"].shape[1], batch["input_ids_b"].shape[1])
        pad = lambda x: torch.nn.functional.pad(x, (0, length - x.shape[1]))  # noqa: E731
        ids = torch.cat([pad(batch["input_ids_a"]), pad(batch["input_ids_b"])])
        mask = torch.cat([pad(batch["attention_mask_a"]), pad(batch["attention_mask_b"])])
    else:  # cross: rebuild [CLS] a [SEP] and [CLS] b [SEP] row by row from the segment ids
        rows_a, rows_b = [], []
        for r in range(len(batch["ids"])):
            keep = batch["attention_mask"][r].bool()
            toks, types = batch["input_ids"][r][keep].tolist(), batch["token_type_ids"][r][keep].tolist()
            rows_a.append([t for t, s in zip(toks, types, strict=True) if s == 0])
            rows_b.append([toks[0]] + [t for t, s in zip(toks, types, strict=True) if s == 1])
        rows = rows_a + rows_b
        width = max(len(x) for x in rows)
        ids = torch.tensor([x + [0] * (width - len(x)) for x in rows])
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in rows])
    both_ids, both_mask = torch.cat([ids, ids]), torch.cat([mask, mask])
    torch.manual_seed(3)
    pooled = pool(module.encoder(both_ids, both_mask, torch.zeros_like(both_ids), task=task), both_mask)
    z1, z2 = pooled.chunk(2)
    assert not torch.allclose(z1, z2)  # two dropout masks
    skip: set[tuple[int, int]] = set()
    if task != "sst":  # a pair's other sentence, and identical sentences, are not negatives
        skip = _pair_skips(ids, mask)
        assert len(skip) >= len(ids)
    expected = _hand_loss(z1.detach(), z2.detach(), 0.1, skip)
    assert float(got.detach()) == pytest.approx(expected, rel=1e-4)
    if task != "sst":  # the masked partners matter: the plain loss differs
        assert abs(_hand_loss(z1.detach(), z2.detach(), 0.1) - expected) > 1e-4


def test_supervised_loss_uses_labelled_pairs() -> None:
    module = tiny_module(
        pair_encoding={"default": "siamese"},
        simcse=SimCSEConfig(mode="sup", tasks=["qqp"], hard_negative_label=0, temperature=0.5),
    )
    module.eval()  # no dropout: the embeddings are a function of the sentences alone
    batch = make_batch("qqp", size=8, seed=1)
    batch.update(
        {f"{k}_{side}": batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") for side in "ab"}
    )
    labels = batch["labels"]
    assert 0 < int(labels.sum()) < 8
    got = module.simcse_loss(batch)
    u, v = module.encode(batch)
    pos, neg = labels == 1, labels == 0
    cands = torch.cat([v[pos], v[neg]])
    # anchor i's positive is candidate i (the positives come first, in order); then the hard negatives
    hand = _hand_loss(u[pos].detach(), cands.detach(), 0.5)
    assert float(got) == pytest.approx(hand, rel=1e-4)


def test_simcse_alone_lowers_its_loss() -> None:
    torch.manual_seed(0)
    module = tiny_module(simcse=SimCSEConfig())
    module.train()
    batch = make_batch("sst", size=16, seed=4)
    optimizer = torch.optim.AdamW(module.encoder.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = module.simcse_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def _fit(**kw: Any) -> tuple[MultiTaskModule, pl.Trainer, int]:
    """A 6-step fit, and the rows its encoder was called on."""
    rows: list[int] = []
    pl.seed_everything(0, verbose=False)
    module = tiny_module(optim={"lr": 3e-3, "head_lr": 3e-2}, **kw)
    forward = module.encoder.forward

    def counting(input_ids, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        rows.append(int(input_ids.shape[0]))
        return forward(input_ids, *args, **kw)

    module.encoder.forward = counting  # type: ignore[method-assign]
    data = TinyData()
    data.steps = 3  # one batch of each task
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    return module, trainer, sum(rows)


def test_weight_zero_is_bit_identical_to_no_simcse_and_the_forward_is_the_first_view() -> None:
    """Weight 0 trains as no SimCSE; a weight moves training, and SimCSE adds one pass over the sentences:
    rows encoded per fit equal the hand count."""
    plain, _, plain_rows = _fit()
    zero, _, _ = _fit(simcse=SimCSEConfig(weight=0.0))
    with_simcse, trainer, simcse_rows = _fit(simcse=SimCSEConfig(weight=0.5))
    a, b, c = plain.state_dict(), zero.state_dict(), with_simcse.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if k.startswith("encoder.backbone."))
    metrics = trainer.callback_metrics
    assert "train/simcse_loss" in metrics and float(metrics["train/simcse_loss"]) > 0
    # 3 batches of 8: sst 8 (task) + 8 (view 2); qqp 'cross' 8 (pairs) + 2 x 16 (both views of both
    # sides, nothing to reuse); sts 'siamese' 16 (task, both sides) + 16 (view 2)
    assert (plain_rows, simcse_rows) == (8 + 8 + 16, (8 + 8) + (8 + 32) + (16 + 16))


def test_every_k_steps_and_task_choice() -> None:
    module = tiny_module(simcse=SimCSEConfig(tasks=["sst"], every_k_steps=3))
    module._trainer = type("T", (), {"global_step": 0})()
    assert module.simcse_active("sst") and not module.simcse_active("qqp")
    module._trainer.global_step = 4
    assert not module.simcse_active("sst")
    module._trainer.global_step = 6
    assert module.simcse_active("sst")


def test_hyperparameters_store_a_plain_dict_and_rebuild() -> None:
    module = tiny_module(simcse=SimCSEConfig(weight=0.3, tasks=["sts"]))
    saved = module.hparams["simcse"]
    assert saved == {
        "weight": 0.3,
        "temperature": 0.05,
        "tasks": ["sts"],
        "every_k_steps": 1,
        "mode": "unsup",
        "positive_label": 1,
        "hard_negative_label": None,
        "mask_pair_partners": True,
        "gather_across_ranks": False,
    }
    rebuilt = type(module)(**dict(module.hparams))
    assert rebuilt.simcse == module.simcse


def test_bad_simcse_settings_fail_at_construction() -> None:
    with pytest.raises(PalUserError, match=r"\['nli'\]"):
        tiny_module(simcse=SimCSEConfig(tasks=["nli"]))
    with pytest.raises(PalUserError, match="pair_encoding 'siamese'"):
        tiny_module(simcse=SimCSEConfig(mode="sup", tasks=["qqp"]))  # qqp is 'cross' in the tiny module


def test_gem_memories_use_the_task_loss_without_simcse(tmp_path, monkeypatch) -> None:
    """SimCSE is part of the step's gradient only: GEM's memory losses (batch_loss) never add it."""
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.gem import GEMCallback
    from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

    calls: list[str] = []
    task_losses: list[int] = []
    real, real_batch_loss = MultiTaskModule.simcse_loss, MultiTaskModule.batch_loss

    def spy(self, batch, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append(batch["task"])
        return real(self, batch, **kw)

    def spy_batch_loss(self, batch):  # noqa: ANN001, ANN202
        task_losses.append(len(batch["ids"]))
        return real_batch_loss(self, batch)

    monkeypatch.setattr(MultiTaskModule, "simcse_loss", spy)
    monkeypatch.setattr(MultiTaskModule, "batch_loss", spy_batch_loss)
    pl.seed_everything(0, verbose=False)
    model = MultiTaskModule(
        encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, simcse=SimCSEConfig()
    )
    data = MultiTaskDataModule(
        data_dir=str(write_cs224n_data(tmp_path / "data")), cache_dir=False, batch_size=4, max_length=32
    )
    gem = GEMCallback(memory_size=8, memory_batch_size=2)
    trainer = quiet_trainer(max_steps=5, limit_val_batches=0, callbacks=[gem])
    trainer.fit(model, datamodule=data)
    assert sum(gem.memory.seen.values()) == 5 * 4
    memory_batches = len(task_losses) - 5  # batch_loss: 5 training batches, the rest GEM's memories
    assert memory_batches >= 1
    assert len(calls) == 5  # SimCSE once per training step, never for a memory batch


def test_first_view_is_the_given_vectors_and_the_second_a_new_pass() -> None:
    module = tiny_module(simcse=SimCSEConfig(temperature=0.2))
    module.train()
    batch = make_batch("sts")  # siamese in the tiny module
    torch.manual_seed(1)
    u, v = module.encode(batch)
    view = torch.cat([u, v]).detach()
    torch.manual_seed(2)
    got = module.simcse_loss(batch, first_view=view)
    length = max(batch["input_ids_a"].shape[1], batch["input_ids_b"].shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, length - x.shape[1]))  # noqa: E731
    ids = torch.cat([pad(batch["input_ids_a"]), pad(batch["input_ids_b"])])
    mask = torch.cat([pad(batch["attention_mask_a"]), pad(batch["attention_mask_b"])])
    torch.manual_seed(2)
    second = pool(module.encoder(ids, mask, torch.zeros_like(ids), task="sts"), mask).detach()
    expected = _hand_loss(view, second, 0.2, _pair_skips(ids, mask))
    assert float(got.detach()) == pytest.approx(expected, rel=1e-4)
