"""The probability columns of prediction files (pal_lightning.core.columns)."""

from __future__ import annotations

from pal_lightning.core.columns import probability_columns


def test_probability_columns_stay_distinct_when_a_class_is_named_like_a_repeat() -> None:
    # "x y" and "x-y" both become p_x_y; the repeat's p_x_y_2 is also the third class's own name
    columns = probability_columns(["x y", "x-y", "x_y_2"])
    assert len(set(columns)) == 3
    assert columns[:2] == ["p_x_y", "p_x_y_2"]
