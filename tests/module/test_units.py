"""The units of ``pal_lightning.module`` on their own: scorer, evaluation loop, checkpoint check,
adapter options, guard and schedule helpers (no Trainer; expected values worked out by hand)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.methods.config import AdapterConfig
from pal_lightning.module.checkpoint_check import (
    ARCHITECTURE_HPARAMS,
    STARTING_VALUES_ONLY,
    checkpoint_differences,
)
from pal_lightning.module.evaluation import TaskScorer, eval_mode, score_batch
from pal_lightning.module.nonfinite_guard import all_finite, nonfinite_message
from pal_lightning.module.optim import adamw, fused_allowed, warmup_steps_of
from pal_lightning.module.optim_config import OptimConfig
from pal_lightning.tasks.specs import TaskSpec, get_task

SST, QQP, STS = get_task("sst"), get_task("qqp"), get_task("sts")


# ---------------------------------------------------------------- scorer and loop


def test_scorer_scores_updated_tasks_with_their_mean_loss_per_example() -> None:
    scorer = TaskScorer([SST, QQP])
    # batch 1: 3 of 4 right, mean loss 0.5; batch 2: 1 of 2 right, mean loss 2.0
    scorer.update("sst", torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, 2]), torch.tensor(0.5))
    scorer.update("sst", torch.tensor([3, 3]), torch.tensor([3, 0]), torch.tensor(2.0))
    scores = scorer.compute(torch.device("cpu"))
    assert list(scores.metrics) == ["sst"]  # qqp saw no example: no score, no empty compute
    assert scores.metrics["sst"]["accuracy"] == pytest.approx(4 / 6)
    assert scores.losses["sst"] == pytest.approx((0.5 * 4 + 2.0 * 2) / 6)
    # compute resets: the next evaluation starts empty
    assert scorer.compute(torch.device("cpu")).metrics == {}


def test_scorer_without_loss_keeps_no_loss() -> None:
    scorer = TaskScorer([STS], with_loss=False)
    scorer.update("sts", torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.0]), torch.tensor(9.0))
    scores = scorer.compute(torch.device("cpu"))
    assert scores.losses == {}
    assert scores.metrics["sts"]["pearson"] == pytest.approx(1.0)


class _FixedModel:
    """A model whose output is the batch's own ``logits``; predictions are their argmax."""

    task_specs: Mapping[str, TaskSpec] = {"sst": SST}

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: Mapping[str, Any]) -> Tensor:
        self.calls += 1
        return batch["logits"]

    def predict_from_output(self, task: str, output: Tensor) -> Tensor:
        return output.argmax(-1)

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        return torch.tensor(float(len(labels)))  # 2.0 for a batch of two


def test_score_batch_skips_unlabelled_batches() -> None:
    model, scorer = _FixedModel(), TaskScorer([SST])
    logits = torch.tensor([[0.0, 1.0, 0, 0, 0], [2.0, 0, 0, 0, 0]])  # predicts 1, 0
    score_batch(model, scorer, {"task": "sst", "logits": logits})  # a test split: no labels
    assert model.calls == 0
    score_batch(model, scorer, {"task": "sst", "logits": logits, "labels": torch.tensor([1, 4])})
    scores = scorer.compute(torch.device("cpu"))
    assert scores.metrics["sst"]["accuracy"] == pytest.approx(0.5)
    assert scores.losses["sst"] == pytest.approx(2.0)


def test_eval_mode_restores_each_submodules_own_mode() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    net.train()
    net[1].eval()  # a user keeps dropout off while training
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert net.training and net[0].training and not net[1].training


# ---------------------------------------------------------------- checkpoint check and adapter options


def _hparams(**kw: Any) -> dict[str, Any]:
    adapter = AdapterConfig(size=8, num_heads=2).replace(**kw.pop("adapter", {}))
    optim = asdict(OptimConfig(**kw.pop("optim", {})))
    hp: dict[str, Any] = dict(encoder="some/encoder", encoder_config=None, adapter=adapter.to_dict())
    hp.update(optim=optim, tasks=["sst", "qqp"])
    hp.update(kw)
    return hp


def test_checkpoint_differences_name_shape_options_not_starting_values() -> None:
    ours = _hparams()
    saved = _hparams(adapter={"num_heads": 4, "init": "random"})
    assert checkpoint_differences(saved, ours, [SST, QQP]) == [
        "adapter.num_heads is 4 in the checkpoint but 2 here"
    ]


def test_checkpoint_differences_tasks_order_matters_only_when_resuming() -> None:
    ours = _hparams()
    saved = _hparams(tasks=["qqp", "sst"], optim={"freeze_encoder": True})
    assert checkpoint_differences(saved, ours, [SST, QQP]) == []
    assert checkpoint_differences(saved, ours, [SST, QQP], resuming=True) == [
        "it was trained with the task order [qqp, sst], the model now has [sst, qqp] (resuming a fit "
        "needs the same order)",
        "optim.freeze_encoder is True in the checkpoint but False here",
    ]
    other = _hparams(tasks=["sst", "sts"])
    assert checkpoint_differences(other, ours, [SST, QQP]) == [
        "it was trained for tasks [sst, sts] but the model is configured for [sst, qqp]"
    ]


