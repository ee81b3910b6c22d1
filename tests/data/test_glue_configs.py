"""The GLUE-small configs (configs/glue_small*.yaml; that every config parses is tests/cli/test_cli.py's):
their numbers against what they claim: one pass over the carved train splits, the separate runs' steps
equal to the joint run's expected draws of each task, LoRA and bottleneck adapters at PALs' per-task
weights (checked once those methods are registered)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from pal_lightning.data.sampling.schedules import SamplingSchedule
from pal_lightning.data.stage_splits import carve

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
#: train rows of GLUE's download (../shared/data/README.md)
TRAIN_ROWS = {"glue_cola": 8551, "glue_sst2": 67349, "glue_mrpc": 3668, "glue_stsb": 5749, "glue_rte": 2490}
#: what the separate configs' headers say, per task
SEPARATE_STEPS = {"glue_cola": 378, "glue_sst2": 1336, "glue_mrpc": 249, "glue_stsb": 308, "glue_rte": 209}


def _chain(name: str) -> dict[str, Any]:
    """The dotted keys of ``name`` over those of the files it starts from (glue_small.yaml's base, the
    quickstart, is not read: its keys are nested)."""
    raw = yaml.safe_load((CONFIGS / name).read_text())
    base = raw.pop("config")
    return {**(_chain(base) if base.startswith("glue_small") else {}), **raw}


def _train_sizes(fraction: float) -> dict[str, int]:
    return {t: len(carve(n, fraction, 0, t)[0]) for t, n in TRAIN_ROWS.items()}


def test_glue_small_is_about_one_pass_with_validation_carved_from_train() -> None:
    config = _chain("glue_small.yaml")
    assert config["model.init_args.tasks"] == list(TRAIN_ROWS)
    fraction = config["data.init_args.validation_fraction"]
    sizes = _train_sizes(fraction)
    assert sum(sizes.values()) == 79026
    one_pass = sum(math.ceil(n / 32) for n in sizes.values())
    assert one_pass == 2473 and abs(config["trainer.max_steps"] - one_pass) <= 10
    assert config["trainer.max_steps"] == 4 * config["data.init_args.steps_per_epoch"]


def test_separate_runs_get_the_joint_runs_expected_draws_of_each_task() -> None:
    config = _chain("glue_small.yaml")
    steps, epoch = config["trainer.max_steps"], config["data.init_args.steps_per_epoch"]
    schedule = SamplingSchedule("annealed", num_epochs=steps // epoch)
    sizes = _train_sizes(config["data.init_args.validation_fraction"])
    draws = {t: 0.0 for t in sizes}
    for e in range(steps // epoch):
        for task, p in schedule.probabilities(sizes, e).items():
            draws[task] += p * epoch
    assert {t: round(d) for t, d in draws.items()} == SEPARATE_STEPS
    for name in ("glue_small_separate.yaml", "glue_small_base_separate.yaml"):
        separate = _chain(name)
        (task,) = separate["model.init_args.tasks"]
        assert (
            separate["trainer.max_steps"]
            == SEPARATE_STEPS[task]
            == separate["data.init_args.steps_per_epoch"]
        )
        assert separate["model.init_args.adapter.method"] == "none"


@pytest.mark.parametrize(
    ("name", "width", "layers"),
    [
        ("glue_small_lora.yaml", 384, 6),
        ("glue_small_bottleneck.yaml", 384, 6),
        ("glue_small_base_lora.yaml", 768, 12),
        ("glue_small_base_bottleneck.yaml", 768, 12),
    ],
)
def test_lora_and_bottleneck_match_pals_per_task_weights(name: str, width: int, layers: int) -> None:
    from pal_lightning.modeling.methods import METHODS, get_method
    from pal_lightning.modeling.methods.config import AdapterConfig

    config = _chain(name)
    method, size = config["model.init_args.adapter.method"], config["model.init_args.adapter.size"]
    if method not in METHODS:
        pytest.skip(f"adapter method {method!r} is not registered yet")
    pals = get_method("pals").weight_formula(
        AdapterConfig(method="pals", num_heads=6), width, 204 * width // 768, layers, 4 * width
    )
    other = get_method(method).weight_formula(
        AdapterConfig(method=method, size=size), width, size, layers, 4 * width
    )
    assert abs(other - pals) / pals < 0.03, (name, other, pals)
