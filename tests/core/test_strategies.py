"""Which strategies train, and plain DDP told to find the parameters a step leaves unused
(pal_lightning.core.strategies)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy

from pal_lightning.cli.main import main
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import ddp_constructor_kwargs
from pal_lightning.core.strategies import check_strategy_name, prepare_strategy
from pal_lightning.testing import quiet_trainer


@pytest.mark.parametrize(
    "name", ["fsdp", "fsdp_cpu_offload", "deepspeed", "deepspeed_stage_2", "xla", "single_xla"]
)
def test_sharded_and_tpu_strategies_are_refused_by_name(name: str) -> None:
    with pytest.raises(PalUserError, match=rf"Strategy '{name}' is not supported.*--trainer.strategy ddp"):
        check_strategy_name(name)


@pytest.mark.parametrize("name", ["ddp", "ddp_spawn", "ddp_find_unused_parameters_false", "single_device"])
def test_ddp_family_and_single_device_names_pass(name: str) -> None:
    check_strategy_name(name)  # and values that are not registered names wait for the Trainer:
    check_strategy_name("auto")
    check_strategy_name(None)
    check_strategy_name({"class_path": "lightning.pytorch.strategies.FSDPStrategy"})


@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "auto"])
def test_plain_ddp_is_told_to_find_unused_parameters_and_an_explicit_false_stays(strategy: str) -> None:
    plain = quiet_trainer(strategy=strategy, accelerator="cpu", devices=2).strategy  # auto: DDP over 2
    assert isinstance(plain, DDPStrategy) and "find_unused_parameters" not in ddp_constructor_kwargs(plain)
    prepare_strategy(plain)
    assert ddp_constructor_kwargs(plain)["find_unused_parameters"] is True
    explicit = DDPStrategy(find_unused_parameters=False)
    prepare_strategy(explicit)
    assert ddp_constructor_kwargs(explicit)["find_unused_parameters"] is False
    prepare_strategy(SingleDeviceStrategy("cpu"))  # nothing to tell, nothing refused
    with pytest.raises(PalUserError, match="Strategy FSDPStrategy is not supported"):
        prepare_strategy(FSDPStrategy())


def test_the_cli_refuses_fsdp_in_one_line_before_a_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["fit", "--trainer.strategy", "fsdp", "--trainer.default_root_dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and "Strategy 'fsdp' is not supported" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "runs").exists()
