"""``trainer.precision: auto``: the decision table, the machine probe, and the CLI taking it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pal_lightning.cli import precision as P
from pal_lightning.cli.fit import PalLightningCLI
from pal_lightning.cli.main import main
from pal_lightning.cli.precision import DeviceCapabilities, choose_precision, resolve_precision


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        (DeviceCapabilities("cuda", bf16=True, fp16_tensor_cores=True), "bf16-mixed"),  # A100, H100
        (DeviceCapabilities("cuda", bf16=False, fp16_tensor_cores=True), "16-mixed"),  # T4, V100
        (DeviceCapabilities("cuda"), "32-true"),  # P100 and older: no tensor cores
        (DeviceCapabilities("cpu", bf16=True), "bf16-mixed"),  # avx512_bf16 / AMX
        (DeviceCapabilities("cpu"), "32-true"),  # bf16 would be emulated: fp32 is the safe choice
        (DeviceCapabilities("mps", bf16=True, fp16_tensor_cores=True), "32-true"),  # not measured
    ],
)
def test_the_decision_table(caps: DeviceCapabilities, expected: str) -> None:
    assert choose_precision(caps) == expected


def test_cpu_probe_reads_torchs_feature_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert P.cpu_bf16_instructions() == "avx512_bf16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert P.cpu_bf16_instructions() == "amx+avx512_bf16"
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert P.cpu_bf16_instructions() == ""
    caps = P.device_capabilities("cpu")
    assert caps == DeviceCapabilities("cpu", bf16=False, detail="no bf16 instructions")
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)  # a torch without the probes
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert P.cpu_bf16_instructions() == ""


def test_target_device_and_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert P.target_device("auto") == "cpu" and P.target_device("cpu") == "cpu"
    assert P.target_device("gpu") == "gpu"  # no GPU: Lightning refuses the Trainer, not us
    from lightning.pytorch.accelerators import CPUAccelerator

    assert P.target_device(CPUAccelerator()) == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert P.target_device("auto") == "mps" and P.target_device("cpu") == "cpu"
    # every value but "auto" passes unchanged (Lightning checks it)
    for value in ("32-true", "bf16-mixed", 16, None, "nonsense"):
        assert resolve_precision(value, "cpu") == value
    monkeypatch.setattr(P, "cpu_bf16_instructions", lambda: "amx")
    assert resolve_precision("auto", "cpu") == "bf16-mixed"
    monkeypatch.setattr(P, "cpu_bf16_instructions", lambda: "")
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("auto", "auto") == "32-true"  # "auto" on an MPS machine: not measured


def test_cli_takes_auto_and_builds_the_chosen_plugin(
    tiny_yaml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["pal-lightning"])
    expected = choose_precision(P.device_capabilities("cpu"))  # this machine's own answer
    cli = PalLightningCLI(args=["--config", str(tiny_yaml), "--trainer.precision", "auto"], run=False)
    assert isinstance(cli.trainer, P.PalTrainer)
    assert cli.trainer.precision == expected
    # the decision for a bf16 CPU, forced: Lightning's mixed plugin, still the fused optimizer (no scaler)
    monkeypatch.setattr(P, "cpu_bf16_instructions", lambda: "avx512_bf16")
    cli = PalLightningCLI(args=["--config", str(tiny_yaml), "--trainer.precision", "auto"], run=False)
    assert cli.trainer.precision == "bf16-mixed"
    cli.trainer.strategy.connect(cli.model)  # configure_optimizers reads the attached trainer
    cli.model.trainer = cli.trainer
    cli.datamodule.setup("fit")
    optimizer = cli.model.configure_optimizers()["optimizer"]
    assert optimizer.defaults["fused"]


def test_bf16_mixed_fit_clips_with_the_fused_optimizer(tiny_yaml: Path) -> None:
    # Lightning's bf16 plugin would refuse to clip with a fused AdamW; the module clips the true gradients
    args = "--trainer.precision bf16-mixed --trainer.gradient_clip_val 0.01 --trainer.max_steps 2".split()
    assert main(["fit", "--config", str(tiny_yaml), *args]) == 0
