"""The data module's options: one documented dataclass, exposed field by field; the phase plan and
annealing horizon as pure functions; the deprecated names still answering."""

from __future__ import annotations

import dataclasses
import inspect
import math
from pathlib import Path

import pytest
from docstring_parser import parse
from jsonargparse import ArgumentParser

from pal_lightning.core.config_fields import args_section, bind_fields, field_docs
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.options import DataConfig
from pal_lightning.data.sampling.phase_plan import PhasePlan, plan_phases
from pal_lightning.data.sampling.schedules import annealing_horizon
from pal_lightning.tasks.specs import TaskSpec

#: The constructor arguments of MultiTaskDataModule before its options became a dataclass, in order:
#: every config and command line written for it must keep working.
OPTIONS = (
    "tasks tokenizer data_dir batch_size eval_batch_size max_length pair_encoding sampling task_weights "
    "task_multipliers steps_per_epoch anneal_epochs on_bad_row max_bad_rows_fraction detokenize group_by_length pad_to_multiple_of cache_dir "
    "num_workers seed predict_splits limit_examples schedule task_order steps_per_task epochs_per_task "
    "tokenizer_revision validation_fraction validation_seed batch_mixing sampling_temperature"
).split()


def test_every_option_is_an_argument_with_its_default_and_doc() -> None:
    params = inspect.signature(MultiTaskDataModule.__init__).parameters
    assert list(params)[1:] == OPTIONS
    assert params["batch_size"].default == 32 and params["sampling"].default == "annealed"
    assert params["tasks"].default == ("sst", "qqp", "sts")
    docs = {p.arg_name: p.description for p in parse(inspect.getdoc(MultiTaskDataModule) or "").params}
    assert set(docs) == set(OPTIONS) and all(docs.values())
    assert docs["batch_size"].startswith("Training batch size per rank")


def test_lightning_cli_parser_exposes_each_field_with_its_doc(capsys: pytest.CaptureFixture[str]) -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(MultiTaskDataModule, "data")
    cfg = parser.parse_args(["--data.batch_size", '{"sst": 4}', "--data.schedule", "sequential"])
    assert cfg.data.batch_size == {"sst": 4} and cfg.data.schedule == "sequential"
    assert cfg.data.max_length == 128  # untouched options keep their defaults
    parser.print_help()
    shown = " ".join(capsys.readouterr().out.split())
    for name in OPTIONS:
        assert f"--data.{name}" in shown
    assert "Longest tokenised sequence (special tokens included)" in shown


def test_positional_keyword_and_unknown_arguments() -> None:
    config = bind_fields(DataConfig, (["sst"], "some-encoder"), {"seed": 7})
    assert (list(config.tasks), config.tokenizer, config.seed) == (["sst"], "some-encoder", 7)
    with pytest.raises(TypeError, match="bogus"):
        MultiTaskDataModule(bogus=1)
    with pytest.raises(TypeError, match="multiple values"):
        bind_fields(DataConfig, (["sst"],), {"tasks": ["qqp"]})


def test_from_config_equals_keywords(tmp_path: Path) -> None:
    kw = dict(tasks=["sst", "sts"], batch_size={"default": 4, "sts": 2}, cache_dir=False, data_dir=tmp_path)
    a = MultiTaskDataModule(**kw)
    b = MultiTaskDataModule.from_config(DataConfig(**kw))  # type: ignore[arg-type]
    assert dict(a.hparams) == dict(b.hparams)
    assert a.batch_sizes == b.batch_sizes == {"sst": 4, "sts": 2}


def test_hyperparameters_are_plain_values(tmp_path: Path) -> None:
    custom = TaskSpec(name="mine", files={"train": "t.csv", "dev": "d.csv"})
    dm = MultiTaskDataModule(
        tasks=["sst", custom],
        data_dir=tmp_path,
        cache_dir=tmp_path / "cache",
        predict_splits=("dev",),
        task_multipliers={},
        schedule="sequential",
        task_order=("mine", "sst"),
    )
    hp = dict(dm.hparams)
    assert hp["tasks"][0] == "sst" and isinstance(hp["tasks"][1], dict) and hp["tasks"][1]["name"] == "mine"
    assert hp["data_dir"] == str(tmp_path) and hp["cache_dir"] == str(tmp_path / "cache")
    assert hp["predict_splits"] == ["dev"] and hp["task_order"] == ["mine", "sst"]
    assert hp["task_multipliers"] is None  # an empty mapping is no multiplier at all
    assert set(hp) == set(OPTIONS)
    off = MultiTaskDataModule(tasks=["sst"], cache_dir=False)
    assert off.hparams["cache_dir"] is False and off.cache_dir is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(sampling="nope"), "Unknown sampling 'nope'"),
        (dict(on_bad_row="ignore"), "on_bad_row must be one of"),
        (dict(max_bad_rows_fraction=-0.1), "max_bad_rows_fraction is a share of the rows"),
        (dict(max_bad_rows_fraction=1.5), "max_bad_rows_fraction is a share of the rows"),
        (dict(predict_splits=["train", "val"]), "predict_splits must be among"),
        (dict(max_length=4), "max_length must be >= 8, got 4"),
        (dict(limit_examples=0), "limit_examples must be >= 1 or None, got 0"),
        (dict(validation_fraction=1.0), "validation_fraction is the share of each train split"),
        (dict(schedule="parallel"), "Unknown schedule 'parallel'"),
        (dict(task_order=["sst"]), "task_order only apply to schedule='sequential'"),
        (dict(schedule="sequential", task_multipliers={"sst": 2.0}), "Drop task_multipliers"),
    ],
)
def test_options_are_checked_when_the_config_is_built(options: dict, message: str) -> None:
    with pytest.raises(PalUserError, match=message.replace("(", r"\(").replace("[", r"\[")):
        DataConfig(**options)


