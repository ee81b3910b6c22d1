"""MultiTaskModule's safety nets: the non-finite step guard (also under ``16-mixed`` on the CPU with a real
``GradScaler``, as a GPU run gets, and with GEM) and the checkpoint compatibility check."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import Tensor

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.version import __version__
from pal_lightning.gem import GEMCallback
from pal_lightning.module.checkpoint_check import VERSION_KEY
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.module.nonfinite_guard import NonFiniteTrainingError
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data
from pal_lightning.testing.batches import TinyData, tiny_module


class NaNAtSteps(MultiTaskModule):
    """Makes the loss NaN at the given 0-based optimizer steps."""

    def __init__(self, *args: Any, bad_steps: tuple[int, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bad_steps = set(bad_steps)

    def compute_loss(self, task: str, output: Tensor, labels: Tensor) -> Tensor:
        loss = super().compute_loss(task, output, labels)
        if self.training and self.trainer.global_step in self.bad_steps:
            loss = loss * float("nan")
        return loss


class Snapshots(Callback):
    """All parameters, flattened, after every training batch."""

    def __init__(self) -> None:
        self.after: list[Tensor] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.after.append(torch.cat([p.detach().flatten().clone() for p in pl_module.parameters()]))


def _flat(state: dict[str, Tensor], module: pl.LightningModule) -> Tensor:
    return torch.cat([state[name].flatten() for name, _ in module.named_parameters()])


def test_nonfinite_steps_are_skipped_then_stop_with_the_last_checkpoint_intact(tmp_path: Path) -> None:
    pl.seed_everything(0, verbose=False)
    # step 3 is a lone bad step (skipped, then training goes on); 5, 6, ... never recover
    module = NaNAtSteps(
        bad_steps=(3, *range(5, 20)),
        max_nonfinite_steps=2,
        tasks=("sst", "qqp", "sts"),
        encoder_config=tiny_module().hparams.encoder_config,
        adapter={"num_heads": 2},
        pair_encoding={"sts": "siamese", "default": "cross"},
        optim={"lr": 1e-3, "head_lr": 1e-2},
    )
    snaps = Snapshots()
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_top_k=0, save_last=True, every_n_train_steps=1)
    trainer = quiet_trainer(
        max_steps=20, callbacks=[snaps, ckpt], limit_val_batches=0, enable_checkpointing=True
    )
    with pytest.raises(NonFiniteTrainingError) as info:
        trainer.fit(module, datamodule=TinyData())
    message = str(info.value)
    assert "2 consecutive steps with non-finite loss/gradients" in message
    assert "step 6" in message and "task sst" in message  # TinyData's step 6 is an sst batch
    assert "learning rate" in message
    assert module.guard.steps == 3 and module.guard.in_a_row == 2

    after = snaps.after  # after[s] = parameters once step s finished
    assert len(after) == 6  # steps 0..5 finished; step 6 raised before its batch end
    assert torch.equal(after[3], after[2])  # the lone bad step moved nothing
    assert not torch.equal(after[4], after[3])  # the good step after it trained again
    assert torch.equal(after[5], after[4])
    # the newest checkpoint was written before the failing step and holds the last good weights
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 6
    weights = _flat(saved["state_dict"], module)
    assert torch.isfinite(weights).all() and torch.equal(weights, after[4])
    current = torch.cat([p.detach().flatten() for p in module.parameters()])
    assert torch.equal(current, after[4])  # the failing step touched no weight either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_max_nonfinite_steps_must_be_positive() -> None:
    with pytest.raises(PalUserError, match="max_nonfinite_steps"):
        tiny_module(max_nonfinite_steps=0)


def _checkpoint(module: MultiTaskModule, optimizer: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        VERSION_KEY: __version__,
        "hyper_parameters": dict(module.hparams),
        "state_dict": module.state_dict(),
    }
    if optimizer:
        out["optimizer_states"] = [{"state": {}, "param_groups": []}]
    return out


def test_checkpoint_of_another_task_set_is_refused_with_what_differs() -> None:
    with pytest.raises(PalUserError) as info:
        tiny_module().on_load_checkpoint(_checkpoint(tiny_module(tasks=("sst", "qqp"))))
    message = str(info.value)
    assert "trained for tasks [sst, qqp] but the model is configured for [sst, qqp, sts]" in message
    assert "config.yaml" in message


def test_matching_checkpoints_load_and_resume_needs_the_same_order_and_freezing() -> None:
    base = tiny_module()
    # same tasks, other training options: fine for evaluation and for resuming
    tiny_module(optim={"lr": 1.0}, dropout=0.3).on_load_checkpoint(_checkpoint(base, optimizer=True))
    # the order of tasks and freezing only matter when the optimizer state is restored
    reordered = tiny_module(tasks=("sts", "sst", "qqp"))
    reordered.on_load_checkpoint(_checkpoint(base))
    with pytest.raises(PalUserError, match="task order"):
        reordered.on_load_checkpoint(_checkpoint(base, optimizer=True))
    frozen = tiny_module(optim={"freeze_encoder": True})
    frozen.on_load_checkpoint(_checkpoint(base))
    with pytest.raises(PalUserError, match="freeze_encoder is False in the checkpoint but True here"):
        frozen.on_load_checkpoint(_checkpoint(base, optimizer=True))


def test_testing_a_full_checkpoint_needs_neither_the_order_nor_the_freezing_of_its_fit() -> None:
    # trainer.test/validate/predict(ckpt_path=...) restore no optimizer state: they were refused as a resume
    from lightning.pytorch.trainer.states import TrainerFn

    checkpoint = _checkpoint(tiny_module(), optimizer=True)
    for module in (tiny_module(tasks=("sts", "sst", "qqp")), tiny_module(optim={"freeze_encoder": True})):
        trainer = quiet_trainer()
        trainer.state.fn = TrainerFn.TESTING
        module.trainer = trainer
        module.on_load_checkpoint(checkpoint)
        trainer.state.fn = TrainerFn.FITTING
        with pytest.raises(PalUserError, match="task order|freeze_encoder"):
            module.on_load_checkpoint(checkpoint)


@pytest.mark.parametrize(
    ("trained", "now", "message"),
    [
        ({"pooling": "mean"}, {"pooling": "cls"}, "pooling is 'mean' in the checkpoint but 'cls' here"),
        (
            {"pair_encoding": {"default": "cross"}},
            {"pair_encoding": {"default": "siamese"}},
            "pair_encoding is {'default': 'cross'} in the checkpoint but {'default': 'siamese'} here",
        ),
        (
            {"adapter": {"size": 8}},
            {"adapter": {"size": 16}},
            "adapter.size is 8 in the checkpoint but 16 here",
        ),
        (
            {"adapter": {"placement": "all"}},
            {"adapter": {"placement": "top"}},
            "adapter.placement is 'all' in the checkpoint but 'top' here",
        ),
        (
            {"adapter": "pals"},
            {"adapter": "low_rank"},
            "adapter.method is 'pals' in the checkpoint but 'low_rank'",
        ),
        (
            {"adapter": "pals"},
            {"adapter": "pff"},
            "adapter.method is 'pals' in the checkpoint but 'pff' here",
        ),
        (
            {"adapter": "pa_on_top"},
            {"adapter": "bert_layer_on_top"},
            "adapter.method is 'pa_on_top' in the checkpoint but 'bert_layer_on_top' here",
        ),
        (
            {"adapter": "bert_layer_on_top"},
            {"adapter": "pa_on_top"},
            "adapter.method is 'bert_layer_on_top' in the checkpoint but 'pa_on_top' here",
        ),
        (
            {"adapter": "pff"},
            {"adapter": {"method": "pff", "activation": "gelu"}},
            "adapter.activation is 'none' in the checkpoint but 'gelu' here",
        ),
        (
            {"layer_sharing": "SI"},
            {"layer_sharing": "IS"},
            "layer_sharing is 'SI' in the checkpoint but 'IS' here",
        ),
        (
            {"layer_sharing": "SI", "task_groups": [["sst", "qqp"]]},
            {"layer_sharing": "SI"},
            "task_groups is [['sst', 'qqp']] in the checkpoint but None",
        ),
    ],
)
def test_a_checkpoint_of_other_options_is_refused_and_one_of_the_same_loads(
    trained: dict[str, Any], now: dict[str, Any], message: str
) -> None:
    saved = tiny_module(**trained)
    with pytest.raises(PalUserError, match=re.escape(message)):
        tiny_module(**now).on_load_checkpoint(_checkpoint(saved))
    same = tiny_module(**trained)
    same.on_load_checkpoint(_checkpoint(saved))
    same.load_state_dict(saved.state_dict())  # and its weights fit


def test_checkpoint_of_another_pretrained_encoder_is_refused() -> None:
    """A real encoder (the offline all-MiniLM-L6-v2): a checkpoint naming another one does not fit."""
    module = MultiTaskModule(tasks=("sst",), adapter={"size": 8, "num_heads": 2})
    saved = {
        VERSION_KEY: __version__,
        "hyper_parameters": {**dict(module.hparams), "encoder": "bert-base-uncased"},
    }
    with pytest.raises(PalUserError, match=r"encoder is 'bert-base-uncased' in the checkpoint but '.*MiniLM"):
        module.on_load_checkpoint(saved)
    module.on_load_checkpoint(
        {VERSION_KEY: __version__, "hyper_parameters": dict(module.hparams)}
    )  # its own name fits


def test_a_checkpoint_records_its_version_and_another_series_is_refused_by_name() -> None:
    module = tiny_module()
    checkpoint: dict[str, Any] = {"hyper_parameters": dict(module.hparams)}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint[VERSION_KEY] == __version__
    module.on_load_checkpoint(checkpoint)  # its own version reads
    for saved, named in (
        ("0.0.9", "pal-lightning 0.0.9"),
        (None, "a pal-lightning version that did not record itself"),
    ):
        old = {**checkpoint, VERSION_KEY: saved}
        with pytest.raises(PalUserError, match=f"written by {named}.*no compatibility promise before 1.0"):
            module.on_load_checkpoint(old)


# ---------------------------------------------------------------- 16-mixed on the CPU with a real GradScaler


KW = dict(
    tasks=("sst", "qqp", "sts"),
    encoder_config=TINY_BERT,
    adapter={"num_heads": 2},
    pair_encoding={"sts": "siamese", "default": "cross"},
    optim={"lr": 1e-3, "head_lr": 1e-2},
)


def _trainer(max_steps: int, init_scale: float, callbacks: tuple = ()) -> pl.Trainer:
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
    return quiet_trainer(
        max_steps=max_steps,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        limit_val_batches=0,
        callbacks=list(callbacks),
    )


def test_scaler_overflows_are_not_counted_until_the_scale_falls_below_one() -> None:
    """Every loss is NaN. The scaler skips each step and halves its scale 8, 4, 2, 1, 0.5, 0.25 ...:
    steps at a scale >= 1 (0-3) are the scaler's to handle; from step 4 (scale 0.5) they count, and
    the second counted step (5) stops the run."""
    pl.seed_everything(0, verbose=False)
    module = NaNAtSteps(bad_steps=tuple(range(20)), max_nonfinite_steps=2, **KW)
    trainer = _trainer(max_steps=20, init_scale=8.0)
    with pytest.raises(NonFiniteTrainingError, match="2 consecutive steps"):
        trainer.fit(module, datamodule=TinyData())
    assert module.guard.steps == 6 and module.guard.in_a_row == 2
    # halved after steps 0-4; step 5 raised before the scaler's update
    assert trainer.precision_plugin.scaler.get_scale() == pytest.approx(8.0 / 2**5)
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_fp16_training_with_gem_projects_and_stays_finite(tmp_path) -> None:  # noqa: ANN001
    from pal_lightning.data import MultiTaskDataModule

    pl.seed_everything(0, verbose=False)
    module = MultiTaskModule(**KW)
    before = [p.detach().clone() for p in module.parameters()]
    gem = GEMCallback(memory_size=8, memory_batch_size=4)
    data = MultiTaskDataModule(
        data_dir=str(write_cs224n_data(tmp_path / "data")),
        cache_dir=False,
        batch_size=4,
        max_length=32,
        pair_encoding=KW["pair_encoding"],
    )
    trainer = _trainer(max_steps=6, init_scale=2.0**8, callbacks=(gem,))
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 6 and module.guard.steps == 0
    assert gem.violations >= 1 and gem.projections == gem.violations and gem.fallbacks == 0
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))  # it trained
