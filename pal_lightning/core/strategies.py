"""Which Lightning strategies train a multi-task model, and the one setting plain DDP needs.

A step trains one task (or the tasks its mixed batch holds), so the other tasks' per-task modules and
heads take no part in that step's loss. PyTorch's ``DistributedDataParallel`` then waits for gradients
that never come unless it is built with ``find_unused_parameters=True``; the ``0 * p.sum()`` trick would
avoid that but give the absent tasks zero gradients, which AdamW's momentum and weight decay turn into
updates (docs/design.md, "Invariants under DDP"). So a DDP strategy that was not told either way is
told to look for unused parameters: ``--trainer.strategy ddp`` then trains exactly as
``ddp_find_unused_parameters_true`` does. Sharded strategies (FSDP, DeepSpeed) and TPU strategies are
refused: nothing here has been tested under them.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import (
    DDPStrategy,
    DeepSpeedStrategy,
    SingleDeviceStrategy,
    SingleDeviceXLAStrategy,
    Strategy,
    StrategyRegistry,
    XLAStrategy,
)

from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import ddp_constructor_kwargs

SUPPORTED = (
    "auto, a single device, or the DDP family (ddp, ddp_spawn, ddp_fork, ddp_notebook and their "
    "_find_unused_parameters_* forms)"
)


def _supported(cls: type) -> bool:
    # DeepSpeed and XLA subclass DDPStrategy but shard or compile differently: not tested here
    if issubclass(cls, (DeepSpeedStrategy, XLAStrategy, SingleDeviceXLAStrategy)):
        return False
    return issubclass(cls, (DDPStrategy, SingleDeviceStrategy))


def _refusal(what: str) -> PalUserError:
    return PalUserError(
        f"Strategy {what} is not supported: pal-lightning trains with {SUPPORTED}. "
        "Set --trainer.strategy ddp (several devices or processes) or auto."
    )


def check_strategy_name(strategy: Any) -> None:
    """Refuse a strategy given by its registered name (``"fsdp"``, ``"deepspeed_stage_2"``, ...) that is not
    of the DDP family or a single device, before a run folder is made. Other values (``"auto"``, a
    strategy object, a ``class_path``) are checked by :func:`prepare_strategy` once the Trainer exists.

    Raises:
        PalUserError: naming the strategy and the supported ones.
    """
    if not isinstance(strategy, str) or strategy not in StrategyRegistry:
        return
    if not _supported(StrategyRegistry[strategy]["strategy"]):
        raise _refusal(repr(strategy))


def prepare_strategy(strategy: Strategy) -> None:
    """Refuse a strategy this library does not train with, and let a DDP strategy that was not told
    ``find_unused_parameters`` look for unused parameters (an explicit ``False`` is left as given).

    Called from ``MultiTaskModule.setup``: after the Trainer is built and before the strategy wraps the
    model, in every process (``ddp_spawn`` included).

    Raises:
        PalUserError: for a strategy outside the DDP family and single devices.
    """
    if not _supported(type(strategy)):
        raise _refusal(type(strategy).__name__)
    if isinstance(strategy, DDPStrategy):
        ddp_constructor_kwargs(strategy).setdefault("find_unused_parameters", True)
