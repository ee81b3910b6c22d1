"""Layer-sharing regimes through MultiTaskModule and the CLI: bad specs, checkpoints, learning-rate
groups, GEM's shared parameters, export, a short fit and the shipped overlay."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from pal_lightning.core.errors import PalUserError
from pal_lightning.gem import GEMCallback
from pal_lightning.testing import quiet_trainer
from pal_lightning.testing.batches import FIXED, TinyData, tiny_module

ROOT = Path(__file__).resolve().parents[2]


def _fields(adapter: str | dict[str, Any]) -> dict[str, Any]:
    """AdapterConfig fields of a method name or of a mapping of them."""
    return {"method": adapter} if isinstance(adapter, str) else dict(adapter)


def test_bad_regimes_are_refused_with_one_clear_message() -> None:
    with pytest.raises(PalUserError, match="has 3 letters but the encoder has 2 layers"):
        tiny_module(layer_sharing="SSI")
    with pytest.raises(PalUserError, match=re.escape("unknown letter(s) ['Q']")):
        tiny_module(layer_sharing="SQ")
    with pytest.raises(
        PalUserError, match="individual \\(I\\) layers, which optim.freeze_encoder would freeze"
    ):
        tiny_module(layer_sharing="SI", optim={"freeze_encoder": True})
    tiny_module(layer_sharing="FS", optim={"freeze_encoder": True})  # F/S only: fine


def test_the_cli_reports_a_bad_regime_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pal_lightning.cli.main import USER_ERROR_EXIT, main
    from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

    config = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    quickstart = str(ROOT / "configs" / "quickstart.yaml")
    for spec, message in (("SSS", "has 3 letters"), ("SZ", "unknown letter")):
        args = ["fit", "--config", quickstart, "--config", str(config), "--model.layer_sharing", spec]
        assert main(args) == USER_ERROR_EXIT
        err = capsys.readouterr().err
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.startswith("pal-lightning: error:")]
        assert len(lines) == 1 and message in lines[0], err


def test_individual_layers_train_at_the_encoder_rate_with_their_layer_decay() -> None:
    module = tiny_module(
        layer_sharing="FI", optim={"lr": 1e-4, "head_lr": 1e-3, "adapter_lr": 2e-3, "layer_lr_decay": 0.5}
    )
    names = {id(p): n for n, p in module.named_parameters()}
    rates = {names[id(p)]: g["lr"] for g in module.parameter_groups() for p in g["params"]}
    individual = [n for n in rates if n.startswith("encoder.individual.")]
    assert individual and all(n.split(".")[3] == "1" for n in individual)
    # layer 1 of 2: one decay step below the top, like the shared layer 1 would be
    assert all(rates[n] == pytest.approx(1e-4 * 0.5) for n in individual)
    assert not any(n.startswith("encoder.backbone.encoder.layer.0.") for n in rates)  # F: not trained


def test_gem_shared_parameters_are_the_embeddings_and_the_s_layers() -> None:
    module = tiny_module(layer_sharing="SI")
    params = GEMCallback(parameters="shared").participating_parameters(module)
    expected = [p for n, p in module.encoder.backbone.named_parameters() if ".layer.1." not in n]
    assert {id(p) for p in params} == {id(p) for p in expected}
    frozen = tiny_module(layer_sharing="FS")
    params = GEMCallback(parameters="shared").participating_parameters(frozen)
    assert not {id(p) for p in frozen.encoder.backbone.encoder.layer[0].parameters()} & {
        id(p) for p in params
    }


def test_export_keeps_only_the_tasks_individual_layers() -> None:
    from pal_lightning.module.export import SingleTaskModel

    module = tiny_module(layer_sharing="IS").eval()
    single = SingleTaskModel(module, "sst")
    assert list(single.encoder.individual) == ["sst"]
    batch = next(b for b in FIXED if b["task"] == "sst")
    with torch.no_grad():
        expected = module(batch)
        got = single(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    torch.testing.assert_close(got, expected)


def test_a_mixed_regime_with_pals_fits() -> None:
    pl.seed_everything(0, verbose=False)
    module = tiny_module(layer_sharing="FI", optim={"lr": 3e-3, "head_lr": 3e-2})
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    data = TinyData()
    data.steps = 3  # one batch of each task
    trainer = quiet_trainer(max_epochs=1, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    after = dict(module.named_parameters())
    assert all(
        torch.equal(after[n], before[n]) for n in before if n.startswith("encoder.backbone.encoder.layer.0.")
    )
    for task in {b["task"] for b in FIXED}:
        moved = [
            n
            for n in before
            if n.startswith(f"encoder.individual.{task}.1.") and not torch.equal(after[n], before[n])
        ]
        assert moved, task


@pytest.mark.parametrize(
    "options",
    [
        {"layer_sharing": "IS", "task_groups": [["sst", "qqp"]], "adapter": "pff"},
        {"adapter": "bert_layer_on_top", "layer_sharing": "FI"},
        {"adapter": {"method": "pa_on_top", "activation": "gelu", "init": "random"}},
    ],
)
def test_saved_model_folder_round_trip(tmp_path: Path, options: dict[str, Any]) -> None:
    from test_pretrained import all_predictions  # real-vocabulary sentences through the offline tokenizer

    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    options = {**options, "adapter": {"num_heads": 2, **_fields(options.get("adapter", "pals"))}}
    module = MultiTaskModule(
        encoder_config=TINY_BERT, pair_encoding={"sts": "siamese", "default": "cross"}, **options
    ).eval()
    if options.get(
        "task_groups"
    ):  # one copy of each individual layer per group (checkpoint check: test_guard)
        assert sorted(module.encoder.individual) == ["sst+qqp", "sts"]
    before = all_predictions(module)
    loaded = MultiTaskModule.from_pretrained(module.save_pretrained(tmp_path / "model"))
    assert all_predictions(loaded) == before
    own, theirs = module.state_dict(), loaded.state_dict()
    assert own.keys() == theirs.keys() and all(torch.equal(own[k], theirs[k]) for k in own)


@pytest.mark.parametrize(
    "options", [{"layer_sharing": "IS", "adapter": "pa_on_top"}, {"adapter": "bert_layer_on_top"}]
)
def test_onnx_export_of_a_regime_or_a_variant_on_top(tmp_path: Path, options: dict[str, Any]) -> None:
    ort = pytest.importorskip("onnxruntime", reason="the export extra is not installed")
    import numpy as np
    from module.test_export import batch_inputs, module_output  # tests/module/test_export.py

    from pal_lightning.module.export import SingleTaskModel, export_onnx
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    options = {
        **options,
        "adapter": {"num_heads": 2, "init": "random", **_fields(options.get("adapter", "pals"))},
    }
    module = MultiTaskModule(encoder_config=TINY_BERT, **options).eval()
    single = SingleTaskModel(module, "qqp")
    path = export_onnx(single, tmp_path / "qqp.onnx", single.example_inputs(module.tokenizer))
    inputs = batch_inputs(module, "qqp")
    out = ort.InferenceSession(str(path)).run(
        None, {n: t.numpy() for n, t in zip(single.input_names, inputs, strict=True)}
    )[0]
    with torch.no_grad():
        ref = single(*inputs).numpy()
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.from_numpy(ref), module_output(module, "qqp", inputs), rtol=0, atol=1e-5)
