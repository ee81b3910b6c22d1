"""The optimizer's settings as one group, ``MultiTaskModule(optim=...)`` (``--model.optim.lr``): :class:`OptimConfig`,
its checks, and the conversion of hyper-parameters saved before the group existed (flat ``lr``, ``head_lr``, ...)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, fields
from typing import Any

from pal_lightning.core.errors import PalUserError


@dataclass(frozen=True)
class OptimConfig:
    """AdamW's peak learning rates and weight decay, the warmup of the linear schedule, and what stays frozen
    (frozen itself, so that one instance can be the module's default)."""

    lr: float = 3e-5
    """Peak learning rate of the pretrained encoder weights."""
    head_lr: float = 5e-4
    """Peak learning rate of the new parameters (heads, and adapters unless ``adapter_lr`` is set)."""
    adapter_lr: float | None = None
    """Peak learning rate of the adapters; ``None`` means ``head_lr``."""
    layer_lr_decay: float = 1.0
    """Layer ``l`` of ``L`` gets ``lr * layer_lr_decay**(L - l)``; 1.0 = one rate."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay, not applied to biases and LayerNorm weights."""
    warmup_ratio: float = 0.1
    """Fraction of the total optimizer steps spent warming up linearly."""
    warmup_steps: int | None = None
    """Absolute number of warmup steps; overrides ``warmup_ratio`` when set."""
    freeze_embeddings: bool = False
    """Keep the pretrained embedding layer fixed."""
    freeze_encoder: bool = False
    """Keep every pretrained weight fixed and train only adapters and heads."""

    def check(self) -> None:
        """Raise :class:`PalUserError` naming the option and the fix for a value out of range."""
        # each check says what a good value satisfies, so NaN fails; a string, None or a bool as a non-number
        if not (_is_number(self.warmup_ratio) and 0.0 <= self.warmup_ratio <= 1.0):
            raise PalUserError(f"optim.warmup_ratio must lie in [0, 1], got {self.warmup_ratio}.")
        steps = self.warmup_steps
        if steps is not None and not (_is_number(steps) and math.isfinite(steps) and steps >= 0):
            raise PalUserError(
                f"optim.warmup_steps must be >= 0 (or None to use optim.warmup_ratio), got {self.warmup_steps}."
            )
        if not (_is_number(self.layer_lr_decay) and 0.0 < self.layer_lr_decay <= 1.0):
            raise PalUserError(
                f"optim.layer_lr_decay must lie in (0, 1] (1 = no decay), got {self.layer_lr_decay}."
            )
        for name in ("lr", "head_lr", "adapter_lr", "weight_decay"):
            value = getattr(self, name)
            if value is None and name == "adapter_lr":  # None: head_lr
                continue
            # each check says what a good value satisfies, so NaN (and None, a string) fails
            number = _is_number(value) and math.isfinite(value)
            if name == "weight_decay":
                good, what = number and value >= 0.0, "a finite number >= 0"
            else:
                good, what = number and value > 0.0, "a finite number > 0"
            if not good:
                raise PalUserError(f"optim.{name} must be {what}, got {value} (--model.optim.{name}).")

    @property
    def peak_adapter_lr(self) -> float:
        """The adapters' peak learning rate: ``adapter_lr``, else ``head_lr``."""
        return self.head_lr if self.adapter_lr is None else self.adapter_lr


def _is_number(value: Any) -> bool:
    # not a bool: YAML's true/yes is an int (1) to Python, never meant as a rate or a step count
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: The defaults (one shared instance: the config is frozen).
DEFAULT_OPTIM = OptimConfig()

#: The options of :class:`OptimConfig`, which were ``MultiTaskModule`` arguments of their own before the group existed.
OPTIM_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(OptimConfig))


def as_optim_config(value: OptimConfig | Mapping[str, Any] | None) -> OptimConfig:
    """An :class:`OptimConfig` from itself, a mapping of its options (YAML, a checkpoint) or ``None`` (the
    defaults), checked."""
    if value is None:
        config = OptimConfig()
    elif isinstance(value, OptimConfig):
        config = value
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - set(OPTIM_FIELDS))
        if unknown:
            raise PalUserError(f"optim has no option(s) {unknown}: its options are {list(OPTIM_FIELDS)}.")
        # jsonargparse hands `--model.optim.adapter_lr null` over as the string "None"
        options: dict[str, Any] = {k: None if v == "None" else v for k, v in value.items()}
        config = OptimConfig(**options)
    else:
        raise PalUserError(f"optim must be an OptimConfig, a mapping or null, got {type(value).__name__}.")
    config.check()
    return config


def moved_message(name: str) -> str:
    """The one line for a module option that moved into ``optim``."""
    return f"{name} moved: use optim.{name} (--model.optim.{name}; in YAML model.init_args.optim.{name})."


def refuse_moved(names: Iterable[str]) -> None:
    """Raise :class:`PalUserError` with :func:`moved_message` for the first of ``names`` that moved into ``optim``."""
    for name in names:
        if name in OPTIM_FIELDS:
            raise PalUserError(moved_message(name))


def with_optim_group(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Saved hyper-parameters of a ``MultiTaskModule`` in today's shape: the flat optimizer options written
    before the group existed (``lr``, ``head_lr``, ...) gathered into ``optim`` (over the defaults); others as they are."""
    flat = {k: hparams[k] for k in OPTIM_FIELDS if k in hparams}
    if not flat:
        return dict(hparams)
    rest = {k: v for k, v in hparams.items() if k not in flat}
    given = rest.get("optim")
    given = asdict(given) if isinstance(given, OptimConfig) else dict(given or {})
    # over an optim also present: the defaults a loader filled in (Lightning, jsonargparse)
    return {**rest, "optim": {**asdict(OptimConfig()), **given, **flat}}


# set while Lightning's load_from_checkpoint builds the module from a checkpoint's hyper-parameters
_LOADING_SAVED: ContextVar[bool] = ContextVar("pal_loading_saved_hparams", default=False)


@contextmanager
def loading_saved_hparams(overrides: Mapping[str, Any] = {}) -> Iterator[None]:  # noqa: B006 - read only
    """Within: the module is being rebuilt from saved hyper-parameters, which may be of the flat shape;
    ``overrides`` (the loader's keyword arguments, today's shape) must not hold a flat name."""
    refuse_moved(overrides)
    token = _LOADING_SAVED.set(True)
    try:
        yield
    finally:
        _LOADING_SAVED.reset(token)


def optim_of(
    optim: OptimConfig | Mapping[str, Any] | None, others: Mapping[str, Any], owner: str
) -> OptimConfig:
    """``MultiTaskModule``'s :class:`OptimConfig` from its ``optim`` argument; ``others``, the keyword arguments
    it has no parameter for, must be empty, except for saved hyper-parameters being loaded
    (:func:`loading_saved_hparams`), where flat optimizer options are gathered into ``optim`` and other names
    dropped (as Lightning drops them for a class without ``**kwargs``).

    Raises:
        PalUserError: for a flat optimizer option, naming where it moved.
        TypeError: for any other unknown argument, as Python would.
    """
    if _LOADING_SAVED.get():
        return as_optim_config(with_optim_group({**others, "optim": optim}).get("optim"))
    refuse_moved(others)
    for name in others:  # as Python says it: saved_class.built turns it into "saved from another class"
        raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {name!r}")
    return as_optim_config(optim)
