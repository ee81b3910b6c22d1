"""``pal-lightning fit|validate|test|predict``: LightningCLI with run folders, checkpoints and the score report."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonargparse import Namespace, set_parsing_settings
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.plugins.io import CheckpointIO

from pal_lightning.callbacks.best_checkpoint import BestCheckpoint, LastCheckpoint
from pal_lightning.callbacks.graceful_stop import StopOnSignal
from pal_lightning.callbacks.rng_state import RNGStateCallback
from pal_lightning.callbacks.score_report import ScoreReport
from pal_lightning.callbacks.training_log import TrainingLog
from pal_lightning.cli.console import quiet_lightning
from pal_lightning.cli.help import SUBCOMMAND_HELP, set_subcommand_help
from pal_lightning.cli.precision import PalTrainer
from pal_lightning.cli.run_folders import (
    NAMED_CHECKPOINTS,
    RunConfigSaver,
    evaluation_log_root,
    resolve_named_checkpoint,
    run_folder_of,
    run_loggers,
)
from pal_lightning.core.checkpoint_io import AtomicCheckpointIO, check_is_checkpoint
from pal_lightning.core.distributed import decided_by_rank_zero, is_launched_rank, launcher_world_size
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import CLIHooks
from pal_lightning.core.strategies import check_strategy_name

_UNION_ERROR = "Does not validate against any of the Union subtypes"
DEFAULT_ROOT_DIR = "runs"
MONITOR = "val/overall"
_SHARED_RESUME = "RESUME_CKPT"


def default_trainer_settings() -> dict[str, Any]:
    """Trainer defaults of the CLI (a config can override every one but the callbacks)."""
    # rich assumes 80 columns when the output is a file or a pipe and wraps the metrics under the bar
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return {
        "default_root_dir": DEFAULT_ROOT_DIR,
        "use_distributed_sampler": False,  # the task batch sampler shards per rank
        "callbacks": [
            RichProgressBar(leave=True, console_kwargs={"width": 200} if wide else None),
            TrainingLog(),
            ScoreReport(monitor=MONITOR),
            RNGStateCallback(),
            StopOnSignal(),  # last: it writes last.ckpt after the others' batch-end work (SIGTERM, Ctrl-C)
        ],
    }


def named_subcommand(args: Any, subcommands: Mapping[str, Any]) -> str | None:
    """The subcommand ``args`` names first (``fit`` of ``fit --config x``), else ``None``."""
    if isinstance(args, list | tuple) and args and isinstance(args[0], str) and args[0] in subcommands:
        return args[0]
    return None


class PalLightningCLI(CLIHooks):
    """LightningCLI for ``MultiTaskModule`` and ``MultiTaskDataModule`` (both in subclass mode).

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
        argv = sys.argv[1:] if args is None else args
        chosen = named_subcommand(argv, type(self).subcommands())
        if chosen is not None:  # building a subcommand's parser is most of the start-up: only the named one
            only = {chosen: type(self).subcommands()[chosen]}
            self.subcommands = lambda: only  # type: ignore[method-assign]  # shadows the static method
        if model_class is None:
            from pal_lightning.module.multitask import MultiTaskModule as model_class
        if datamodule_class is None:
            from pal_lightning.data import MultiTaskDataModule as datamodule_class
        quiet_lightning()
        # the help of a grouped option (--model.optim.lr) is its dataclass field's docstring; reading those
        # parses the source of every class in the signatures (~1 s per start), so only for a help screen.
        # The setting is process-wide: set either way, so that a help screen shown in a process that goes
        # on (a notebook, the tests) does not slow its later commands
        helping = any(a in ("-h", "--help") or ".help" in a for a in argv)
        set_parsing_settings(docstring_parse_attribute_docstrings=helping)
        trainer_defaults = {**default_trainer_settings(), **kwargs.pop("trainer_defaults", {})}
        # exit_on_error=False: parse errors raise ArgumentError, which main() prints as one line;
        # allow_abbrev=False: argparse would take --trainer.max_step 7 as --trainer.max_steps
        strict = {"exit_on_error": False, "allow_abbrev": False}
        parser_kwargs = {
            **strict,
            "prog": "pal-lightning",
            "description": "Multi-task fine-tuning of Transformer encoders with per-task methods, "
            "e.g. pal-lightning fit --config configs/quickstart.yaml (masked-language pre-training of the "
            "encoder: pal-lightning pretrain --help)",
            **{cmd: {**strict, "description": SUBCOMMAND_HELP[cmd]} for cmd in self.subcommands()},
        }
        parser_kwargs.update(kwargs.pop("parser_kwargs", {}))
        kwargs.setdefault("seed_everything_default", 42)
        kwargs.setdefault("trainer_class", PalTrainer)  # precision: auto
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
        classes: dict[str, Any] = {"model": self.model_class, "data": self.datamodule_class}
        parser.set_defaults(
            {key: {"class_path": f"{c.__module__}.{c.__qualname__}"} for key, c in classes.items()}
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        from pal_lightning.callbacks.prediction_writer import PredictionWriter
        from pal_lightning.callbacks.save_pretrained import SavePretrainedModel

        self.set_default_classes(parser)
        # given once on the model, copied to the data module (in subclass mode targets need init_args)
        parser.link_arguments("model.init_args.encoder", "data.init_args.tokenizer")
        parser.link_arguments("model.init_args.encoder_revision", "data.init_args.tokenizer_revision")
        parser.link_arguments("model.init_args.tasks", "data.init_args.tasks")
        parser.link_arguments("model.init_args.pair_encoding", "data.init_args.pair_encoding")

        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        best = {"monitor": MONITOR, "mode": "max", "save_top_k": 1, "auto_insert_metric_name": False}
        best["filename"] = "best-step{step}-overall{val/overall:.4f}"
        parser.set_defaults({f"checkpoint.{k}": v for k, v in best.items()})
        # a second ModelCheckpoint owns last.ckpt, so that two callbacks never write the same file
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        last = {"monitor": None, "save_top_k": 0, "save_last": True}
        parser.set_defaults({f"last_checkpoint.{k}": v for k, v in last.items()})
        parser.add_lightning_class_args(PredictionWriter, "predictions")
        parser.add_lightning_class_args(SavePretrainedModel, "save_model")

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]
    ) -> None:
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if add_subcommands:
            set_subcommand_help(self.parser)

    def configure_subcommand_parser(
        self, parser: LightningArgumentParser, subcommand: str, method_arguments: list[str]
    ) -> None:
        if "weights_only" in method_arguments:
            # checkpoints can run code when unpickled: load only tensors and plain values by default
            parser.set_defaults(weights_only=True)
        if subcommand in ("validate", "test"):
            # ScoreReport prints the table; Lightning's would repeat it
            parser.set_defaults(verbose=False)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        # without LightningCLI's warning that sys.argv holds arguments too: in-process calls pass args
        if args is None:
            super().parse_arguments(parser, args)
        elif isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
        else:
            self.config = parser.parse_args(args)

    def before_instantiate_classes(self) -> None:
        """Check the config, and point validate/test/predict of a checkpoint at that checkpoint's run."""
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
        # predict into a folder of the user's choice: no log folders (predict logs no metrics)
        self._no_logs = self.subcommand == "predict" and config.get("predictions.output_dir") is not None
        if self.subcommand == "fit" or not ckpt:
            return
        self._log_root = evaluation_log_root(ckpt, self.subcommand)
        ckpt_dir = Path(ckpt).parent  # as written: ModelCheckpoint compares its dirpath literally
        for group in ("checkpoint", "last_checkpoint"):
            if config.get(f"{group}.dirpath") is None:
                config[f"{group}.dirpath"] = str(ckpt_dir)
        if self.subcommand == "predict" and config.get("predictions.output_dir") is None:
            run_dir = ckpt_dir.parent if ckpt_dir.name == "checkpoints" else ckpt_dir
            if os.access(run_dir, os.W_OK):
                config["predictions.output_dir"] = str(run_dir / "predictions")

    # the config says what the model is (MultiTaskModule.on_load_checkpoint names the differences)
    merge_checkpoint_hparams = False

    def _resolve_ckpt_path(self, config: Any) -> str | None:
        """Resolve ``--ckpt_path last`` / ``best`` and check a given file; ``None`` without one or for Lightning's values."""
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
            return None
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
        check_is_checkpoint(ckpt)  # said before the model is built
        return ckpt

    def instantiate_classes(self) -> None:
        """Instantiate the classes; a rejected ``__init__`` value becomes a :class:`PalUserError` (``PAL_DEBUG=1``: traceback)."""
        try:
            super().instantiate_classes()
        except ValueError as exc:
            if isinstance(exc, PalUserError) or _UNION_ERROR not in str(exc) or os.environ.get("PAL_DEBUG"):
                raise
            raise PalUserError(f"Invalid configuration:\n{exc}") from exc

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer, logging into a fresh run folder and writing checkpoints atomically unless configured otherwise."""
        trainer_key = f"{self.subcommand}.trainer" if self.subcommand else "trainer"
        config = {**(self.config_init.get(trainer_key) or {}), **kwargs}
        check_strategy_name(config.get("strategy"))  # before a run folder exists
        defaults = self.trainer_defaults
        if config.get("enable_progress_bar") is False:  # Lightning rejects a progress bar callback then
            callbacks_default = [c for c in defaults.get("callbacks", []) if not isinstance(c, ProgressBar)]
            self.trainer_defaults = {**defaults, "callbacks": callbacks_default}
        if config.get("logger") in (None, True) and getattr(self, "_no_logs", False):
            kwargs["logger"] = False
            self.save_config_callback = None  # it would write config.yaml into default_root_dir
        elif config.get("logger") in (None, True):
            root = getattr(self, "_log_root", None) or config.get("default_root_dir") or DEFAULT_ROOT_DIR
            kwargs["logger"] = run_loggers(root)
        plugins = config.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())
        kwargs["plugins"] = plugins
        try:
            trainer = super().instantiate_trainer(**kwargs)
        finally:
            self.trainer_defaults = defaults
        started = launcher_world_size()  # torchrun/srun: every process would otherwise train alone
        if started is not None and started != trainer.world_size:
            raise PalUserError(
                f"The launcher started {started} processes, but the Trainer runs {trainer.world_size} "
                "(devices x num_nodes under a DDP strategy): set --trainer.strategy ddp, "
                "--trainer.devices to the processes per node (torchrun "
                "--nproc_per_node, SLURM --ntasks-per-node) and --trainer.num_nodes to the number of nodes."
            )
        return trainer