def test_phase_lengths_by_hand() -> None:
    sizes, batch = {"a": 10, "b": 7, "c": 5}, {"a": 3, "b": 2, "c": 5}
    # one pass over a task is ceil(N / (B W)) global batches: W = 2 -> a: ceil(10/6) = 2, b: ceil(7/4) = 2
    plan = plan_phases("sequential", ["b", "a"], None, 1.5, ["a", "b", "c"])
    assert plan.lengths(sizes, batch, 2) == [("b", 3), ("a", 3)]
    default = plan_phases("sequential", None, None, None, ["a", "b", "c"])
    assert default.lengths(sizes, batch, 1) == [("a", 4), ("b", 4), ("c", 1)]
    tiny = plan_phases("sequential", ["c"], None, 0.01, ["a", "b", "c"])
    assert tiny.lengths(sizes, batch, 1) == [("c", 1)]  # at least one batch
    steps = plan_phases("sequential", ["c", "a"], {"default": 2, "a": 5}, None, ["a", "b", "c"])
    assert steps.lengths({}, batch, 8) == [("c", 2), ("a", 5)]  # given in batches: no sizes needed
    assert plan_phases("interleaved", None, None, None, ["a"]) == PhasePlan()
    with pytest.raises(PalUserError, match=r"repeated \['a'\]"):
        plan_phases("sequential", ["a", "a"], None, None, ["a", "b"])
    with pytest.raises(RuntimeError, match="after setup"):
        plan.lengths({}, batch, 1)


def test_annealing_horizon() -> None:
    def never() -> int:
        raise AssertionError("steps_per_epoch is only needed for step-based training")

    assert annealing_horizon(3, 1000, never) == 3
    assert annealing_horizon(1, 1000, never) == 1
    assert annealing_horizon(0, 200, lambda: 50) == 4  # max_epochs=0 sets nothing: never a horizon of 0
    assert annealing_horizon(None, 200, lambda: 50) == math.ceil(200 / 50) == 4
    assert annealing_horizon(-1, 201, lambda: 50) == 5  # max_epochs=-1 means unlimited
    assert annealing_horizon(None, 10, lambda: 50) == 1
    assert annealing_horizon(None, -1, never) == annealing_horizon(None, None, never) == 1


def test_the_sampling_schedule_waits_for_setup_and_the_task_schedule_is_the_option(tmp_path: Path) -> None:
    dm = MultiTaskDataModule(tasks=["sst"], cache_dir=False, data_dir=tmp_path)
    assert dm.sampling_schedule is None  # set by setup("fit")
    assert dm.task_schedule == "interleaved"


def test_field_docs_and_args_section_of_a_dataclass() -> None:
    @dataclasses.dataclass
    class Options:
        width: int = 3
        """How wide.

        Two lines."""
        undocumented: bool = False
        name: str = "x"
        """The name."""

    assert field_docs(Options) == {"width": "How wide.\n\nTwo lines.", "name": "The name."}
    assert args_section(Options) == "Args:\n    width: How wide.\n\n        Two lines.\n    name: The name."


def test_eval_dataloader_checks_its_arguments_before_reading(tmp_path: Path) -> None:
    dm = MultiTaskDataModule(tasks=["sst"], cache_dir=False, data_dir=tmp_path)  # an empty folder
    with pytest.raises(PalUserError, match=r"limit_examples must be >= 1 or None, got 0"):
        dm.eval_dataloader(limit_examples=0)
    with pytest.raises(PalUserError, match=r"Unknown tasks \['qqp'\]"):
        dm.eval_dataloader(tasks=["qqp"])
