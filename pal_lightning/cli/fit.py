"""The ``pal-lightning`` command line: LightningCLI with ``fit``, ``validate``, ``test`` and ``predict``.

Usage::

    pal-lightning fit --config configs/quickstart.yaml
    pal-lightning fit --config configs/pals_annealed.yaml --trainer.max_steps 2000 --data.data_dir ~/data
    pal-lightning predict --config runs/quickstart/version_0/config.yaml \\
        --ckpt_path runs/quickstart/version_0/checkpoints/best.ckpt
    pal-lightning pretrain --config configs/pretrain_mlm.yaml   # MLM on the task text (pal_lightning.pretraining)

What this CLI adds to a plain ``LightningCLI``:

* model and data in subclass mode (``model.class_path: my_pkg.MyModule`` loads a user's subclass);
* the encoder, the task list and the pair encoding are set once on the model and linked to the
  data module (``model.init_args.encoder -> data.init_args.tokenizer``, ``tasks``, ``pair_encoding``);
* ``auto_configure_optimizers=False``: the module builds its own AdamW with a per-step
  warmup + linear decay schedule;
* every run logs into a fresh ``<default_root_dir>/version_N`` directory (CSV and TensorBoard), the
  resolved config is saved there and a rerun never overwrites another run's config, checkpoints
  or predictions;
* a checkpoint on ``val/overall`` (max), rich progress bar, learning-rate monitor, and a score
  report that prints the CS224N overall score at the end of ``fit``;
* exact kill-and-resume: a ``last.ckpt`` written at every validation (or every
  ``--last_checkpoint.every_n_train_steps N`` steps) by its own callback, the random generators of
  every rank in each checkpoint (:class:`~pal_lightning.callbacks.rng_state.RNGStateCallback`),
  atomic checkpoint writes (:class:`~pal_lightning.core.checkpoint_io.AtomicCheckpointIO`), and
  ``--ckpt_path last`` = the newest ``*/checkpoints/last.ckpt`` under ``trainer.default_root_dir``
  (the resumed run logs into a new ``version_N``);
* checkpoints are loaded with ``weights_only=True`` (``--weights_only false`` for a trusted file
  that needs more);
* user mistakes end with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import (
    ProgressBar,
)
from lightning.pytorch.cli import LightningArgumentParser, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.plugins.io import CheckpointIO

from pal_lightning.callbacks.best_checkpoint import BestCheckpoint, LastCheckpoint
from pal_lightning.callbacks.fit_summary import FitSummary
from pal_lightning.callbacks.graceful_stop import StopOnSignal
from pal_lightning.callbacks.rng_state import RNGStateCallback
from pal_lightning.callbacks.score_report import ScoreReport
from pal_lightning.callbacks.training_log import TrainingLog
from pal_lightning.cli.console import ConsoleProgressBar, quiet_lightning
from pal_lightning.cli.help import (
    SUBCOMMAND_HELP,
    set_subcommand_help,
)
from pal_lightning.cli.precision import PalTrainer
from pal_lightning.cli.run_folders import (
    NAMED_CHECKPOINTS,
    claim_version_dir,
    discard_unused,
    evaluation_log_root,
    find_newest,
    next_version_dir,
    resolve_named_checkpoint,
    run_folder_of,
)
from pal_lightning.core.checkpoint_io import AtomicCheckpointIO, check_is_checkpoint
from pal_lightning.core.distributed import (
    is_launched_rank,
    is_main_process,
    launcher_world_size,
)
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write_via, free_name
from pal_lightning.core.private_api import CLIHooks, decided_by_rank_zero

#: The exit status for user mistakes (bad option, missing data, unknown encoder ...).
USER_ERROR_EXIT = 2

_UNION_ERROR = "Does not validate against any of the Union subtypes"
#: Where runs go when a config sets no ``trainer.default_root_dir``.
DEFAULT_ROOT_DIR = "runs"
#: The CS224N score that picks the best checkpoint.
MONITOR = "val/overall"
#: ``--ckpt_path`` value that picks the newest ``last.ckpt`` under the run root.
LAST = "last"
#: Names under which rank 0 passes the run version and the resumed checkpoint to the DDP processes it
#: launches (environment variables ``PAL_RUN_VERSION``, ``PAL_RESUME_CKPT``: compat.decided_by_rank_zero).
_SHARED_VERSION = "RUN_VERSION"
_SHARED_RESUME = "RESUME_CKPT"


def default_trainer_settings() -> dict[str, Any]:
    """Trainer defaults of the CLI (a config or the command line can override every one but the callbacks).

    ``use_distributed_sampler=False`` because the data module brings its own task batch sampler
    that already shards per rank (and draws the same task on every rank).
    """
    return {
        "default_root_dir": DEFAULT_ROOT_DIR,
        "use_distributed_sampler": False,
        # FitSummary prints one line instead (Lightning's table reports "Total FLOPs: 0")
        "enable_model_summary": False,
        "callbacks": [
            FitSummary(),
            ConsoleProgressBar(leave=True),
            TrainingLog(),  # task, steps per task, throughput, grad norm, distinct learning rates
            ScoreReport(monitor=MONITOR),
            RNGStateCallback(),
            StopOnSignal(),  # last: it writes last.ckpt after the others' batch-end work (SIGTERM, Ctrl-C)
        ],
    }


def find_last_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The newest ``last*.ckpt`` in ``<root>/*/checkpoints/`` (or ``<root>/checkpoints/``), or ``None``.

    Newest by modification time, ties broken by the higher ``version_N``: a resumed run writes its
    own ``last.ckpt`` into its new folder, so the next ``--ckpt_path last`` continues from there.
    """
    return find_newest(root, "last*.ckpt")


