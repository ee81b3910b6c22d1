"""The score report names what fit and validate scored: the dev set, or validation carved from train."""

from __future__ import annotations

from types import SimpleNamespace

from pal_lightning.callbacks.score_report import score_headline, validation_split_name


def trainer_with(fraction: float | None) -> SimpleNamespace:
    return SimpleNamespace(datamodule=SimpleNamespace(config=SimpleNamespace(validation_fraction=fraction)))


def test_carved_validation_is_not_called_dev() -> None:
    assert validation_split_name(trainer_with(None)) == "dev"
    assert validation_split_name(trainer_with(0.1)) == "validation"
    assert validation_split_name(SimpleNamespace(datamodule=None)) == "dev"
    entry = {"scores": {"val/overall": 0.5}, "tasks_covered": ["topics", "reviews"]}
    line = score_headline(entry, "val/overall", 1.0, validation_split_name(trainer_with(0.1)))
    assert line == "Overall (validation): 0.5000"
