"""Every use of a private Lightning, jsonargparse or torch name, in one place, each with why the public API
does not do the job and what would replace it. The rest of the package uses the public names defined here.

Written against Lightning 2.6 and jsonargparse 4.46+; ``tests/core/test_private_api.py`` checks that each private
name still exists, so that a breaking upgrade fails one clear test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.connector import _PRECISION_INPUT
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

if TYPE_CHECKING:
    import lightning.pytorch as pl


class CheckpointHooks(ModelCheckpoint):
    """``ModelCheckpoint`` with public hooks for ``_save_topk_checkpoint`` (where the monitored value is
    ranked) and ``_save_checkpoint`` (where a file is written).

    Public replacement: none in Lightning 2.6 (``on_save_checkpoint`` knows neither path nor ranking).
    """

    def rank_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        """Rank the monitored value and save a top-k checkpoint if it qualifies (Lightning's default)."""
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def write_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        """Write the checkpoint file ``filepath`` (a collective under DDP: it ends with a barrier)."""
        super()._save_checkpoint(trainer, filepath)

    def record_saved(self, trainer: pl.Trainer, filepath: str) -> None:
        """Note ``filepath`` as this callback's latest save at the current step (as a real write does)."""
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    # the private names Lightning calls
    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict[str, Any]) -> None:
        self.rank_checkpoint(trainer, monitor_candidates)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        self.write_checkpoint(trainer, filepath)


def last_saved(callback: ModelCheckpoint) -> tuple[str, int]:
    """The file a ``ModelCheckpoint`` last wrote (``""``: none yet) and the global step it wrote it at.

    Public replacement: none (``last_model_path`` is only ``save_last``'s file; no step is kept).
    """
    path = getattr(callback, "_last_checkpoint_saved", "") or ""
    step = getattr(callback, "_last_global_step_saved", -1)
    return str(path), int(step if step is not None else -1)


class CLIHooks(LightningCLI):
    """``LightningCLI`` with public hooks for two private steps.

    :meth:`configure_subcommand_parser` runs on each subcommand's parser (``_prepare_subcommand_parser``;
    ``add_arguments_to_parser`` does not see the ``Trainer`` method's arguments);
    ``merge_checkpoint_hparams = False`` turns off ``_parse_ckpt_path``, which puts a ``--ckpt_path``
    file's hyper-parameters over the configuration. Public replacement: none in Lightning 2.6.
    """

    #: Whether ``--ckpt_path``'s saved hyper-parameters replace the configured model (Lightning's default).
    merge_checkpoint_hparams: bool = True

    def configure_subcommand_parser(
        self, parser: LightningArgumentParser, subcommand: str, method_arguments: list[str]
    ) -> None:
        """Change the parser of ``subcommand`` (``method_arguments``: the ``Trainer`` method's arguments it took)."""

    def _prepare_subcommand_parser(
        self, klass: type, subcommand: str, **kwargs: Any
    ) -> LightningArgumentParser:
        parser = super()._prepare_subcommand_parser(klass, subcommand, **kwargs)
        arguments = list(getattr(self, "_subcommand_method_arguments", {}).get(subcommand, []))
        self.configure_subcommand_parser(parser, subcommand, arguments)
        return parser

    def _parse_ckpt_path(self) -> None:
        if self.merge_checkpoint_hparams:
            super()._parse_ckpt_path()


def subcommand_help_actions(parser: Any) -> list[Any]:
    """The argparse actions whose ``help`` ``pal-lightning --help`` shows per subcommand (``dest``: its name).

    Public replacement: ``add_subcommand(..., help=...)``, which Lightning calls with a cut docstring line.
    """
    action = getattr(parser, "_subcommands_action", None)
    return list(getattr(action, "_choices_actions", []))


def subcommand_parsers(parser: Any) -> dict[str, Any]:
    """The parser of each subcommand by name. Public replacement: an ``epilog`` in ``parser_kwargs``."""
    return dict(getattr(getattr(parser, "_subcommands_action", None), "choices", None) or {})


def attached_trainer(module: object) -> pl.Trainer | None:
    """The Trainer ``module`` is attached to, or ``None`` (``module.trainer`` raises). Public replacement: none."""
    return getattr(module, "_trainer", None)


def disable_distributed_sampler(trainer: pl.Trainer) -> bool | None:
    """Turn off the trainer's ``use_distributed_sampler``; whether it was on (``None``: not reachable).

    The data module shards by rank itself. Public replacement: ``Trainer(use_distributed_sampler=False)``,
    which the CLI passes; this covers users' own Trainers.
    """
    connector = getattr(trainer, "_accelerator_connector", None)
    if connector is None or not hasattr(connector, "use_distributed_sampler"):
        return None
    was_on = bool(connector.use_distributed_sampler)
    connector.use_distributed_sampler = False
    return was_on


def ddp_constructor_kwargs(strategy: Any) -> dict[str, Any]:
    """The keyword arguments a ``DDPStrategy`` will pass to ``DistributedDataParallel`` (a live dict: a change
    before the strategy's ``setup`` is what the wrapper is built with).

    Public replacement: ``DDPStrategy(find_unused_parameters=True)``, which only the Trainer's own
    construction can use; a strategy named by a string (``"ddp"``) is built by Lightning.
    """
    kwargs: dict[str, Any] = strategy._ddp_kwargs
    return kwargs


#: The type of ``Trainer(precision=...)`` (for ``PalTrainer``). Public replacement: none in Lightning 2.6.
LightningPrecision = _PRECISION_INPUT


def optimizer_unscales_itself(optimizer: object) -> bool:
    """Whether ``optimizer.step()`` unscales fp16 gradients itself (fused). Public replacement: none."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def clip_gradients_unchecked(plugin: Any, optimizer: Any, clip_val: float, algorithm: str | None) -> None:
    """Clip as the base ``Precision`` plugin does, skipping ``MixedPrecision``'s refusal of fused optimizers
    (needless without a loss scale, under bf16-mixed). Public replacement: none in Lightning 2.6."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.utilities import GradClipAlgorithmType

    Precision.clip_gradients(plugin, optimizer, clip_val, GradClipAlgorithmType(algorithm or "norm"))


def cpu_bf16_instructions() -> str:
    """The CPU's bf16 matrix instructions torch uses (``"amx"``, ``"avx512_bf16"``, joined by ``+``), or ``""``.

    Public replacement: none in torch 2.13.
    """
    found = []
    for name, probe in (("amx", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported")):
        check = getattr(torch.cpu, probe, None)
        try:
            if check is not None and check():
                found.append(name)
        except RuntimeError:  # pragma: no cover - a probe this build cannot answer
            continue
    return "+".join(found)


#: A mode that sees every ATen operator as it is dispatched (benchmarks/op_count.py). Public replacement:
#: none in torch 2.13.
from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchMode  # noqa: E402

#: ``torch._foreach_add_(xs, ys)``: every ``x += y`` of two lists in one operator (GEM's write-back).
#: Public replacement: none in torch 2.13.
foreach_add_ = torch._foreach_add_


#: torch's private compiler packages, to tell "compiling failed" from "the model raised". Public
#: replacement: none (no public base class of compiler errors).
COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch._subclasses")


def validate_during_fit(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Run the fit's validation loop now, as Lightning runs it between training batches.

    Public replacement: none (``trainer.validate`` starts another stage and restarts the fit's loops).
    """
    trainer.validating = True  # picks the validation loop's logging and progress bar
    pl_module.on_validation_model_zero_grad()
    try:
        trainer.fit_loop.epoch_loop.val_loop.run()
    finally:
        trainer.training = True