def run_loggers(root_dir: str | os.PathLike[str]) -> list[Any]:
    """CSV and TensorBoard loggers that write into the same fresh ``<root_dir>/version_N`` directory.

    Both loggers get the same explicit version, so the run's files (``metrics.csv``, ``config.yaml``,
    ``checkpoints/``, ``tensorboard/`` events, predictions) end up in one directory.
    """
    # absolute, so that the checkpoint folder recorded in checkpoints matches the one that
    # validate/test/predict later derive from --ckpt_path (ModelCheckpoint makes given paths absolute)
    root = os.path.abspath(root_dir)
    # an int version gives the folder "version_N" and shows N (not "on_N") in the progress bar
    # a DDP process launched by rank 0 logs where rank 0 does (rank 0 may have created it already)
    # (a rank > 0 that torchrun/srun started only peeks: claiming would leave an empty folder behind)
    peek = lambda: next_version_dir(root).split("_")[-1]  # noqa: E731
    version = int(decided_by_rank_zero(_SHARED_VERSION, root, lambda: _new_version(root), peek))
    return [
        CSVLogger(save_dir=root, name="", version=version),
        # no hp_metric: it would stay at its placeholder -1 (the scores are the val/* metrics)
        TensorBoardLogger(
            save_dir=root, name="", version=version, sub_dir="tensorboard", default_hp_metric=False
        ),
    ]


def _new_version(root: str) -> str:
    """Claim the next ``version_N`` folder under ``root`` (remembered for removal if the command fails)."""
    top = Path(root)
    while not top.parent.exists() and top.parent != top:
        top = top.parent  # the topmost folder this run creates, when root does not exist yet
    created_root = not Path(root).exists()
    folder = claim_version_dir(root)
    _NEW_FOLDERS.append((folder, top if created_root else folder))
    return folder.name.split("_")[-1]


#: Log folders this process created, with the topmost folder it created for each (removed on failure).
_NEW_FOLDERS: list[tuple[Path, Path]] = []


def discard_new_folders() -> None:
    """Remove the log folders this failed command created, unless they hold checkpoints or predictions."""
    while _NEW_FOLDERS:
        folder, top = _NEW_FOLDERS.pop()
        discard_unused(folder, stop=top.parent)


