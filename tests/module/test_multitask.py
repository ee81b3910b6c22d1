"""MultiTaskModule: schedule, optimizer groups, freezing, subclassing, and a short Trainer.fit."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import Tensor, nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import CosineSimilarityHead, LinearHead, SiameseClassificationHead
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.module.optim import linear_warmup_decay
from pal_lightning.tasks.specs import TaskSpec
from pal_lightning.testing import quiet_trainer
from pal_lightning.testing.batches import (
    FIXED,
    PAIR_ENCODING,
    TINY_BATCH_BERT,
    TinyData,
    make_batch,
    tiny_module,
)

# ---------------------------------------------------------------- schedule


def test_linear_warmup_decay() -> None:
    factors = [linear_warmup_decay(s, warmup=2, total=6) for s in range(8)]
    assert factors == pytest.approx([1 / 3, 2 / 3, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    assert linear_warmup_decay(0, 0, 4) == 1.0  # no warmup: start at the peak
    assert all(f > 0 for f in (linear_warmup_decay(s, 3, 10) for s in range(10)))  # every step moves
    with pytest.raises(ValueError):
        linear_warmup_decay(0, 1, 0)


def _attach(module: MultiTaskModule, **trainer: Any) -> None:
    defaults = dict(max_steps=-1, max_epochs=None, accumulate_grad_batches=1, datamodule=None)
    defaults.update(trainer)
    module._trainer = SimpleNamespace(**defaults)  # just what total_training_steps reads


def test_total_steps_from_max_steps_or_datamodule() -> None:
    module = tiny_module()
    _attach(module, max_steps=40)
    assert module.total_training_steps() == 40
    _attach(module, max_epochs=3, accumulate_grad_batches=4, datamodule=SimpleNamespace(steps_per_epoch=10))
    assert module.total_training_steps() == math.ceil(10 / 4) * 3
    _attach(module, max_epochs=3)
    with pytest.raises(PalUserError, match="max_steps"):
        module.total_training_steps()


@pytest.mark.parametrize(
    ("warmup_steps", "factors"),
    [
        (None, [1 / 3, 2 / 3, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6]),  # warmup_ratio 0.25 of 8 steps: 2
        # warmup_steps overrides the ratio; by hand: (s + 1) / (w + 1), then (total - s) / (total - w)
        (3, [1 / 4, 2 / 4, 3 / 4, 1.0, 4 / 5, 3 / 5, 2 / 5, 1 / 5]),
        (0, [1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8]),
    ],
)
def test_scheduler_steps_every_group_by_the_schedule(warmup_steps: int | None, factors: list[float]) -> None:
    module = tiny_module(
        optim={"lr": 1e-3, "head_lr": 1e-2, "warmup_ratio": 0.25, "warmup_steps": warmup_steps}
    )
    _attach(module, max_steps=8)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    assert conf["lr_scheduler"]["interval"] == "step"
    for factor in factors:
        for group in opt.param_groups:
            base = 1e-3 if group["name"].startswith("pretrained") else 1e-2
            assert group["lr"] == pytest.approx(base * factor), group["name"]
        opt.step()
        sched.step()


# ---------------------------------------------------------------- optimizer groups and freezing


def test_optimizer_groups_two_lrs_and_no_decay_on_bias_and_layernorm() -> None:
    module = tiny_module(optim={"lr": 1e-4, "head_lr": 1e-3, "weight_decay": 0.05})
    groups = {g["name"]: g for g in module.parameter_groups()}
    kinds = {"pretrained": "encoder.backbone.", "adapters": "encoder.adapters.", "heads": "heads."}
    assert set(groups) == {f"{kind}{end}" for kind in kinds for end in ("", "_no_decay")}
    names = {id(p): n for n, p in module.named_parameters()}
    for name, group in groups.items():
        assert group["lr"] == (1e-4 if name.startswith("pretrained") else 1e-3)
        assert group["weight_decay"] == (0.0 if name.endswith("no_decay") else 0.05)
        for p in group["params"]:
            pname = names[id(p)]
            is_bias_or_ln = pname.endswith("bias") or "LayerNorm" in pname
            assert is_bias_or_ln == name.endswith("no_decay"), pname
            assert pname.startswith(kinds[name.removesuffix("_no_decay")]), pname
    grouped = sum(len(g["params"]) for g in groups.values())
    assert grouped == len(list(module.parameters()))  # every parameter in exactly one group


def test_freeze_encoder_trains_only_adapters_and_heads() -> None:
    module = tiny_module(optim={"freeze_encoder": True})
    for name, p in module.named_parameters():
        assert p.requires_grad == (not name.startswith("encoder.backbone.")), name
    assert {g["name"] for g in module.parameter_groups()} == {
        "adapters",
        "adapters_no_decay",
        "heads",
        "heads_no_decay",
    }
    report = module.parameter_report()
    assert report.trainable == sum(p.numel() for p in module.parameters() if p.requires_grad)


def test_freeze_embeddings_only() -> None:
    module = tiny_module(optim={"freeze_embeddings": True})
    for name, p in module.named_parameters():
        assert p.requires_grad == (not name.startswith("encoder.backbone.embeddings.")), name


# ---------------------------------------------------------------- forward, heads, hyper-parameters


def test_heads_follow_pair_encoding_and_forward_shapes() -> None:
    module = tiny_module(pooling="cls").eval()
    assert isinstance(module.heads["sst"], LinearHead)
    assert isinstance(module.heads["qqp"], LinearHead)
    assert isinstance(module.heads["sts"], CosineSimilarityHead)
    assert module(make_batch("sst")).shape == (8, 5)
    assert module(make_batch("qqp")).shape == (8, 2)
    assert module(make_batch("sts")).shape == (8,)
    siamese_qqp = tiny_module(pair_encoding="siamese")
    assert isinstance(siamese_qqp.heads["qqp"], SiameseClassificationHead)
    with pytest.raises(PalUserError, match="pair_encoding"):
        siamese_qqp(make_batch("qqp"))  # a cross batch for a siamese model
    with pytest.raises(PalUserError, match="built for"):
        module({**make_batch("sst"), "task": "mnli"})


def test_siamese_encode_matches_separate_passes() -> None:
    module = tiny_module().eval()
    batch = make_batch("sts")
    u, v = module.encode(batch)
    alone = [
        module.encoder(
            batch[f"input_ids_{s}"], batch[f"attention_mask_{s}"], batch[f"token_type_ids_{s}"], task="sts"
        )
        for s in "ab"
    ]
    from pal_lightning.modeling.heads import pool

    assert torch.allclose(u, pool(alone[0], batch["attention_mask_a"], "mean"), atol=1e-5)
    assert torch.allclose(v, pool(alone[1], batch["attention_mask_b"], "mean"), atol=1e-5)


def test_hyperparameters_saved_and_rebuild() -> None:
    custom = TaskSpec(name="toy", kind="single_classification", num_labels=3, label_range=(0, 2))
    module = tiny_module(tasks=("sst", custom), optim={"lr": 1e-4})
    hp = dict(module.hparams)
    assert hp["tasks"] == ["sst", {**hp["tasks"][1], "name": "toy"}]
    assert isinstance(hp["tasks"][1], dict) and hp["tasks"][1]["kind"] == "single_classification"
    assert hp["optim"]["lr"] == 1e-4 and hp["encoder_config"] == TINY_BATCH_BERT
    rebuilt = MultiTaskModule(**hp)
    assert rebuilt.task_specs["toy"] == custom and rebuilt.optim_config == module.optim_config


def test_predict_step_output() -> None:
    module = tiny_module().eval()
    out = module.predict_step(make_batch("sts", split="test", labelled=False), 0)
    assert out["task"] == "sts" and out["split"] == "test" and len(out["ids"]) == 8
    assert all(isinstance(x, float) and 0.0 <= x <= 5.0 for x in out["predictions"])
    out = module.predict_step(make_batch("sst", labelled=False), 0)
    assert all(isinstance(x, int) and 0 <= x < 5 for x in out["predictions"])


# ---------------------------------------------------------------- subclassing


class MLPHead(nn.Module):
    """A custom head: no ``siamese`` attribute, so it gets one vector."""

    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden, 16), nn.Tanh(), nn.Linear(16, classes))

    def forward(self, u: Tensor, v: Tensor | None = None) -> Tensor:
        return self.net(u)


class CustomModule(MultiTaskModule):
    def build_heads(self) -> nn.ModuleDict:
        heads = super().build_heads()
        heads["sst"] = MLPHead(self.encoder.hidden_size, 5)
        return heads

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        if task == "sst":
            return nn.functional.cross_entropy(output, labels, label_smoothing=0.2) * 2.0
        return super().compute_loss(task, output, labels)


def test_subclass_replaces_head_and_loss() -> None:
    module = CustomModule(
        tasks=("sst", "sts"),
        encoder_config=TINY_BATCH_BERT,
        adapter={"num_heads": 2},
        pair_encoding=PAIR_ENCODING,
    )
    assert isinstance(module.heads["sst"], MLPHead)
    assert any(n.startswith("heads.sst.net.") for n, _ in module.named_parameters())
    module.eval()
    batch = make_batch("sst")
    output = module(batch)
    expected = nn.functional.cross_entropy(output, batch["labels"], label_smoothing=0.2) * 2.0
    assert torch.allclose(module.batch_loss(batch), expected)
    # the inherited parts still work: STS keeps the library head and loss
    assert isinstance(module.heads["sts"], CosineSimilarityHead)
    assert module.batch_loss(make_batch("sts")).ndim == 0
    # the custom head is a new parameter: it trains at head_lr
    groups = {g["name"]: g for g in module.parameter_groups()}
    head_params = {id(p) for p in module.heads["sst"].parameters()}
    assert head_params <= {id(p) for g in ("heads", "heads_no_decay") for p in groups[g]["params"]}


# ---------------------------------------------------------------- Trainer.fit


def _total_loss(module: MultiTaskModule) -> float:
    module.eval()
    with torch.no_grad():
        total = sum(float(module.batch_loss(b)) for b in FIXED)
    module.train()
    return total


def test_fit_20_steps_lowers_loss_and_logs_val_overall() -> None:
    pl.seed_everything(0, verbose=False)
    module = tiny_module(optim={"lr": 3e-3, "head_lr": 3e-2, "warmup_ratio": 0.1})
    before = _total_loss(module)
    trainer = quiet_trainer(max_epochs=1)
    data = TinyData()
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 20
    after = _total_loss(module)
    assert after < 0.85 * before, (before, after)
    metrics = trainer.callback_metrics
    for key in ("sst/accuracy", "qqp/accuracy", "qqp/f1", "sts/pearson", "sts/spearman", "overall"):
        assert f"val/{key}" in metrics, key
    expected = (
        metrics["val/sst/accuracy"] + metrics["val/qqp/accuracy"] + (metrics["val/sts/pearson"] + 1) / 2
    ) / 3
    assert float(metrics["val/overall"]) == pytest.approx(float(expected), abs=1e-6)
    assert "train/loss" in metrics and "train/sst/loss" in metrics
    # the lr schedule ran to its end (f(20) = 0 after the 20th step)
    lr_now = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr_now == pytest.approx(0.0, abs=1e-12)

    results = trainer.test(module, datamodule=data, verbose=False)[0]
    assert "test/overall" in results and "test/sts/pearson" in results
    preds = trainer.predict(module, datamodule=data)
    assert [p["task"] for p in preds] == ["sst", "sts"] and all(p["split"] == "test" for p in preds)