def test_checkpoint_differences_ignore_the_encoder_name_of_a_random_encoder_and_tuple_vs_list() -> None:
    ours = _hparams(encoder_config={"hidden_size": 32}, task_groups=(("sst", "qqp"),))
    saved = _hparams(
        encoder="another/encoder", encoder_config={"hidden_size": 32}, task_groups=[["sst", "qqp"]]
    )
    assert checkpoint_differences(saved, ours, [SST, QQP]) == []
    saved["encoder_config"] = {"hidden_size": 64}
    assert checkpoint_differences(saved, ours, [SST, QQP]) == [
        "encoder_config is {'hidden_size': 64} in the checkpoint but {'hidden_size': 32} here"
    ]


def test_adapter_config_coerces_names_mappings_and_configs() -> None:
    config = AdapterConfig.coerce({"method": "low_rank", "size": 16, "placement": "top", "num_layers": 1})
    assert (config.method, config.size, config.placement, config.num_layers) == ("low_rank", 16, "top", 1)
    assert AdapterConfig.coerce("pff") == AdapterConfig(method="pff")
    assert AdapterConfig.coerce(config) is config and AdapterConfig.coerce(None) == AdapterConfig()
    with pytest.raises(
        PalUserError, match=r"Unknown adapter option adapter.pal_size: no registered method has it"
    ):
        AdapterConfig.coerce({"pal_size": 8})
    with pytest.raises(PalUserError, match="adapter must be a method name"):
        AdapterConfig.coerce(8)
    # every adapter option fixes the weights' shape except init (the starting values only)
    assert "adapter" in ARCHITECTURE_HPARAMS and STARTING_VALUES_ONLY == {"init"}


# ---------------------------------------------------------------- guard and schedule helpers


def test_all_finite_checks_every_element_of_every_tensor() -> None:
    big = torch.full((3,), 3e38)  # finite, but its norm overflows float32
    assert all_finite([big, torch.zeros(2)])
    assert not all_finite([torch.zeros(2), torch.tensor([0.0, math.nan])])
    assert not all_finite([torch.tensor([-math.inf])])
    assert all_finite([])
    # a NaN or an infinity anywhere in a larger tensor, beside finite extremes; empty, bf16 and sparse tensors
    for bad in (math.nan, math.inf, -math.inf):
        x = torch.arange(-6.0, 6.0).reshape(3, 4)
        x[1, 2] = bad
        assert not all_finite([torch.ones(2), x]) and all_finite([torch.ones(2), x.nan_to_num(0.0, 0.0, 0.0)])
        assert not all_finite([x.bfloat16()]) and not all_finite([x.to_sparse()])
    assert all_finite([torch.zeros(0), torch.ones(3).bfloat16(), torch.eye(3).to_sparse()])


def test_nonfinite_message_names_the_cause_tasks_and_step() -> None:
    message = nonfinite_message(3, True, ["sst", "qqp"], 17)
    assert "3 consecutive steps" in message and "non-finite loss" in message
    assert "task sst, qqp, step 17" in message
    assert "non-finite gradients" in nonfinite_message(1, False, [], 0) and "task ?" in nonfinite_message(
        1, False, [], 0
    )


def test_warmup_steps_of_prefers_the_absolute_count() -> None:
    assert warmup_steps_of(total=40, warmup_steps=None, warmup_ratio=0.1) == 4
    assert warmup_steps_of(total=45, warmup_steps=None, warmup_ratio=0.1) == 4  # round(4.5) is 4 in Python
    assert warmup_steps_of(total=40, warmup_steps=7, warmup_ratio=0.1) == 7


def test_adamw_is_fused_on_the_cpu_and_takes_adams_step_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    w = nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    w.grad = torch.tensor([0.1, 0.2, -0.3])
    opt = adamw([{"params": [w]}], lr=0.1, weight_decay=0.5)
    cpu_has_fused = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4)
    assert opt.defaults["fused"] is (True if cpu_has_fused else None)
    opt.step()
    # first step by hand: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected m^ = g, v^ = g^2, so the
    # update is lr * g / (|g| + eps) after the decoupled decay w (1 - lr wd)
    g = torch.tensor([0.1, 0.2, -0.3])
    expected = torch.tensor([1.0, -2.0, 0.5]) * (1 - 0.1 * 0.5) - 0.1 * g / (g.abs() + 1e-8)
    torch.testing.assert_close(w.detach(), expected, rtol=1e-6, atol=1e-6)
    real = torch.optim.AdamW

    def without_fused(params: Any, **options: Any) -> torch.optim.AdamW:  # a device with no fused kernel
        if options.get("fused"):
            raise RuntimeError(
                "`fused=True` requires all the params to be floating point Tensors of supported devices"
            )
        return real(params, **options)

    monkeypatch.setattr(torch.optim, "AdamW", without_fused)
    fallback = adamw(iter([w]), lr=0.1)  # an iterator is read once, for both tries
    assert not fallback.defaults["fused"] and fallback.param_groups[0]["params"] == [w]
    assert fallback.defaults["foreach"]  # multi-tensor, not the CPU's default for-loop


