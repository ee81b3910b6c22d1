"""Plain values: what hyper-parameters, configs and saved files hold, with one spelling of each value.

Configs and checkpoints meet the same value in several forms: a tuple from Python and a list from YAML or
JSON, an enum and its string, a dataclass and its field dict. Comparing or saving them goes through
:func:`to_plain` first, so equal values compare equal and everything written is JSON- and
``weights_only``-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any


def to_plain(value: Any) -> Any:
    """``value`` as JSON values: mappings as dicts with string keys, tuples and lists as lists, enums as
    their value and dataclass instances as their field dicts, recursively; anything else unchanged."""
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(dataclasses.asdict(value))
    return value
