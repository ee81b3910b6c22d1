"""``16-mixed`` training on the CPU with a real ``GradScaler``: the scaler branch of the non-finite guard,
and GEM under fp16.

Lightning's ``precision="16-mixed"`` on the CPU runs float16 autocast without a scaler, so these tests
pass the precision plugin with ``torch.amp.GradScaler("cpu")``, the object a GPU run gets for "cuda".
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from test_module import TinyData
from test_module_guard import NaNAtSteps

from pal_lightning.gem import GEMCallback
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.module.nonfinite_guard import NonFiniteTrainingError
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data

KW = dict(
    tasks=("sst", "qqp", "sts"),
    bert_config=TINY_BERT,
    adapter={"num_heads": 2},
    pair_encoding={"sts": "siamese", "default": "cross"},
    lr=1e-3,
    head_lr=1e-2,
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