def test_fused_only_where_lightning_unscales_and_clips_with_it() -> None:
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import HalfPrecision, MixedPrecision, Precision

    assert fused_allowed(None)  # a module on its own
    assert fused_allowed(SimpleNamespace(precision_plugin=Precision()))  # 32-true
    assert fused_allowed(SimpleNamespace(precision_plugin=HalfPrecision("bf16-true")))
    # bf16-mixed scales nothing: fused (the clipping check is lifted, next test); 16-mixed would hand
    # GEM and the guard scaled gradients
    assert fused_allowed(SimpleNamespace(precision_plugin=MixedPrecision("bf16-mixed", "cpu")))
    assert not fused_allowed(SimpleNamespace(precision_plugin=MixedPrecision("16-mixed", "cpu")))
    unfused = adamw([nn.Parameter(torch.ones(2))], fused=False, lr=0.1)
    assert not unfused.defaults["fused"] and unfused.defaults["foreach"]
    assert (
        adamw([nn.Parameter(torch.ones(2))], fused=False, foreach=False, lr=0.1).defaults["foreach"] is False
    )


def test_fused_adamw_is_clipped_under_bf16_mixed_and_still_refused_with_a_loss_scaler() -> None:
    from types import SimpleNamespace

    import lightning.pytorch as pl
    from lightning.pytorch.plugins.precision import MixedPrecision

    from pal_lightning.module.optim import FusedClippingMixin, clips_unscaled

    class Module(FusedClippingMixin, pl.LightningModule):
        pass

    module = Module()
    w, b = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(4))
    optimizer = adamw([w, b], lr=0.1)
    assert optimizer.defaults["fused"]
    bf16 = MixedPrecision("bf16-mixed", "cpu")
    module._trainer = SimpleNamespace(precision_plugin=bf16)  # what configure_gradient_clipping reads
    assert clips_unscaled(bf16, optimizer) and not clips_unscaled(bf16, torch.optim.SGD([w], lr=0.1))
    w.grad, b.grad = torch.tensor([3.0, 0.0, 4.0]), torch.tensor([0.0, 0.0, 0.0, 0.0])  # norm 5
    module.configure_gradient_clipping(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    # clipped to norm 1 (clip_grad_norm_ scales by 1 / (5 + 1e-6))
    torch.testing.assert_close(w.grad, torch.tensor([0.6, 0.0, 0.8]), rtol=1e-5, atol=1e-6)
    w.grad = torch.tensor([3.0, -0.5, 4.0])
    module.configure_gradient_clipping(optimizer, gradient_clip_val=2.0, gradient_clip_algorithm="value")
    torch.testing.assert_close(w.grad, torch.tensor([2.0, -0.5, 2.0]))
    # under fp16 the gradients would still carry the loss scale: Lightning's refusal stands
    fp16 = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    module._trainer = SimpleNamespace(
        precision_plugin=fp16, gradient_clip_val=1.0, gradient_clip_algorithm="norm"
    )
    assert not clips_unscaled(fp16, optimizer)
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        module.configure_gradient_clipping(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")


# ---------------------------------------------------------------- one loop for validation and continual evaluation


def test_evaluate_loader_gives_validation_scores_and_a_hand_count() -> None:
    from pal_lightning.module.evaluation import evaluate_loader
    from pal_lightning.testing import quiet_trainer
    from pal_lightning.testing.batches import FIXED, TinyData, tiny_module

    torch.manual_seed(0)
    module = tiny_module(dropout=0.1)  # dropout on: both paths must switch it off
    module.train()
    batches = [b for b in FIXED if b["task"] in ("sst", "qqp")]  # the loader holds the asked tasks only
    specs = [module.task_specs[t] for t in ("sst", "qqp")]
    scores = evaluate_loader(module, batches, specs, contextlib.nullcontext())
    assert module.training  # the mode is restored
    assert list(scores.metrics) == ["sst", "qqp"] and scores.losses == {}  # no loss kept
    # by hand: eval-mode forward, argmax, share of right answers over both sst batches
    module.eval()
    with torch.no_grad():
        right = [
            (module.predict_from_output("sst", module(b)) == b["labels"]).float()
            for b in FIXED
            if b["task"] == "sst"
        ]
    assert scores.metrics["sst"]["accuracy"] == pytest.approx(float(torch.cat(right).mean()))
    quiet_trainer().validate(module, datamodule=TinyData(), verbose=False)
    val = module.last_scores["val"]
    assert val["val/sst/accuracy"] == pytest.approx(scores.metrics["sst"]["accuracy"])
    assert val["val/qqp/f1"] == pytest.approx(scores.metrics["qqp"]["f1"])