class RunConfigSaver(SaveConfigCallback):
    """Save the resolved config into the run's log directory without ever overwriting a file.

    With the CLI's default loggers every run has its own ``version_N`` directory, so the config
    lands in ``config.yaml``. When a user logger (or ``logger: false``) makes two runs share a
    directory, the second config is saved as ``config_1.yaml`` (``config_2.yaml``, ...) instead of
    crashing the run or replacing the first run's config. The file is written atomically
    (:func:`~pal_lightning.core.files.atomic_write_via`): a full disk leaves no half-written config.
    """

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        log_dir = None if self.already_saved or not self.save_to_log_dir else trainer.log_dir
        if log_dir is None or self.multifile or "://" in log_dir:
            super().setup(trainer, pl_module, stage)  # Lightning's own writer (several or remote files)
            return
        if is_main_process(trainer):
            name = self.config_filename
            if not self.overwrite:
                stem, suffix = os.path.splitext(name)
                name = free_name(log_dir, stem, (suffix,)) + suffix
            self.config_filename = name

            def write(tmp: str) -> None:  # what Lightning's setup writes, into a temporary file
                self.parser.save(self.config, tmp, skip_none=False, overwrite=True, multifile=False)

            atomic_write_via(os.path.join(log_dir, name), write)
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        # every rank, as Lightning's setup does: the same name and state on all ranks
        self.config_filename = trainer.strategy.broadcast(self.config_filename)
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


