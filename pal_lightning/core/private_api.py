"""Every use of a private Lightning, jsonargparse or torch name, in one place.

A Lightning (or jsonargparse) upgrade that renames one of these breaks here and nowhere else. Each
entry says why the public API does not do the job and what public API would replace it. The rest of
the package uses the public names defined here: the hooks of :class:`CheckpointHooks`,
:class:`ProgressBarHooks` and :class:`CLIHooks`, and the functions below.

Written against Lightning 2.6 and jsonargparse 4.46+ (the floors that tools/version_floors.sh checks);
``tests/test_compat.py`` checks that each private name still exists, so that a breaking upgrade fails
one clear test.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.connector import _PRECISION_INPUT
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from pal_lightning.core.distributed import is_launched_rank

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = [
    "COMPILER_MODULES",
    "CLIHooks",
    "LightningPrecision",
    "TorchDispatchMode",
    "foreach_add_",
    "CheckpointHooks",
    "ProgressBarHooks",
    "attached_trainer",
    "clip_gradients_unchecked",
    "cpu_bf16_instructions",
    "optimizer_unscales_itself",
    "decided_by_rank_zero",
    "last_saved",
    "subcommand_help_actions",
    "subcommand_parsers",
    "disable_distributed_sampler",
]


# ---------------------------------------------------------------------- ModelCheckpoint


class CheckpointHooks(ModelCheckpoint):
    """``ModelCheckpoint`` with two public hooks in place of the private methods PAL changes.

    * :meth:`rank_checkpoint` wraps ``_save_topk_checkpoint``, the one place where the monitored
      value is looked up and ranked (``BestCheckpoint`` skips partial evaluations there);
    * :meth:`write_checkpoint` wraps ``_save_checkpoint``, the one place a file is written
      (``BestCheckpoint`` keeps ``best.ckpt`` beside it, ``LastCheckpoint`` links instead of writing).

    Public replacement: none in Lightning 2.6 (``on_save_checkpoint`` runs while the checkpoint dict
    is built, before the file exists, and knows neither the path nor the ranking).
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

    Read from ``_last_checkpoint_saved`` / ``_last_global_step_saved``. Public replacement: none
    (``last_model_path`` is only the ``last.ckpt`` of ``save_last``, and no public step is kept).
    """
    path = getattr(callback, "_last_checkpoint_saved", "") or ""
    step = getattr(callback, "_last_global_step_saved", -1)
    return str(path), int(step if step is not None else -1)


# ---------------------------------------------------------------------- progress bar


class ProgressBarHooks(RichProgressBar):
    """``RichProgressBar`` with a public hook for the training label (``_get_train_description``).

    Public replacement: none; the label is built inside the bar (Lightning shows "Epoch 0/-2" for a
    ``max_steps`` run, which ``RunProgressBar`` rewrites).
    """

    def epoch_description(self, current_epoch: int) -> str:
        """The label left of the training bar (Lightning's default). Not named ``train_description``:
        that is a property of Lightning's ``ProgressBar`` (the tqdm bar reads it)."""
        return super()._get_train_description(current_epoch)

    def _get_train_description(self, current_epoch: int) -> str:
        return self.epoch_description(current_epoch)


# ---------------------------------------------------------------------- LightningCLI / jsonargparse


class CLIHooks(LightningCLI):
    """``LightningCLI`` with public hooks for the two private steps PAL changes.

    * :meth:`configure_subcommand_parser` runs on each subcommand's parser once Lightning built it
      (``_prepare_subcommand_parser``); PAL sets ``weights_only=True`` and ``verbose=False`` defaults
      there. Public replacement: none (``add_arguments_to_parser`` sees only the shared arguments,
      not the ``Trainer.fit``/``validate``/... method arguments).
    * ``merge_checkpoint_hparams = False`` turns off ``_parse_ckpt_path``, which loads a
      ``--ckpt_path`` file while parsing and puts its ``hyper_parameters`` over the configuration
      (command line included). Public replacement: none in 2.6.
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
    """The argparse actions whose ``help`` ``pal-lightning --help`` shows for each subcommand (``dest``: its name).

    jsonargparse keeps them in ``parser._subcommands_action._choices_actions``. Public replacement:
    ``add_subcommand(name, parser, help=...)``, which Lightning calls with the first line of the
    ``Trainer`` method's docstring, cut mid-sentence.
    """
    action = getattr(parser, "_subcommands_action", None)
    return list(getattr(action, "_choices_actions", []))


def subcommand_parsers(parser: Any) -> dict[str, Any]:
    """The parser of each subcommand by name (``parser._subcommands_action.choices``), whose ``epilog``
    ``pal-lightning fit --help`` shows. Public replacement: an ``epilog`` in LightningCLI's ``parser_kwargs``."""
    return dict(getattr(getattr(parser, "_subcommands_action", None), "choices", None) or {})


# ---------------------------------------------------------------------- Trainer / LightningModule


def attached_trainer(module: object) -> pl.Trainer | None:
    """The Trainer ``module`` is attached to, or ``None`` (a module used on its own, e.g. in a test).

    Reads ``LightningModule._trainer``: the public ``module.trainer`` raises when there is none.
    Public replacement: none in Lightning 2.6.
    """
    return getattr(module, "_trainer", None)


def disable_distributed_sampler(trainer: pl.Trainer) -> bool | None:
    """Turn off the trainer's ``use_distributed_sampler``; whether it was on (``None``: not reachable).

    The data module shards by rank itself; Lightning would wrap its loaders in a
    ``DistributedSampler`` (duplicated evaluation examples, a broken task schedule). The setting
    lives on the private ``trainer._accelerator_connector``. Public replacement:
    ``Trainer(use_distributed_sampler=False)``, which the CLI passes; this covers users' own Trainers.
    """
    connector = getattr(trainer, "_accelerator_connector", None)
    if connector is None or not hasattr(connector, "use_distributed_sampler"):
        return None
    was_on = bool(connector.use_distributed_sampler)
    connector.use_distributed_sampler = False
    return was_on


# ---------------------------------------------------------------------- precision

#: The type of ``Trainer(precision=...)``, for a Trainer subclass that accepts one more value
#: (:class:`~pal_lightning.cli.precision.PalTrainer`). Public replacement: none in Lightning 2.6.
LightningPrecision = _PRECISION_INPUT


def optimizer_unscales_itself(optimizer: object) -> bool:
    """Whether ``optimizer.step()`` unscales fp16 gradients itself (torch's fused optimizers).

    torch marks such optimizers with the private ``_step_supports_amp_scaling``, and Lightning's
    mixed-precision plugin reads the same flag to refuse clipping them. Public replacement: none.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def clip_gradients_unchecked(plugin: Any, optimizer: Any, clip_val: float, algorithm: str | None) -> None:
    """Clip as the base ``Precision`` plugin does, skipping ``MixedPrecision``'s refusal of fused optimizers.

    ``MixedPrecision.clip_gradients`` is the base method plus one check: it refuses an optimizer that
    unscales inside ``step()``, because under fp16 the gradients would still carry the loss scale. Under
    bf16-mixed there is no scale and the check is needless; calling the base class's method on the
    plugin relies on the subclass adding nothing else. Public replacement: none in Lightning 2.6.
    """
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.utilities import GradClipAlgorithmType

    Precision.clip_gradients(plugin, optimizer, clip_val, GradClipAlgorithmType(algorithm or "norm"))


def cpu_bf16_instructions() -> str:
    """The CPU's bf16 matrix instructions torch uses (``"amx"``, ``"avx512_bf16"``, both joined by ``+``),
    or ``""`` for none.

    ``torch.cpu._is_amx_tile_supported``/``_is_avx512_bf16_supported`` ask the CPU-feature table oneDNN
    uses; a torch without them counts as "none" (fp32, never slower). Public replacement: none in torch 2.13.
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


#: The base class of a mode that sees every ATen operator as it is dispatched (benchmarks/op_count.py counts
#: a step's operators with it: the host's work in a launch-bound GPU step). Public replacement: none in
#: torch 2.13 (torch's dispatcher documentation uses it from this private module).
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

#: ``torch._foreach_add_(xs, ys)``: every ``x += y`` of two lists in one operator (one multi-tensor kernel on
#: a GPU), what torch's own foreach optimizers use. GEM's flat write-back adds into every gradient at once
#: with it (pal_lightning.gem.gram). Public replacement: none in torch 2.13.
foreach_add_ = torch._foreach_add_

# ---------------------------------------------------------------------- the DDP launcher


def decided_by_rank_zero(
    name: str, scope: str, decide: Callable[[], str], peek: Callable[[], str] | None = None
) -> str:
    """A value rank 0 decides before ``fit`` (a run folder, a checkpoint) that every rank must share.

    Lightning's DDP launcher starts ranks > 0 as new processes that run the same command with a copy
    of rank 0's environment, and no process group exists yet when the CLI picks its run folder and
    checkpoint. So rank 0 (or a single process) calls ``decide()`` and leaves the value in the
    environment variable ``PAL_<name>``; a launched rank takes it from there when it was decided for
    the same ``scope`` (e.g. the same run root). Public replacement: a broadcast
    (``trainer.strategy.broadcast``), once a CLI hook runs after the process group exists and
    before the loggers are built (none in Lightning 2.6).

    Ranks that ``torchrun`` or ``srun`` started have no parent to inherit from: they call ``peek()``
    (a value without side effects, e.g. a run folder's number that nothing on a rank > 0 uses,
    since ``Trainer.log_dir`` and ``ModelCheckpoint`` broadcast rank 0's folder), else ``decide()``.
    """
    key = f"PAL_{name}"
    prefix = scope + os.pathsep
    inherited = os.environ.get(key, "")
    if is_launched_rank():
        if inherited.startswith(prefix):
            return inherited[len(prefix) :]
        if peek is not None:  # an external launcher's rank > 0
            return peek()
    value = decide()
    os.environ[key] = prefix + value
    return value


#: torch's private compiler packages, named only to tell "compiling failed" from "the model raised" when
#: ``torch.compile`` falls back (training/compile.py). torch has no public base class for compiler
#: errors; if it gains one (a ``torch.compiler`` exception type), test against that instead.
COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch._subclasses")


def validate_during_fit(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Run the fit's validation loop now, as Lightning runs it between training batches.

    Lightning has no public call that validates inside ``fit`` (``trainer.validate`` starts another
    stage and would restart the fit's loops); its fit loop's own validation loop does it. Replace this
    with a public API when Lightning offers one.
    """
    trainer.validating = True  # picks the validation loop's logging and progress bar
    pl_module.on_validation_model_zero_grad()
    try:
        trainer.fit_loop.epoch_loop.val_loop.run()
    finally:
        trainer.training = True
