"""The paper's other task-specific functions through MultiTaskModule: a short fit for each, the checkpoint
check refusing another variant, and the shipped overlays in configs/variants/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.testing import quiet_trainer
from pal_lightning.testing.batches import FIXED, TinyData, tiny_module

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = sorted((ROOT / "configs" / "variants").glob("*.yaml"))


@pytest.mark.parametrize(
    ("adapter", "extra"),
    [("pff", {}), ("pa_on_top", {}), ("bert_layer_on_top", {}), ("pals", {"activation": "gelu"})],
)
def test_each_variant_fits_and_trains_its_own_parameters(adapter: str, extra: dict[str, Any]) -> None:
    pl.seed_everything(0, verbose=False)
    module = tiny_module(adapter={"method": adapter, **extra}, optim={"lr": 3e-3, "head_lr": 3e-2})
    before = {n: p.detach().clone() for n, p in module.encoder.adapters.named_parameters()}
    assert before, "the variant has task-specific parameters"
    data = TinyData()
    data.steps = 3  # one batch of each task
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 3
    tasks_seen = {b["task"] for b in FIXED}
    for task in tasks_seen:
        moved = [
            n
            for n, p in module.encoder.adapters[task].named_parameters(prefix=task)
            if not torch.equal(p, before[n])
        ]
        assert moved, f"{adapter}: task {task}'s parameters did not train"
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_shipped_variant_overlays_print_on_the_quickstart(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from pal_lightning.cli.main import main

    expected = {  # (method, placement, layer_sharing)
        "pals_top_half": ("pals", "top", None),
        "pals_bottom_half": ("pals", "bottom", None),
        "bert_layer_on_top": ("bert_layer_on_top", "all", None),
        "pa_on_top": ("pa_on_top", "all", None),
        "pff": ("pff", "all", None),
        "layer_sharing": ("pals", None, "FFSSII"),
    }
    assert {p.stem for p in VARIANTS} == set(expected)
    quickstart = str(ROOT / "configs" / "quickstart.yaml")
    for path in VARIANTS:
        assert main(["fit", "--config", quickstart, "--config", str(path), "--print_config"]) == 0, path
        args = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
        got = (args["adapter"]["method"], args["adapter"].get("placement"), args.get("layer_sharing"))
        assert got == expected[path.stem], path


def test_a_variant_overlay_fits_a_tiny_model_through_the_cli(tmp_path: Path) -> None:
    import yaml

    from pal_lightning.cli.main import main
    from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"), tasks=["sst", "sts"])
    quickstart = str(ROOT / "configs" / "quickstart.yaml")
    overlay = str(ROOT / "configs" / "variants" / "pa_on_top.yaml")
    args = ["--config", quickstart, "--config", str(config), "--config", overlay, "--trainer.max_steps", "2"]
    assert main(["fit", *args]) == 0
    saved = yaml.safe_load((tmp_path / "runs" / "version_0" / "config.yaml").read_text())
    assert saved["model"]["init_args"]["adapter"]["method"] == "pa_on_top"
