"""``pal-lightning pretrain``: masked-language pre-training through a LightningCLI of its own.

A command of its own because the ``fit`` CLI is built around ``MultiTaskModule``; it shares the run
folders, saved config, atomic checkpoints and one-line errors. A resumed run continues the steps, the
schedule and the mask stream, but restarts its epoch's sentence order (not bit-exact mid-epoch).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, RichProgressBar
from lightning.pytorch.cli import LightningArgumentParser

from pal_lightning.cli.fit import PalLightningCLI

MONITOR = "val/mlm_loss"


class PretrainCLI(PalLightningCLI):
    """The ``pretrain`` command: ``MLMPretrainModule`` on ``MLMDataModule``, no subcommands (it always fits)."""

    def __init__(self, args: list[str] | None = None, **kwargs: Any) -> None:
        from pal_lightning.pretraining import MLMDataModule, MLMPretrainModule

        kwargs.setdefault(
            "trainer_defaults",
            {
                "default_root_dir": "runs/pretrain_mlm",
                # plain DataLoaders: under DDP Lightning's DistributedSampler shards the sentences
                "use_distributed_sampler": True,
                "callbacks": [RichProgressBar(leave=True), LearningRateMonitor(logging_interval="step")],
            },
        )
        description = "Masked-language pre-training of an encoder on the tasks' text, e.g. "
        description += "pal-lightning pretrain --config configs/pretrain_mlm.yaml"
        kwargs.setdefault("parser_kwargs", {"prog": "pal-lightning pretrain", "description": description})
        super().__init__(MLMPretrainModule, MLMDataModule, args=args, run=False, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        self.set_default_classes(parser)
        parser.link_arguments("model.init_args.encoder", "data.init_args.tokenizer")
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="Resume pre-training from this checkpoint, or 'last': the newest last.ckpt under "
            "trainer.default_root_dir (the resumed run writes its encoder into its own new run folder).",
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        best = {
            "monitor": MONITOR,
            "mode": "min",
            "save_top_k": 1,
            "save_last": True,
            "filename": "best-{step}",
        }
        parser.set_defaults({f"checkpoint.{k}": v for k, v in best.items()})

    def before_instantiate_classes(self) -> None:
        self.ckpt_path = self._resolve_ckpt_path(self.config)


def run_pretrain(args: list[str]) -> None:
    """Parse ``args`` (what follows ``pal-lightning pretrain``), fit, and write the encoder folder."""
    cli = PretrainCLI(args=args)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.ckpt_path)