def _class_path(cls: Any) -> str:
    """``module.QualifiedName`` of a class, as a config's ``class_path`` names it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def named_subcommand(args: Any, subcommands: Mapping[str, Any]) -> str | None:
    """The subcommand a command line names first (``fit`` of ``fit --config x``), ``None`` when it names none
    (``--help``, ``--version``) or ``args`` is not a list of strings."""
    if isinstance(args, list | tuple) and args and isinstance(args[0], str) and args[0] in subcommands:
        return args[0]
    return None


class PalLightningCLI(CLIHooks):
    """LightningCLI for :class:`~pal_lightning.module.multitask.MultiTaskModule` and
    :class:`~pal_lightning.data.MultiTaskDataModule` (both in subclass mode).

    Args:
        model_class: base class of the model (``MultiTaskModule`` unless given).
        datamodule_class: base class of the data module (``MultiTaskDataModule`` unless given).
        args: command-line arguments (``None`` reads ``sys.argv``).
        **kwargs: passed to :class:`~lightning.pytorch.cli.LightningCLI`.
    """

    def __init__(
        self,
        model_class: type | None = None,
        datamodule_class: type | None = None,
        args: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        chosen = named_subcommand(sys.argv[1:] if args is None else args, type(self).subcommands())
        if chosen is not None:
            # Building a subcommand's parser is most of a command's start-up (about 70 % of 2.2 s of CPU);
            # a command names one, so only its parser is built. An instance attribute shadows the static
            # method for every lookup Lightning makes through self.
            only = {chosen: type(self).subcommands()[chosen]}
            self.subcommands = lambda: only  # type: ignore[method-assign]
        if model_class is None:
            from pal_lightning.module.multitask import MultiTaskModule as model_class
        if datamodule_class is None:
            from pal_lightning.data import MultiTaskDataModule as datamodule_class
        quiet_lightning()
        trainer_defaults = {**default_trainer_settings(), **kwargs.pop("trainer_defaults", {})}
        # exit_on_error=False: parse errors raise ArgumentError, which main() prints as one line
        parser_kwargs = {
            "exit_on_error": False,
            "prog": "pal-lightning",
            "description": "Multi-task fine-tuning of BERT encoders with Projected Attention Layers, "
            "e.g. pal-lightning fit --config configs/quickstart.yaml (masked-language pre-training of the "
            "encoder: pal-lightning pretrain --help)",
            # allow_abbrev=False: argparse would take --trainer.max_step 7 as --trainer.max_steps
            "allow_abbrev": False,
            **{
                cmd: {"exit_on_error": False, "allow_abbrev": False, "description": SUBCOMMAND_HELP[cmd]}
                for cmd in self.subcommands()
            },
        }
        parser_kwargs.update(kwargs.pop("parser_kwargs", {}))
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("trainer_class", PalTrainer)  # Lightning's Trainer, with trainer.precision: auto
        kwargs.setdefault("save_config_callback", RunConfigSaver)
        kwargs.setdefault("save_config_kwargs", {"overwrite": False})
        super().__init__(
            model_class,
            datamodule_class,
            subclass_mode_model=True,
            subclass_mode_data=True,
            auto_configure_optimizers=False,
            trainer_defaults=trainer_defaults,
            parser_kwargs=parser_kwargs,
            args=args,
            **kwargs,
        )

    def set_default_classes(self, parser: LightningArgumentParser) -> None:
        """The CLI's model and data classes as the defaults of ``--model`` and ``--data``."""
        parser.set_defaults(
            {
                "model": {"class_path": _class_path(self.model_class)},
                "data": {"class_path": _class_path(self.datamodule_class)},
            }
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Default classes, the model -> data links, the checkpoint and the prediction writer."""
        from pal_lightning.callbacks.prediction_writer import PredictionWriter
        from pal_lightning.callbacks.save_pretrained import SavePretrainedModel

        self.set_default_classes(parser)
        # given once on the model, copied to the data module (in subclass mode targets need init_args)
        parser.link_arguments("model.init_args.encoder", "data.init_args.tokenizer")
        parser.link_arguments("model.init_args.encoder_revision", "data.init_args.tokenizer_revision")
        parser.link_arguments("model.init_args.tasks", "data.init_args.tasks")
        parser.link_arguments("model.init_args.pair_encoding", "data.init_args.pair_encoding")

        # BestCheckpoint: a ModelCheckpoint that never ranks a partial validation (val/overall_partial)
        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": MONITOR,
                "checkpoint.mode": "max",
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-step{step}-overall{val/overall:.4f}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        # a second ModelCheckpoint owns last.ckpt (the one above keeps save_last off, so that two
        # callbacks never write the same file): after every validation by default, or every N steps
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")  # links to best at the same step
        parser.set_defaults(
            {
                "last_checkpoint.monitor": None,
                "last_checkpoint.save_top_k": 0,
                "last_checkpoint.save_last": True,
            }
        )
        parser.add_lightning_class_args(PredictionWriter, "predictions")
        # <run>/model: a save_pretrained folder of the best checkpoint when fit ends
        parser.add_lightning_class_args(SavePretrainedModel, "save_model")

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands:
            set_subcommand_help(self.parser)  # whole sentences instead of Trainer docstrings cut in half

    def configure_subcommand_parser(
        self, parser: LightningArgumentParser, subcommand: str, method_arguments: list[str]
    ) -> None:
        if "weights_only" in method_arguments:
            # checkpoints can run code when unpickled: load only tensors and plain values by default
            parser.set_defaults(weights_only=True)
        if subcommand in ("validate", "test"):
            # ScoreReport prints the score table (Lightning's would repeat it)
            parser.set_defaults(verbose=False)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse ``args`` when given, else ``sys.argv``.

        Unlike LightningCLI's, it does not warn that ``sys.argv`` holds arguments too: :func:`main`
        passes ``args`` on purpose (in-process calls, ``pretrain``), where ``sys.argv`` belongs to
        the host program (pytest, a notebook) or is ``pal-lightning pretrain ...`` itself.
        """
        if args is None:
            super().parse_arguments(parser, args)
        elif isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def before_instantiate_classes(self) -> None:
        """Point validate/test/predict from a checkpoint back at that checkpoint's run.

        Predictions go to ``<run>/predictions`` of the checkpoint's run when no ``output_dir`` is
        given, and the checkpoint callback keeps the checkpoint's folder (it never saves outside
        ``fit``; the same folder just lets its restored state match).
        """
        if self.subcommand is None:
            return
        config = self.config[self.subcommand]
        if config.get("checkpoint.save_last") and config.get("last_checkpoint.save_last"):
            raise PalUserError(
                "checkpoint.save_last and last_checkpoint.save_last would both write last.ckpt. Leave "
                "checkpoint.save_last off: the last_checkpoint callback writes last.ckpt (set "
                "--last_checkpoint.every_n_train_steps N to write it every N steps)."
            )
        if self.subcommand == "fit" and config.get("trainer.max_steps") == 0:
            raise PalUserError(
                "trainer.max_steps is 0, which trains nothing. Give the number of optimizer steps (e.g. "
                "--trainer.max_steps 1200), or -1 to train for --trainer.max_epochs epochs."
            )
        ckpt = self._resolve_ckpt_path(config)
        self._log_root = None
        # predict into a folder of the user's choice: no log folders (predict logs no metrics), neither
        # in the checkpoint's run nor anywhere else
        self._no_logs = self.subcommand == "predict" and config.get("predictions.output_dir") is not None
        if self.subcommand == "fit" or not ckpt:
            return
        # evaluations of a run's checkpoint log into that run (<run>/validate/version_N ...)
        self._log_root = evaluation_log_root(ckpt, self.subcommand)
        ckpt_dir = Path(ckpt).parent  # as written: ModelCheckpoint compares its dirpath literally
        for group in ("checkpoint", "last_checkpoint"):
            if config.get(f"{group}.dirpath") is None:
                config[f"{group}.dirpath"] = str(ckpt_dir)
        if self.subcommand == "predict" and config.get("predictions.output_dir") is None:
            run_dir = ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir
            if os.access(run_dir, os.W_OK):  # else: <new run folder>/predictions (a read-only run)
                config["predictions.output_dir"] = str(run_dir / "predictions")

    #: A checkpoint's hyper-parameters never replace the model configuration. LightningCLI (2.6)
    #: loads a ``--ckpt_path`` file while parsing and puts its ``hyper_parameters`` over the config,
    #: command line included: a configured task list, dropout or ``max_nonfinite_steps`` would be
    #: silently replaced, and the file would be read before any check. Here the config says what the
    #: model is, and :meth:`MultiTaskModule.on_load_checkpoint` stops with a message naming every
    #: difference that matters (tasks, encoder, adapter shape) and the run's ``config.yaml`` to use.
    merge_checkpoint_hparams = False

    def _resolve_ckpt_path(self, config: Any) -> str | None:
        """Resolve ``--ckpt_path last`` / ``best`` and check that a given checkpoint file exists.

        ``last``/``best`` with a run's own ``config.yaml`` is that run's ``last.ckpt``/``best.ckpt``;
        otherwise the newest one under ``trainer.default_root_dir``
        (:func:`~pal_lightning.cli.run_folders.resolve_named_checkpoint`).

        Returns:
            the checkpoint path (``None`` without one, or for Lightning's other special values).

        Raises:
            PalUserError: for ``last``/``best`` when there is no such file, a missing file or a folder.
        """
        ckpt = config.get("ckpt_path")
        if not ckpt:
            return None
        ckpt = str(ckpt)
        if ckpt in NAMED_CHECKPOINTS:
            root = os.path.abspath(config.get("trainer.default_root_dir") or DEFAULT_ROOT_DIR)
            configs = [getattr(c, "absolute", None) or str(c) for c in config.get("config") or []]
            run = run_folder_of(configs)
            decide = lambda: str(resolve_named_checkpoint(ckpt, root, run))  # noqa: E731
            found = Path(decided_by_rank_zero(_SHARED_RESUME, root, decide))
            if not is_launched_rank():
                print(
                    f"pal-lightning: {'resuming' if self.subcommand == 'fit' else 'loading'} from {found}"
                    + ("; this run logs into a new version folder." if self.subcommand == "fit" else ""),
                    file=sys.stderr,
                    flush=True,
                )
            config["ckpt_path"] = str(found)
            return str(found)
        if ckpt in ("hpc", "registry") or ckpt.startswith("registry:") or "://" in ckpt:
            return None  # Lightning's own special values and remote files
        if Path(ckpt).is_dir():
            raise PalUserError(
                f"Checkpoint path {ckpt} is a folder, not a file: --ckpt_path takes a .ckpt file (e.g. "
                f"{Path(ckpt) / 'checkpoints' / 'best.ckpt'}), or --ckpt_path best / last with the run's "
                "config.yaml."
            )
        if not Path(ckpt).is_file():
            raise PalUserError(
                f"Checkpoint {ckpt} does not exist. Pass the path of a .ckpt file to --ckpt_path, or "
                "--ckpt_path last for the newest last.ckpt under trainer.default_root_dir."
            )
        check_is_checkpoint(ckpt)  # README.md, an empty file ...: said before the model is built
        return ckpt

    def instantiate_classes(self) -> None:
        """Instantiate model, data and trainer; a rejected config value becomes a :class:`PalUserError`.

        jsonargparse wraps errors raised by ``__init__`` of a subclass-mode class (e.g. an unknown task
        name) in a "Does not validate against any of the Union subtypes" ``ValueError``; that is a
        configuration mistake, reported in one line. Set ``PAL_DEBUG=1`` to see the traceback instead.
        """
        try:
            super().instantiate_classes()
        except ValueError as exc:
            if isinstance(exc, PalUserError) or _UNION_ERROR not in str(exc) or os.environ.get("PAL_DEBUG"):
                raise
            raise PalUserError(f"Invalid configuration:\n{exc}") from exc

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, logging into a fresh run folder and writing checkpoints atomically.

        Unless the configuration names its own: loggers (``logger: null``/``true`` gets the CSV and
        TensorBoard loggers of :func:`run_loggers`; ``predict`` with ``--predictions.output_dir`` gets
        none and saves no config, so that it creates no log folder), a checkpoint I/O plugin
        (:class:`~pal_lightning.core.checkpoint_io.AtomicCheckpointIO` is added), and without
        a progress bar (``enable_progress_bar: false``) the default one is left out.
        """
        trainer_key = f"{self.subcommand}.trainer" if self.subcommand else "trainer"
        config = {**(self.config_init.get(trainer_key) or {}), **kwargs}
        defaults = self.trainer_defaults
        if config.get("enable_progress_bar") is False:
            # a progress bar callback with enable_progress_bar=False is an error in Lightning
            callbacks_default = [c for c in defaults.get("callbacks", []) if not isinstance(c, ProgressBar)]
            self.trainer_defaults = {**defaults, "callbacks": callbacks_default}
        if config.get("logger") in (None, True) and getattr(self, "_no_logs", False):
            kwargs["logger"] = False
            self.save_config_callback = None  # it would write config.yaml into default_root_dir
        elif config.get("logger") in (None, True):
            root = getattr(self, "_log_root", None) or config.get("default_root_dir") or DEFAULT_ROOT_DIR
            kwargs["logger"] = run_loggers(root)
        plugins = config.get("plugins")
        plugins = (
            [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        )
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())  # crash-safe writes, one-line errors for bad files
        kwargs["plugins"] = plugins
        try:
            trainer = super().instantiate_trainer(**kwargs)
        finally:
            self.trainer_defaults = defaults
        started = launcher_world_size()  # torchrun/srun: every process would otherwise train alone
        if started is not None and started != trainer.world_size:
            raise PalUserError(
                f"The launcher started {started} processes, but the Trainer runs {trainer.world_size} "
                "(devices x num_nodes under a DDP strategy): set --trainer.strategy "
                "ddp_find_unused_parameters_true, --trainer.devices to the processes per node (torchrun "
                "--nproc_per_node, SLURM --ntasks-per-node) and --trainer.num_nodes to the number of nodes."
            )
        return trainer

