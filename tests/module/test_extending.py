"""The guide's worked example (docs/extending.md, "Adding a per-task method"), run as written: its method is
registered from the page's own code block, passes the conformance check on every family, and is trained
for a few steps, counted, saved and loaded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from test_pretrained import all_predictions

from pal_lightning.cli.help import registered
from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling import parameter_report
from pal_lightning.modeling.accounting import task_weight_formula
from pal_lightning.modeling.methods import METHODS, AdapterConfig, get_method, unregister_method
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import FAMILY_TYPES, TINY_BERT, quiet_trainer
from pal_lightning.testing.batches import FIXED, PAIR_ENCODING, TinyData
from pal_lightning.testing.conformance import check_method, check_method_in_module

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def guide_block(heading: str) -> str:
    """The first ``python`` block under the ``## heading`` of the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, f"no python block under {heading!r}"
    return match.group(1)


@pytest.fixture
def tiny_mlp() -> Iterator[dict[str, Any]]:
    """The guide's method, registered by executing its block; unregistered afterwards."""
    namespace: dict[str, Any] = {}
    exec(compile(guide_block("Adding a per-task method"), str(GUIDE), "exec"), namespace)
    yield namespace
    unregister_method("tiny_mlp")


def test_the_guides_method_registers_with_one_line(tiny_mlp: dict[str, Any]) -> None:
    method = get_method("tiny_mlp")
    assert isinstance(method, tiny_mlp["TinyMLPMethod"]) and list(METHODS)[-1] == "tiny_mlp"
    with pytest.raises(PalUserError, match="already registered"):
        tiny_mlp["register_method"](tiny_mlp["TinyMLPMethod"]())
    # scaled like the built-in methods: 64 at width 768 is 32 at 384
    assert AdapterConfig(method="tiny_mlp").resolved_size(384) == 32
    # its option is its config's: built by method, as YAML and the command line give it, refused elsewhere
    config = AdapterConfig.coerce({"method": "tiny_mlp", "scale": 0.5, "alpha": None})
    assert isinstance(config, tiny_mlp["TinyMLPConfig"]) and config == AdapterConfig(
        method="tiny_mlp", scale=0.5
    )
    assert config.to_dict()["scale"] == 0.5 and "tiny_mlp (scale)" in registered()
    with pytest.raises(
        PalUserError,
        match=r"adapter.scale does not apply to method 'lora' \(scale is an option of tiny_mlp\)",
    ):
        AdapterConfig(method="lora", scale=0.5)


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_the_guides_method_passes_the_conformance_check(
    tiny_mlp: dict[str, Any], model_type: str, tmp_path: Path
) -> None:
    check_method("tiny_mlp", model_type, tmp_path)
    if model_type == "bert":
        pytest.importorskip("onnxruntime", reason="the export extra is not installed")
        check_method_in_module("tiny_mlp", model_type, tmp_path)


def test_the_guides_method_starts_as_the_encoder_counts_trains_saves_and_loads(
    tiny_mlp: dict[str, Any], tmp_path: Path
) -> None:
    pl.seed_everything(0, verbose=False)
    options: dict[str, Any] = dict(
        encoder_config=TINY_BERT, pair_encoding=PAIR_ENCODING, optim={"lr": 3e-3, "head_lr": 3e-2}
    )
    module = MultiTaskModule(
        adapter={"method": "tiny_mlp", "size": 6, "num_heads": 2, "scale": 0.5}, **options
    )
    plain = MultiTaskModule(adapter="none", **options).eval()
    module.eval()
    plain.encoder.backbone.load_state_dict(module.encoder.backbone.state_dict())
    batch = FIXED[0]
    with torch.no_grad():  # W_up starts at zero: the encoder's own output
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        torch.testing.assert_close(
            module.encoder(**inputs, task="sst"), plain.encoder(**inputs, task="sst"), rtol=0, atol=1e-6
        )
    # the parameter count is the method's formula (weights), plus one bias vector per matrix
    encoder, report = module.encoder, parameter_report(module)
    d, layers = encoder.hidden_size, encoder.num_layers
    formula = task_weight_formula(encoder.adapter_config, d, layers, int(encoder.config.intermediate_size))
    assert report.adapter_weights["sst"] == formula == layers * 2 * d * 6
    assert report.adapter_biases["sst"] == layers * (6 + d)

    module.train()
    before = {n: p.detach().clone() for n, p in module.encoder.adapters.named_parameters()}
    data = TinyData()
    data.steps = 6
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 6
    moved = {n for n, p in module.encoder.adapters.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("sst.up.") for n in moved) and any(n.startswith("qqp.down.") for n in moved)

    module.eval()
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(tmp_path / "model"))
    assert loaded.encoder.adapter_config == AdapterConfig(method="tiny_mlp", size=6, num_heads=2, scale=0.5)
    assert all_predictions(loaded) == all_predictions(module)


def test_an_unregistered_method_is_one_clear_error() -> None:
    with pytest.raises(PalUserError, match=r"Unknown adapter method 'tiny_mlp'.*docs/extending.md"):
        MultiTaskModule(adapter="tiny_mlp")


def test_the_guides_option_on_the_command_line_and_in_layered_yaml(
    tiny_mlp: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from pal_lightning.cli.main import main

    quickstart = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
    overlay = tmp_path / "tiny.yaml"  # layered over the quickstart's PALs size, as configs/lora.yaml is
    overlay.write_text("model:\n  init_args:\n    adapter:\n      method: tiny_mlp\n      size: null\n")
    args = ["fit", "--config", quickstart, "--config", str(overlay), "--model.adapter.scale", "0.5"]
    assert main([*args, "--print_config"]) == 0
    adapter = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["adapter"]
    # a nested block replaces the base's adapter block; dotted keys set single options in it
    assert AdapterConfig.coerce(adapter) == AdapterConfig(method="tiny_mlp", scale=0.5)
    assert main(["fit", "--config", quickstart, "--model.adapter.method", "tiny_mlp", "--print_config"]) == 0
    adapter = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["adapter"]
    assert adapter == {"method": "tiny_mlp", "size": None, "num_heads": 6, "placement": "all", "init": "zero"}
    # an option of another method: one line naming tiny_mlp's options, exit 2
    alpha = ["--model.adapter.method", "tiny_mlp", "--model.adapter.alpha", "4"]
    assert main(["fit", "--config", quickstart, *alpha]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "adapter.alpha does not apply to method 'tiny_mlp'" in error
    assert "scale" in error
