"""``to_plain``: one spelling of each value that hyper-parameters, configs and saved files hold (a tuple
and a YAML list, an enum and its string compare equal), JSON- and ``weights_only``-safe."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any


def to_plain(value: Any) -> Any:
    """``value`` as JSON values, recursively: mappings as dicts with string keys, tuples as lists, enums as
    their value, dataclass instances as their field dicts."""
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(dataclasses.asdict(value))
    return value
